// tests/models/model_dir_test.cc — src/models/model_dir.cc: a trained model directory's files
// (path, config_json, the vocabulary and SentencePiece files and their removal rules, load_tokenizer,
// read_config_section and its errors), load_model_dir of a directory written by a tiny training run,
// require_data, and decoding with predict / translate_lines.
//
// Method: files are written by the functions under test (or by hand, for the broken ones) in a fresh
// temporary directory, and read back; every error is checked by its message, which must name the
// file. Decoding is checked against decode() on one source at a time (the batched, length-sorted
// predict must give each source its own prediction, in input order) and, for the encoder, against
// the argmax of Model::forward. Models are tiny (width 16): the whole file runs in about a second.
#include "tfm/models/model_dir.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/file_util.h"
#include "models/model_configs.h"
#include "test_util.h"
#include "tfm/data/tasks.h"
#include "tfm/data/tsv.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/train/trainer.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using data::Tokenization;
using data::Vocab;
using testing::temp_dir;

// Runs f and returns the message of the exception of type E it throws ("(no exception)" when none).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

std::string config_file(const std::string& dir) { return dir + "/config.json"; }

// ---- the files ----------------------------------------------------------------------------------------

TEST(ModelDirFiles, PathJoinsDirectoryAndFile) {
  EXPECT_EQ(model_dir::path("a/b", model_dir::CONFIG), "a/b/config.json");
  EXPECT_EQ(model_dir::path("a/b/", model_dir::MODEL), "a/b/model.safetensors");
  EXPECT_EQ(model_dir::path("/x", model_dir::JOINT_SPM), "/x/spm.model");
}

TEST(ModelDirFiles, ConfigJsonHoldsFormatVersionModelTrainAndVocab) {
  const ModelConfig mc = testing::small_seq2seq();
  const Vocab src = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"});
  const Vocab tgt = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "x"});
  const std::string text = model_dir::config_json(mc, R"({"lr": 0.5, "seed": 3})", src, tgt, Tokenization::CHAR,
                                                  Tokenization::SPACE);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "version", "model", "train", "vocab"}));
  EXPECT_EQ(j.at("format"), "tfm-train");
  EXPECT_EQ(j.at("version"), model_dir::FORMAT_VERSION);
  EXPECT_EQ(j.at("model"), nlohmann::ordered_json::parse(mc.to_json()));
  EXPECT_EQ(j.at("train"), nlohmann::ordered_json::parse(R"({"lr": 0.5, "seed": 3})"));
  EXPECT_EQ(j.at("vocab"), nlohmann::ordered_json::parse(R"({"src": "src_vocab.txt", "tgt": "tgt_vocab.txt",
      "src_size": 7, "tgt_size": 5, "src_tokens": "char", "tgt_tokens": "space"})"));
  const nlohmann::ordered_json jv = nlohmann::ordered_json::parse(
      model_dir::config_json(mc, "{}", src, tgt, Tokenization::SPM, Tokenization::BYTE, /*json_vocab=*/true));
  EXPECT_EQ(jv.at("vocab").at("src"), "src_vocab.json");
  EXPECT_EQ(jv.at("vocab").at("tgt"), "tgt_vocab.json");
  EXPECT_EQ(jv.at("vocab").at("src_tokens"), "spm");
  EXPECT_EQ(jv.at("vocab").at("tgt_tokens"), "byte");

  // What it writes, read_config_section reads back.
  const std::string d = testing::temp_dir("md_config");
  testing::spit(config_file(d), text);
  EXPECT_EQ(nlohmann::ordered_json::parse(model_dir::read_config_section(d, "vocab")), j.at("vocab"));
  EXPECT_EQ(nlohmann::ordered_json::parse(model_dir::read_config_section(d, "train")), j.at("train"));
  EXPECT_EQ(ModelConfig::from_json(model_dir::read_config_section(d, "model")).to_json(), mc.to_json());
  fs::remove_all(d);
}

TEST(ModelDirFiles, SaveVocabsWritesOneFormatAndRemovesTheOther) {
  const std::string d = testing::temp_dir("md_vocabs");
  const Vocab src = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b"});
  const Vocab tgt = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "x", "y", "z"});
  const auto exists = [&](const char* f) { return fs::exists(model_dir::path(d, f)); };
  // Neither file yet: the one-token-a-line name.
  EXPECT_EQ(model_dir::src_vocab_path(d), d + "/src_vocab.txt");
  EXPECT_EQ(model_dir::tgt_vocab_path(d), d + "/tgt_vocab.txt");
  for (const bool json : {false, true, false}) {
    model_dir::save_vocabs(d, src, tgt, json);
    EXPECT_EQ(exists(model_dir::SRC_VOCAB), !json) << "json " << json;
    EXPECT_EQ(exists(model_dir::TGT_VOCAB), !json) << "json " << json;
    EXPECT_EQ(exists(model_dir::SRC_VOCAB_JSON), json) << "json " << json;
    EXPECT_EQ(exists(model_dir::TGT_VOCAB_JSON), json) << "json " << json;
    EXPECT_EQ(model_dir::src_vocab_path(d), d + (json ? "/src_vocab.json" : "/src_vocab.txt"));
    EXPECT_EQ(model_dir::tgt_vocab_path(d), d + (json ? "/tgt_vocab.json" : "/tgt_vocab.txt"));
    EXPECT_EQ(Vocab::load(model_dir::src_vocab_path(d)).tokens(), src.tokens());
    EXPECT_EQ(Vocab::load(model_dir::tgt_vocab_path(d)).tokens(), tgt.tokens());
  }
  EXPECT_EQ(testing::slurp(d + "/src_vocab.txt"), "<pad>\n<bos>\n<eos>\n<unk>\na\nb\n");
  // The JSON file wins when both exist (a directory edited by hand).
  testing::spit(d + "/src_vocab.json", R"(["<pad>", "q"])");
  EXPECT_EQ(model_dir::src_vocab_path(d), d + "/src_vocab.json");
  fs::remove_all(d);
}

// A SentencePiece model of 16 pieces trained on a few lines of `words`.
data::Tokenizer tiny_spm(const std::vector<std::string>& words, const std::string& name) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < 40; ++i)
    lines.push_back(words[i % words.size()] + " " + words[(i * 7 + 3) % words.size()] + " " + words[(i * 3 + 1) % words.size()]);
  data::SpmOptions o;
  o.vocab_size = 16;
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  return data::Tokenizer::from_spm_model(data::train_spm(views, o, name), name);
}

TEST(ModelDirFiles, SaveTokenizersKeepsOnlyTheModelsTheSidesUse) {
  const std::string d = testing::temp_dir("md_spm");
  const data::Tokenizer a = tiny_spm({"bad", "cab", "dab", "fade", "bead", "aced", "faced"}, "a");
  const data::Tokenizer b = tiny_spm({"hog", "fog", "log", "go", "glow", "flow", "howl"}, "b");
  ASSERT_NE(a.spm_model(), b.spm_model());
  const data::Tokenizer chr = Tokenization::CHAR;
  const auto has = [&](const char* f) { return fs::exists(model_dir::path(d, f)); };
  const auto bytes = [&](const char* f) { return testing::slurp(model_dir::path(d, f)); };

  // Both sides one model: spm.model alone (stale side files from an earlier run removed).
  testing::spit(d + "/src.spm.model", "stale");
  testing::spit(d + "/tgt.spm.model", "stale");
  model_dir::save_tokenizers(d, a, a);
  EXPECT_TRUE(has(model_dir::JOINT_SPM));
  EXPECT_FALSE(has(model_dir::SRC_SPM));
  EXPECT_FALSE(has(model_dir::TGT_SPM));
  EXPECT_EQ(bytes(model_dir::JOINT_SPM), a.spm_model());
  EXPECT_EQ(model_dir::load_tokenizer(d, Tokenization::SPM, false).spm_model(), a.spm_model());
  EXPECT_EQ(model_dir::load_tokenizer(d, Tokenization::SPM, true).spm_model(), a.spm_model());

  // Two models: one file a side, spm.model removed.
  model_dir::save_tokenizers(d, a, b);
  EXPECT_FALSE(has(model_dir::JOINT_SPM));
  EXPECT_EQ(bytes(model_dir::SRC_SPM), a.spm_model());
  EXPECT_EQ(bytes(model_dir::TGT_SPM), b.spm_model());
  EXPECT_EQ(model_dir::load_tokenizer(d, Tokenization::SPM, false).spm_model(), a.spm_model());
  EXPECT_EQ(model_dir::load_tokenizer(d, Tokenization::SPM, true).spm_model(), b.spm_model());

  // A side's own file comes before spm.model.
  testing::spit(d + "/spm.model", b.spm_model());
  EXPECT_EQ(model_dir::load_tokenizer(d, Tokenization::SPM, false).spm_model(), a.spm_model());

  // Only the target is spm: tgt.spm.model; the source's file and spm.model removed.
  model_dir::save_tokenizers(d, chr, b);
  EXPECT_FALSE(has(model_dir::JOINT_SPM));
  EXPECT_FALSE(has(model_dir::SRC_SPM));
  EXPECT_EQ(bytes(model_dir::TGT_SPM), b.spm_model());

  // No spm side: no model file at all; a side said to be spm is then missing, by both names.
  model_dir::save_tokenizers(d, chr, chr);
  EXPECT_FALSE(has(model_dir::JOINT_SPM) || has(model_dir::SRC_SPM) || has(model_dir::TGT_SPM));
  EXPECT_EQ(error_of<std::runtime_error>([&] { model_dir::load_tokenizer(d, Tokenization::SPM, false); }),
            d + "/src.spm.model: missing (" + d + "/config.json says the source tokenization is spm, and there is no " +
                d + "/spm.model either)");
  EXPECT_EQ(error_of<std::runtime_error>([&] { model_dir::load_tokenizer(d, Tokenization::SPM, true); }),
            d + "/tgt.spm.model: missing (" + d + "/config.json says the target tokenization is spm, and there is no " +
                d + "/spm.model either)");
  // Other tokenizations need no file.
  for (const Tokenization t : {Tokenization::CHAR, Tokenization::SPACE, Tokenization::BYTE})
    EXPECT_TRUE(model_dir::load_tokenizer(d, t, true) == t);
  fs::remove_all(d);
}

TEST(ModelDirFiles, ReadConfigSectionErrorsNameTheFile) {
  const std::string d = testing::temp_dir("md_read");
  const std::string f = config_file(d);
  const auto error = [&](const char* section = "model") {
    return error_of<std::runtime_error>([&] { model_dir::read_config_section(d, section); });
  };
  // No config.json: the I/O error names it.
  const std::string missing = error();
  EXPECT_EQ(missing.rfind(f, 0), 0u) << missing;

  testing::spit(f, "{\"format\": \"tfm-train\",");
  EXPECT_EQ(error().rfind(f + ": not valid JSON: ", 0), 0u) << error();
  const std::string not_ours = f + ": not a tfm training directory config (\"format\": \"tfm-train\" missing)";
  testing::spit(f, "[1, 2]");
  EXPECT_EQ(error(), not_ours);
  testing::spit(f, R"({"format": "pytorch", "version": 1, "model": {}, "train": {}})");
  EXPECT_EQ(error(), not_ours);
  testing::spit(f, R"({"format": "tfm-train", "version": 2, "model": {}, "train": {}})");
  EXPECT_EQ(error(), f + ": unsupported version 2");
  testing::spit(f, R"({"format": "tfm-train", "model": {}, "train": {}})");
  EXPECT_EQ(error(), f + ": unsupported version 0");
  testing::spit(f, R"({"format": "tfm-train", "version": 1, "train": {}, "vocab": {}})");
  EXPECT_EQ(error(), f + ": missing \"model\" or \"train\"");
  testing::spit(f, R"({"format": "tfm-train", "version": 1, "model": {"d_model": 8}, "train": {}})");
  EXPECT_EQ(error("vocab"), f + ": missing \"vocab\"");
  EXPECT_EQ(model_dir::read_config_section(d, "model"), R"({"d_model":8})");
  fs::remove_all(d);
}

// read_config_section promises std::runtime_error naming the file, but a "format" or "version" of
// another JSON type reaches j.value(...), whose nlohmann::json::type_error ("[json.exception.type_error.302]
// type must be string, but is number") escapes without the file's name and is no std::runtime_error.
// Left DISABLED until model_dir.cc checks the types (or catches the type_error) itself.
TEST(ModelDirFiles, ReadConfigSectionWrongTypesNameTheFile) {
  const std::string d = testing::temp_dir("md_types");
  const std::string f = config_file(d);
  for (const char* text : {R"({"format": 3, "version": 1, "model": {}, "train": {}})",
                           R"({"format": "tfm-train", "version": "1", "model": {}, "train": {}})"}) {
    testing::spit(f, text);
    std::string m;
    try {
      model_dir::read_config_section(d, "model");
      m = "(no exception)";
    } catch (const std::runtime_error& e) {
      m = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << text << ": not a std::runtime_error: " << e.what();
      continue;
    }
    EXPECT_EQ(m.rfind(f + ": ", 0), 0u) << text << ": " << m;
  }
  fs::remove_all(d);
}

// ---- load_model_dir and require_data ------------------------------------------------------------------

// A directory written by 2 steps of a tiny encoder run on the reverse task (trainer_test.cc's tiny()).
const std::string& trained_dir() {
  static const std::string dir = [] {
    const std::string d = temp_dir("md_run");
    train::TrainConfig c;
    c.task = data::Task::REVERSE;
    c.task_train_size = 64;
    c.task_valid_size = 16;
    c.model.arch = Arch::ENCODER;
    c.model.d_model = 16;
    c.model.nhead = 2;
    c.model.num_encoder_layers = 1;
    c.model.dim_feedforward = 32;
    c.model.dropout = 0.1f;
    c.max_steps = 2;
    c.eval_every = 2;
    c.batch.batch_size = 32;
    c.seed = 11;
    c.out_dir = d + "/run";
    train::run_training(c);
    return c.out_dir;
  }();
  return dir;
}

// A copy of the trained directory to break.
std::string copy_of_trained(const std::string& tag) {
  const std::string d = temp_dir(tag) + "/copy";
  fs::copy(trained_dir(), d, fs::copy_options::recursive);
  return d;
}

TEST(LoadModelDir, LoadsATrainedDirectoryInEvalMode) {
  const std::string dir = trained_dir();
  const TrainedModel m = load_model_dir(dir);
  EXPECT_EQ(m.dir, dir);
  ASSERT_TRUE(m.model);
  EXPECT_FALSE(m.model->is_training());
  EXPECT_EQ(m.model->config().arch, Arch::ENCODER);
  EXPECT_EQ(m.model->config().d_model, 16);
  // The task's vocabulary on both sides, its sizes the model's.
  EXPECT_EQ(m.src_vocab.tokens(), data::task_vocab().tokens());
  EXPECT_EQ(m.tgt_vocab.tokens(), data::task_vocab().tokens());
  EXPECT_EQ(m.model->config().src_vocab_size, m.src_vocab.size());
  EXPECT_EQ(m.model->config().tgt_vocab_size, m.tgt_vocab.size());
  EXPECT_TRUE(m.src_tokenizer == Tokenization::SPACE);  // task tokens are numbers
  EXPECT_TRUE(m.tgt_tokenizer == Tokenization::SPACE);
  // The weights are the file's.
  const io::SafeTensorsFile f = io::load_safetensors(dir + "/model.safetensors");
  const NamedTensors params = m.model->named_parameters();
  ASSERT_EQ(params.size(), f.tensors.size());
  for (const auto& [key, p] : params) EXPECT_TRUE(testing::bitwise_equal(p, f.tensors.at(key), key));
}

// A loaded model keeps the generator its dropout draws from (its modules point at it): put in training
// mode, its dropout draws from that generator after load_model_dir has returned, and two forwards differ.
TEST(LoadModelDir, ALoadedModelInTrainingDrawsFromItsOwnGenerator) {
  const TrainedModel m = load_model_dir(trained_dir());
  ASSERT_TRUE(m.generator);
  EXPECT_FALSE(m.generator->no_draws);
  EXPECT_EQ(m.generator->offset, 0u);  // the loaded weights took no draw
  data::TokenBatch batch;
  batch.B = 1;
  batch.S = batch.T = 6;
  batch.src = {4, 5, 6, 7, 4, 5};
  batch.tgt_out = {5, 4, 7, 6, 5, 4};
  const Tensor eval_out = m.model->forward(batch);
  m.model->train();
  const Tensor a = m.model->forward(batch), b = m.model->forward(batch);
  m.model->eval();
  EXPECT_GT(m.generator->offset, 0u);
  EXPECT_FALSE(testing::bitwise_equal(a, b, "two dropout draws"));
  EXPECT_TRUE(testing::bitwise_equal(m.model->forward(batch), eval_out, "eval again"));
}

TEST(LoadModelDir, ErrorsNameTheDirectoryOrFile) {
  // Vocabulary files that do not match config.json's sizes (22 task tokens a side).
  std::string d = copy_of_trained("md_badvocab");
  testing::spit(d + "/src_vocab.txt", testing::slurp(d + "/src_vocab.txt") + "extra\n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { load_model_dir(d); }),
            d + "/src_vocab.txt and " + d + "/tgt_vocab.txt: 23 and 22 entries, but the model's config.json says 22 and 22");

  // A tokenization config.json cannot name.
  d = copy_of_trained("md_badtokens");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(testing::slurp(config_file(d)));
  j["vocab"]["tgt_tokens"] = "klingon";
  testing::spit(config_file(d), j.dump(2));
  std::string e = error_of<std::runtime_error>([&] { load_model_dir(d); });
  EXPECT_EQ(e.rfind(config_file(d) + ": \"vocab\": 'tgt_tokens': ", 0), 0u) << e;
  EXPECT_NE(e.find("klingon"), std::string::npos) << e;
  {  // the rest of "vocab", key by key: its type, an unknown key, a file name, a size
    const auto vocab_error = [&](const nlohmann::ordered_json& v) {
      nlohmann::ordered_json k = nlohmann::ordered_json::parse(testing::slurp(config_file(d)));
      k["vocab"] = v;
      const std::string dd = copy_of_trained("md_vocab_keys");
      testing::spit(config_file(dd), k.dump(2));
      std::string msg = error_of<std::runtime_error>([&] { load_model_dir(dd); });
      return msg.substr(std::min(msg.size(), config_file(dd).size()));
    };
    nlohmann::ordered_json good =
        nlohmann::ordered_json::parse(testing::slurp(copy_of_trained("md_vocab_good") + "/config.json"))["vocab"];
    EXPECT_EQ(vocab_error(nlohmann::ordered_json::array({1})), ": \"vocab\": expected an object, got [1]");
    nlohmann::ordered_json v = good;
    v["bogus"] = 1;
    EXPECT_EQ(vocab_error(v), ": \"vocab\": unknown key 'bogus'");
    v = good;
    v["src"] = "/etc/passwd";
    EXPECT_EQ(vocab_error(v),
              ": \"vocab\": 'src' must be \"src_vocab.txt\" or \"src_vocab.json\", got \"/etc/passwd\"");
    v = good;
    v["tgt_size"] = 23;
    EXPECT_EQ(vocab_error(v), ": \"vocab\": 'tgt_size' is 23, but its file holds 22 entries");
  }
  {  // a vocabulary whose special entries were swapped
    std::string dd = copy_of_trained("md_swapped");
    std::vector<std::string> lines;
    std::istringstream in(testing::slurp(dd + "/tgt_vocab.txt"));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    const auto pad = std::find(lines.begin(), lines.end(), "<pad>"),
               eos = std::find(lines.begin(), lines.end(), "<eos>");
    ASSERT_TRUE(pad != lines.end() && eos != lines.end());
    std::iter_swap(pad, eos);
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    testing::spit(dd + "/tgt_vocab.txt", text);
    EXPECT_EQ(error_of<std::runtime_error>([&] { load_model_dir(dd); }),
              dd + "/tgt_vocab.txt: entry " + std::to_string(pad - lines.begin()) +
                  " is '<eos>', but config.json's model pad_id " + std::to_string(pad - lines.begin()) +
                  " names <pad>");
  }

  // A model config key of the wrong type, or unknown: said of the file.
  nlohmann::ordered_json bad = j;
  bad["model"]["d_model"] = "16";
  testing::spit(config_file(d), bad.dump(2));
  EXPECT_EQ(error_of<data::DataError>([&] { load_model_dir(d); }),
            config_file(d) + ": model config: 'd_model' must be an integer, got \"16\"");
  std::string twice = j.dump(2);  // "format" said twice: refused even when both say the same
  twice.insert(twice.find('{') + 1, "\"format\": \"tfm-train\", ");
  testing::spit(config_file(d), twice);
  EXPECT_EQ(error_of<std::runtime_error>([&] { load_model_dir(d); }),
            config_file(d) + ": key 'format' appears twice in one object");
  bad = j;
  bad["model"]["pad_id"] = 4294967296;  // an int32 key: not narrowed to 0
  testing::spit(config_file(d), bad.dump(2));
  EXPECT_EQ(
      error_of<data::DataError>([&] { load_model_dir(d); }),
      config_file(d) + ": model config: 'pad_id' must be an integer in [-2147483648, 2147483647], got 4294967296");
  bad = j;
  bad["model"]["max_len"] = int64_t{1} << 40;  // a position table (sinusoidal or learned) of max_len · d_model
  bad["model"]["positional"] = "sinusoidal";
  testing::spit(config_file(d), bad.dump(2));
  e = error_of<std::runtime_error>([&] { load_model_dir(d); });
  EXPECT_NE(e.find(" and the embedding and position tables make a model of at least "), std::string::npos) << e;
  EXPECT_EQ(e.rfind(config_file(d) + ": model config: ", 0), 0u) << e;
  bad = j;
  bad["model"]["bogus_key"] = 1;
  testing::spit(config_file(d), bad.dump(2));
  EXPECT_EQ(error_of<data::DataError>([&] { load_model_dir(d); }),
            config_file(d) + ": model config: unknown key 'bogus_key'");

  // A side said to be spm without its model file.
  j["vocab"]["tgt_tokens"] = "spm";
  testing::spit(config_file(d), j.dump(2));
  e = error_of<std::runtime_error>([&] { load_model_dir(d); });
  EXPECT_EQ(e.rfind(d + "/tgt.spm.model: missing", 0), 0u) << e;

  // No weights.
  d = copy_of_trained("md_noweights");
  fs::remove(d + "/model.safetensors");
  e = error_of<std::exception>([&] { load_model_dir(d); });
  EXPECT_NE(e.find(d + "/model.safetensors"), std::string::npos) << e;

  // A weight that is NaN: every output would be NaN, decoded as empty text without a word.
  d = copy_of_trained("md_nan");
  {
    io::SafeTensorsFile f = io::load_safetensors(d + "/model.safetensors");
    auto& [key, t] = *f.tensors.begin();
    t.data()[t.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
    const std::string bad_key = key;
    io::save_safetensors(d + "/model.safetensors", f.tensors, f.metadata);
    EXPECT_EQ(error_of<std::runtime_error>([&] { load_model_dir(d); }),
              d + "/model.safetensors: tensor '" + bad_key + "' holds NaN (element " + std::to_string(t.numel() - 1) +
                  "): not a model tfm can run");
  }

  // Not a model directory at all.
  e = error_of<std::runtime_error>([&] { load_model_dir(d + "/nowhere"); });
  EXPECT_EQ(e.rfind(d + "/nowhere/config.json", 0), 0u) << e;
}

// A TrainedModel assembled in memory: `config`'s model with fresh weights, in eval mode.
TrainedModel in_memory(const ModelConfig& config, Vocab src, Vocab tgt, const std::string& dir) {
  static Generator gen{5, 0};  // dropout's generator must outlive the model
  TrainedModel m;
  m.dir = dir;
  m.model = std::make_unique<Model>(config, gen);
  m.model->eval();
  m.src_vocab = std::move(src);
  m.tgt_vocab = std::move(tgt);
  return m;
}

// ---- WeightsLoad::MAP_READ_ONLY ---------------------------------------------------------------------

// A model directory holding `mc`'s fresh weights (char tokens over `v` on both sides), written by hand.
std::string write_model_dir(const ModelConfig& mc, const Vocab& v, const std::string& tag) {
  const std::string d = testing::temp_dir(tag);
  Generator gen{7, 0};
  Model model(mc, gen);
  testing::spit(config_file(d), model_dir::config_json(mc, "{}", v, v, Tokenization::CHAR, Tokenization::CHAR));
  model_dir::save_vocabs(d, v, v, /*json=*/false);
  io::save_safetensors(model_dir::path(d, model_dir::MODEL), model.state_dict());
  return d;
}

// This process's mapping holding address p (/proc/self/smaps): its file ("" for anonymous memory) and
// the bytes of it resident in this process (Rss).
struct Mapping {
  std::string file;
  size_t rss = 0;
};
Mapping mapping_of(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  Mapping m;
  while (std::getline(smaps, line)) {
    const std::string first = line.substr(0, line.find(' '));
    const size_t dash = first.find('-');
    if (first.back() != ':' &&
        dash != std::string::npos) {  // a mapping's line: "begin-end perms offset dev inode [path]"
      if (inside) break;
      const uintptr_t begin = std::stoull(first.substr(0, dash), nullptr, 16);
      const uintptr_t end = std::stoull(first.substr(dash + 1), nullptr, 16);
      inside = begin <= at && at < end;
      if (inside) {
        const size_t slash = line.find('/');
        m.file = slash == std::string::npos ? "" : line.substr(slash);
      }
    } else if (inside && first == "Rss:") {
      m.rss = std::stoull(line.substr(4)) * 1024;  // "Rss:   123 kB"
    }
  }
  return m;
}

// A read-only load's parameters view the file (no copy) and compute what the copy computes; its pages are
// given back after the load's checks and after InferenceMode packs a Linear weight, and are read again
// from the file when touched, so a second run (the packed copies gone with the first scope) is the same.
// PyTorch's state_dict() of a tied model holds the shared matrix twice (the embedding and generator.weight): a
// model.safetensors written from it loads, the alias checked to be the embedding's values; another matrix is named.
TEST(LoadModelDir, TiedAliasFromPyTorchsStateDictIsTakenWhenItIsTheEmbedding) {
  const ModelConfig mc = testing::small_decoder();  // tied by its family's default
  ASSERT_TRUE(mc.ties_embeddings());
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  const std::string d = write_model_dir(mc, v, "md_tied_alias");
  const TrainedModel plain = load_model_dir(d);
  NamedTensors with_alias = plain.model->state_dict();
  ASSERT_EQ(with_alias.find("generator.weight"), with_alias.end());
  with_alias.insert("generator.weight", with_alias.at("embedding.weight").clone());
  io::save_safetensors(model_dir::path(d, model_dir::MODEL), with_alias);
  const TrainedModel aliased = load_model_dir(d);
  for (const auto& [key, t] : plain.model->named_parameters())
    EXPECT_TRUE(testing::bitwise_equal(aliased.model->named_parameters().at(key), t, key));
  with_alias.at("generator.weight").data()[3] += 1.0f;  // not the embedding: a head of its own, in a tied model
  io::save_safetensors(model_dir::path(d, model_dir::MODEL), with_alias);
  EXPECT_EQ(error_of<data::DataError>([&] { load_model_dir(d); }),
            model_dir::path(d, model_dir::MODEL) +
                ": tensor 'generator.weight' is not 'embedding.weight' (config.json's tie_embeddings shares one "
                "matrix): drop the key, or set tie_embeddings false");
  fs::remove_all(d);
}

TEST(LoadModelDir, MapReadOnlyViewsTheFileGivesPagesBackAndRunsAsTheCopy) {
  ModelConfig mc = testing::small_decoder();
  mc.d_model = 256;  // Linear weights of 256 KiB to 1 MiB: whole pages inside each
  mc.nhead = 4;
  mc.dim_feedforward = 1024;
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  const std::string d = write_model_dir(mc, v, "md_mapped");
  const std::string file = fs::canonical(model_dir::path(d, model_dir::MODEL)).string();
  const TrainedModel copy = load_model_dir(d);
  const TrainedModel mapped = load_model_dir(d, WeightsLoad::MAP_READ_ONLY);
  const NamedTensors a = copy.model->named_parameters(), b = mapped.model->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  // After the load only the pages a tensor shares with its neighbours stay (at most 2 a tensor).
  const Tensor w = b.at("decoder.layers.0.linear1.weight");  // (1024, 256): 1 MiB
  const size_t w_bytes = static_cast<size_t>(w.numel()) * sizeof(float), page = 4096;
  const size_t after_load = mapping_of(w.data()).rss;
  EXPECT_LE(after_load, 2 * b.size() * page);
  for (const auto& [key, t] : a) {
    EXPECT_EQ(mapping_of(b.at(key).data()).file, file) << key;  // a view of the file
    EXPECT_NE(mapping_of(t.data()).file, file) << key;          // memory of its own
    EXPECT_TRUE(testing::bitwise_equal(b.at(key), t, key));     // (reads every page back)
  }
  EXPECT_GE(mapping_of(w.data()).rss, after_load + w_bytes);
  size_t unpacked_bytes = 0;  // the parameters that are not Linear weights (all of those are 256 or more a side)
  for (const auto& [key, t] : b)
    if (t.dim() != 2 || t.size(0) < 256 || t.size(1) < 256)
      unpacked_bytes += static_cast<size_t>(t.numel()) * sizeof(float);
  EXPECT_LT(unpacked_bytes * 10, w_bytes);  // a bound far below one Linear weight

  const std::vector<int32_t> prompt = {4, 5, 6};
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.ignore_eos = true;
  o.sampling.temperature = 0.8f;
  o.seed = 3;
  for (const Precision p : {Precision::FLOAT32, Precision::BFLOAT16}) {
    std::vector<std::string> want, got;
    {
      const InferenceMode scope(p);
      want = generate_text(copy, prompt, o);
    }
    {
      const InferenceMode scope(p);
      got = generate_text(mapped, prompt, o);
      // Packing gives every Linear weight's pages back: what stays is what the run reads unpacked (the
      // embeddings, biases and norms).
      EXPECT_LE(mapping_of(w.data()).rss, after_load + unpacked_bytes + 2 * page) << enum_name(p);
    }
    EXPECT_EQ(got, want) << enum_name(p);
    {
      const InferenceMode scope(p);  // packs again, from pages read back from the file
      EXPECT_EQ(generate_text(mapped, prompt, o), want) << enum_name(p);
    }
  }
  fs::remove_all(d);
}

// An encoder-decoder's cross-attention packs slices of in_proj_weight (the query rows, the key and value
// rows): a read-only load translates as the copy does, greedy and with a beam.
TEST(LoadModelDir, MapReadOnlyTranslatesAsTheCopy) {
  ModelConfig mc = testing::small_seq2seq();
  mc.d_model = 128;
  mc.dim_feedforward = 512;
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  mc.src_vocab_size = mc.tgt_vocab_size = v.size();
  const std::string d = write_model_dir(mc, v, "md_mapped_s2s");
  const TrainedModel copy = load_model_dir(d), mapped = load_model_dir(d, WeightsLoad::MAP_READ_ONLY);
  const std::vector<std::string> sources = {"abc", "hgfedcba", "i"};
  for (const int beam : {1, 3}) {
    for (const Precision p : {Precision::FLOAT32, Precision::BFLOAT16, Precision::INT8}) {
      const InferenceMode scope(p);
      EXPECT_EQ(translate_lines(mapped, sources, beam, 2), translate_lines(copy, sources, beam, 2))
          << "beam " << beam << ", " << enum_name(p);
    }
  }
  fs::remove_all(d);
}

TEST(RequireData, NamesTheDirectoryTheArchitectureAndTheUse) {
  const TrainedModel enc = load_model_dir(trained_dir());
  EXPECT_NO_THROW(require_data(enc, DataKind::PAIRS, "unused"));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { require_data(enc, DataKind::TEXT, "use tfm translate"); }),
            trained_dir() + " is not a language model (arch encoder); use tfm translate");
  ModelConfig lm_config = testing::small_decoder();
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  const TrainedModel lm = in_memory(lm_config, v, v, "lm-dir");
  EXPECT_NO_THROW(require_data(lm, DataKind::TEXT, "unused"));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { require_data(lm, DataKind::PAIRS, "use tfm generate"); }),
            "lm-dir is a language model: use tfm generate");
}

// ---- predict and translate_lines ----------------------------------------------------------------------

TEST(Predict, EncoderPredictsOneTokenPerPositionInInputOrder) {
  const TrainedModel m = load_model_dir(trained_dir());
  const Model& model = *m.model;
  const std::vector<std::vector<int32_t>> sources = {{3, 1, 4}, {}, {19, 18, 17, 16, 15, 14, 13}, {5}, {2, 7}};
  const std::vector<data::Tokens> out = predict(model, m.tgt_vocab, sources, 1, 2);
  ASSERT_EQ(out.size(), sources.size());
  EXPECT_TRUE(out[1].empty()) << "an empty source predicts nothing";
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].empty()) continue;
    // The argmax of the logits at each position, padding dropped.
    data::TokenBatch b;
    b.B = 1;
    b.S = static_cast<int64_t>(sources[i].size());
    b.src = sources[i];
    const Tensor logits = model.forward(b);  // (1, S, V)
    const int64_t V = logits.size(2);
    data::Tokens want;
    for (int64_t s = 0; s < b.S; ++s) {
      const float* row = logits.data() + s * V;
      const int32_t id = static_cast<int32_t>(std::max_element(row, row + V) - row);
      if (id != m.tgt_vocab.pad_id()) want.push_back(m.tgt_vocab.token(id));
    }
    EXPECT_EQ(out[i], want) << "source " << i;
    EXPECT_LE(out[i].size(), sources[i].size());
  }
  // beam and batch size below 1 are refused, as decode() refuses the beam (not silently taken as 1);
  // every source alone gives the same.
  EXPECT_THROW(predict(model, m.tgt_vocab, sources, 0, 2), std::invalid_argument);
  EXPECT_THROW(predict(model, m.tgt_vocab, sources, 1, 0), std::invalid_argument);
  EXPECT_THROW(predict(model, m.tgt_vocab, {{}, {}}, -3, 4), std::invalid_argument);  // even with nothing to decode
  for (size_t i = 0; i < sources.size(); ++i)
    EXPECT_EQ(predict(model, m.tgt_vocab, {sources[i]}, 1, 1)[0], out[i]) << "source " << i;
  // Only empty sources: nothing to decode.
  EXPECT_EQ(predict(model, m.tgt_vocab, {{}, {}}, 1, 4), (std::vector<data::Tokens>{{}, {}}));
}

// A seq2seq model (small_seq2seq: 11 source, 13 target tokens) with space-separated tokens; the
// source vocabulary has no <unk>, so an unknown word cannot be encoded.
TrainedModel seq2seq_model() {
  const Vocab src = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "a", "b", "c", "d", "e", "f", "g", "h"});
  const Vocab tgt =
      Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "p", "q", "r", "s", "t", "u", "v", "w", "x"});
  ModelConfig c = testing::small_seq2seq();
  c.max_len = 64;
  TrainedModel m = in_memory(c, src, tgt, "s2s-dir");
  m.src_tokenizer = m.tgt_tokenizer = Tokenization::SPACE;
  return m;
}

TEST(Predict, Seq2seqPredictionsEndAtEosAndKeepInputOrder) {
  const TrainedModel m = seq2seq_model();
  const std::vector<std::vector<int32_t>> sources = {{3, 4, 5}, {10}, {}, {6, 7, 8, 9, 3, 4}, {5, 5}};
  const std::vector<data::Tokens> out = predict(*m.model, m.tgt_vocab, sources, 1, 2);
  ASSERT_EQ(out.size(), sources.size());
  EXPECT_TRUE(out[2].empty());
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].empty()) continue;
    const std::vector<int32_t> ids = decode(*m.model, {sources[i]})[0];
    EXPECT_EQ(out[i], m.tgt_vocab.decode(ids)) << "source " << i;
    for (const auto& t : out[i]) EXPECT_TRUE(t != "<eos>" && t != "<bos>" && t != "<pad>") << t;
  }
  // Beam 2 is another search; it still gives one prediction a source, empty ones empty.
  const std::vector<data::Tokens> beam = predict(*m.model, m.tgt_vocab, sources, 2, 3);
  ASSERT_EQ(beam.size(), sources.size());
  EXPECT_TRUE(beam[2].empty());
}

// A prediction is one line: predict never picks a target token that stands for a line break, the byte tokens
// <0x0A> and <0x0D> of a vocabulary that holds every byte token — greedy, beam, sampled, or an encoder's position
// — so tfm translate writes one line per input line. The generator's bias makes <0x0A>, then <0x0D>, every
// step's likeliest token by far: decode() itself, given nothing to suppress, picks them. A space vocabulary's
// word spelled "<0x0A>" is a word, not a byte: predicted.
TEST(Predict, NeverPicksALineBreakToken) {
  static Generator gen{13, 0};  // its own (in_memory's would draw other weights for the tests after this one)
  const auto model_of = [](const ModelConfig& c, Vocab src, Vocab tgt) {
    TrainedModel m;
    m.dir = "line-break-dir";
    m.model = std::make_unique<Model>(c, gen);
    m.model->eval();
    m.src_vocab = std::move(src);
    m.tgt_vocab = std::move(tgt);
    return m;
  };
  const Vocab bytes = data::byte_vocab();
  const std::vector<std::vector<int32_t>> sources = {{'a', 'b'}, {'c'}, {'d', 'e', 'f'}};
  for (const Arch arch : {Arch::SEQ2SEQ, Arch::ENCODER}) {
    ModelConfig c = testing::small_seq2seq();
    c.arch = arch;
    if (arch == Arch::ENCODER) c.num_decoder_layers = 0;
    c.src_vocab_size = c.tgt_vocab_size = bytes.size();
    c.pad_id = bytes.pad_id();
    c.bos_id = bytes.bos_id();
    c.eos_id = bytes.eos_id();
    TrainedModel m = model_of(c, bytes, bytes);
    m.src_tokenizer = m.tgt_tokenizer = Tokenization::BYTE;
    float* bias = m.model->named_parameters().at("generator.bias").data();  // (V)
    bias['\n'] = 60;
    bias['\r'] = 50;
    ASSERT_EQ(decode(*m.model, {sources[0]})[0].front(), '\n') << "the bias rules the model";
    std::vector<DecodeOptions> searches(4);
    searches[1].beam = 3;
    searches[2].sample = true;
    searches[3].sample = true;
    searches[3].sampling.temperature = 100;  // all but uniform: any token not suppressed comes
    for (DecodeOptions& o : searches) {
      if (arch == Arch::ENCODER && o.beam > 1) continue;
      for (const auto& out : predict(*m.model, m.tgt_vocab, sources, o, 2))
        for (const std::string& t : out) EXPECT_TRUE(t != "<0x0A>" && t != "<0x0D>") << t;
      for (const std::string& line : translate_lines(m, {"ab", "c", "def"}, o, 2))
        EXPECT_EQ(line.find_first_of("\n\r"), std::string::npos);
    }
  }
  std::vector<std::string> words = {"<pad>", "<bos>", "<eos>", "<unk>", "<0x0A>"};
  for (int i = 5; i < 13; ++i) words.push_back("w" + std::to_string(i));
  const Vocab src =
      Vocab::from_tokens(std::vector<std::string>(words.begin(), words.begin() + 11));  // small_seq2seq's 11
  const TrainedModel m = model_of(testing::small_seq2seq(), src, Vocab::from_tokens(words));
  m.model->named_parameters().at("generator.bias").data()[4] = 60;
  EXPECT_EQ(predict(*m.model, m.tgt_vocab, {{3}}, 1, 1)[0].front(), "<0x0A>");
}

TEST(TranslateLines, TokenizesPredictsAndDetokenizes) {
  const TrainedModel m = seq2seq_model();
  const std::vector<std::string> lines = {"a b c", "", "h", "d e f g a b", "c c"};
  const std::vector<std::string> out = translate_lines(m, lines, 1, 2);
  ASSERT_EQ(out.size(), lines.size());
  EXPECT_EQ(out[1], "");
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int32_t> src = m.src_vocab.encode(data::tokenize(lines[i], Tokenization::SPACE));
    const data::Tokens want = src.empty() ? data::Tokens{} : m.tgt_vocab.decode(decode(*m.model, {src})[0]);
    EXPECT_EQ(out[i], data::detokenize(want, Tokenization::SPACE)) << "line " << i + 1;
  }
  // An untokenizable line: the error names its (1-based) line number and the token.
  const std::string e =
      error_of<std::invalid_argument>([&] { translate_lines(m, {"a b", "c", "a zz b"}, 1, 2); });
  EXPECT_EQ(e.rfind("input line 3: ", 0), 0u) << e;
  EXPECT_NE(e.find("'zz'"), std::string::npos) << e;
}

TEST(TranslateLines, SampledLinesDrawFromStreamFirstStreamPlusIndex) {
  const TrainedModel m = seq2seq_model();
  const std::vector<std::string> lines = {"a b c", "h g", "d e f", "c"};
  DecodeOptions o;
  o.sample = true;
  o.seed = 9;
  o.max_len = 12;
  const std::vector<std::string> all = translate_lines(m, lines, o, 3);
  // Cut into two calls, the second starting at stream 2: the same samples.
  std::vector<std::string> cut = translate_lines(m, {lines[0], lines[1]}, o, 3, 0);
  const std::vector<std::string> rest = translate_lines(m, {lines[2], lines[3]}, o, 1, 2);
  cut.insert(cut.end(), rest.begin(), rest.end());
  EXPECT_EQ(cut, all);
  // Line 2 alone at stream 2 is the same draw as inside the whole call.
  EXPECT_EQ(translate_lines(m, {lines[2]}, o, 1, 2)[0], all[2]);
  // And sampling is on: the draws are not all the greedy predictions.
  DecodeOptions greedy = o;
  greedy.sample = false;
  EXPECT_NE(translate_lines(m, lines, greedy, 3), all);
}

// A stream cut into calls (tfm translate's chunks): first_stream places the call's lines in the stream, so an
// error names the line's number in the whole stream, once; a line of more tokens than the model's positions is
// refused naming its line too (decode would refuse the batch without saying which line).
TEST(TranslateLines, ErrorsNameTheLineInTheStream) {
  const TrainedModel m = seq2seq_model();
  DecodeOptions o;
  const std::string e = error_of<std::invalid_argument>([&] { translate_lines(m, {"a b", "c", "a zz b"}, o, 1, 67); });
  EXPECT_EQ(e.rfind("input line 70: ", 0), 0u) << e;
  EXPECT_EQ(e.find("input line", 1), std::string::npos) << e;
  std::string long_line = "a";
  for (int i = 1; i < 65; ++i) long_line += " a";  // 65 tokens, max_len 64
  EXPECT_EQ(error_of<std::invalid_argument>([&] { translate_lines(m, {"a", long_line}, o, 4, 10); }),
            "input line 12: 65 source tokens, more than the model's max_len 64");
}

// predict and translate_lines count the predictions the length limit stopped without eos: with a limit of 2
// tokens on this random model, those of 2 tokens (the others ended at eos, at most 1 token); empty sources
// are not predicted, so not counted. The count is the same through translate_lines.
TEST(Predict, CountsPredictionsStoppedByTheLengthLimit) {
  const TrainedModel m = seq2seq_model();
  const std::vector<std::string> lines = {"a b c", "", "h", "d e f g a b", "c c", "e", "f g", "b", "h h h", "a d"};
  std::vector<std::vector<int32_t>> sources;
  for (const auto& l : lines) sources.push_back(m.src_vocab.encode(data::tokenize(l, Tokenization::SPACE)));
  for (int beam : {1, 2}) {
    DecodeOptions o;
    o.beam = beam;
    o.max_len = 2;
    int64_t truncated = -1;
    const std::vector<data::Tokens> out = predict(*m.model, m.tgt_vocab, sources, o, 3, 0, &truncated);
    int64_t at_limit = 0;
    for (const auto& t : out) at_limit += t.size() == 2;
    EXPECT_EQ(truncated, at_limit) << "beam " << beam;
    EXPECT_GT(truncated, 0) << "beam " << beam;
    int64_t through_lines = -1;
    translate_lines(m, lines, o, 3, 0, &through_lines);
    EXPECT_EQ(through_lines, truncated) << "beam " << beam;
    // The default limit (2·source + 10) stops fewer of them, and none when all end at eos before it.
    o.max_len = 0;
    int64_t by_default = -1;
    const std::vector<data::Tokens> free = predict(*m.model, m.tgt_vocab, sources, o, 3, 0, &by_default);
    int64_t full = 0;
    for (size_t i = 0; i < sources.size(); ++i)
      full += !sources[i].empty() && static_cast<int64_t>(free[i].size()) == 2 * static_cast<int64_t>(sources[i].size()) + 10;
    EXPECT_EQ(by_default, full) << "beam " << beam;
    EXPECT_LE(by_default, truncated);
  }
}

// ---- a TrainedModel without a model -------------------------------------------------------------------

// A default-constructed TrainedModel (what a failed `m = load_model_dir(...)` leaves) and one moved from hold no
// model: every function that takes one throws, naming the cause, instead of dereferencing the null model
// (check_decode_options and translate_lines crashed) or reading its empty vocabulary (generate_text said
// "token 'T' is not in the vocabulary").
TEST(TrainedModelWithoutModel, EveryCallThrowsSayingItHoldsNone) {
  const std::string none =
      "TrainedModel: holds no model (default-constructed or moved from): load one with load_model_dir";
  TrainedModel loaded = seq2seq_model();
  const TrainedModel moved_to = std::move(loaded);
  EXPECT_EQ(&require_model(moved_to), moved_to.model.get());
  const TrainedModel fresh;
  const TrainedModel& moved_from = loaded;
  for (const TrainedModel* m : {&fresh, &moved_from}) {
    const auto says_none = [&](const char* what, auto&& f) {
      EXPECT_EQ(error_of<std::invalid_argument>(f), none) << what;
    };
    says_none("require_model", [&] { require_model(*m); });
    says_none("require_data", [&] { require_data(*m, DataKind::TEXT, "unused"); });
    says_none("translate_lines", [&] { translate_lines(*m, {"a b"}, 1, 8); });
    says_none("translate_lines (options)", [&] { translate_lines(*m, {"a b"}, DecodeOptions{}, 8); });
    says_none("check_decode_options", [&] { check_decode_options(*m, DecodeOptions{}); });
    says_none("truncation_note", [&] { truncation_note(*m, 1, 2, 0); });
    says_none("generate_text", [&] { generate_text(*m, "To", GenerateOptions{}); });
    says_none("generate_text (ids)", [&] { generate_text(*m, std::vector<int32_t>{3}, GenerateOptions{}); });
    says_none("encode_prompt", [&] { encode_prompt(*m, "To"); });
    says_none("unknown_tokens", [&] { unknown_tokens(*m, "To"); });
    says_none("unknown_tokens (ids)", [&] { unknown_tokens(*m, std::vector<int32_t>{3}); });
    says_none("never_generated", [&] { never_generated(*m); });
    says_none("stop_at_text", [&] { stop_at_text(*m, "\n"); });
  }
}

// ---- generate_text's stop text ------------------------------------------------------------------------

// An empty stop text is refused, by the library (so `tfm generate --stop ''` and Python's stop="" say the same):
// every continuation contains "", and an empty text given by accident would otherwise pass for "no stop" (as
// the Python package's stop="" did). No stop is std::nullopt, generate_text's default.
TEST(GenerateText, AnEmptyStopTextIsRefusedAndNoStopIsNullopt) {
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  const TrainedModel lm = in_memory(testing::small_decoder(), v, v, "lm-dir");
  const std::string empty = "stop: empty: give the text to stop at";
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.ignore_eos = true;
  o.seed = 2;
  const std::vector<int32_t> prompt = {4, 5};
  EXPECT_EQ(error_of<std::invalid_argument>([&] { check_stop_text(""); }), empty);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { stop_at_text(lm, ""); }), empty);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { generate_text(lm, prompt, o, ""); }), empty);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { generate_text(lm, "a b", o, std::string()); }), empty);
  EXPECT_NO_THROW(check_stop_text("a"));
  // No stop: every sample runs its max_new_tokens (space tokens: one text piece each, "a" or " b").
  const std::vector<std::string> free = generate_text(lm, prompt, o);
  EXPECT_EQ(generate_text(lm, prompt, o, std::nullopt), free);
  ASSERT_EQ(free.size(), 1u);
  // A stop text still stops: at the first token whose text completes it.
  const std::vector<std::string> pieces = [&] {
    std::vector<std::string> p;
    generate_text(lm, prompt, o, std::nullopt, [&](int64_t, const std::string& piece) { p.push_back(piece); });
    return p;
  }();
  ASSERT_EQ(pieces.size(), 10u);
  std::string stop;  // the text of the second drawn token that has one (an <eos> has none)
  for (size_t i = 1; i < pieces.size() && stop.empty(); ++i) stop = pieces[i];
  ASSERT_FALSE(stop.empty());
  size_t end = 0;
  for (std::string text; end < pieces.size() && text.find(stop) == std::string::npos; ++end) text += pieces[end];
  std::string want;
  for (size_t i = 0; i < end; ++i) want += pieces[i];
  EXPECT_EQ(generate_text(lm, prompt, o, stop), std::vector<std::string>{want});
}

}  // namespace
}  // namespace tfm
