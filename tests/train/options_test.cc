// tests/train/options_test.cc — `tfm train`'s options as the library defines them (tfm/train/options.h):
// the table (every option's keys are real fields, types and defaults follow from them, names unique,
// relations name real options), resolve_train_options' rules (the starting config: preset, task
// preset, or a language model for text; layer counts per model family; needs / excludes; --resume and
// the length; --init-from; run settings; unknown and repeated options), parse_train_args' words, and
// the model config's compatibility rule for language models written before their stack was sized by
// num_decoder_layers.
//
// To add a rule: a TEST resolving the words a user would type (resolve() below) and asserting the
// config or the exact error it gives.
#include "tfm/train/options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"
#include "tfm/models/config.h"
#include "tfm/train/config.h"
#include "tfm/train/trainer.h"

namespace tfm::train {
namespace {

// What `tfm train WORDS` resolves to.
TrainSetup resolve(const std::vector<std::string>& words) { return resolve_train_options(parse_train_args(words)); }

// The message resolving WORDS throws (std::invalid_argument), or "" when it is accepted.
std::string error_of(const std::vector<std::string>& words) {
  try {
    resolve(words);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Configs compared as their JSON (every field, the model's included).
std::string json(TrainConfig c) { return c.to_json(); }

// ---- the table --------------------------------------------------------------------------------------

TEST(TrainOptions, NamesAreUniqueAndRelationsNameOptions) {
  std::set<std::string> names;
  for (const TrainOption& o : train_options()) {
    EXPECT_TRUE(names.insert(o.name).second) << "--" << o.name << " is in the table twice";
    EXPECT_FALSE(o.help.empty()) << "--" << o.name << " has no help";
    EXPECT_TRUE(o.group == "data" || o.group == "model" || o.group == "length" || o.group == "optimisation" ||
                o.group == "run")
        << "--" << o.name << " is in group '" << o.group << "'";
  }
  for (const TrainOption& o : train_options()) {
    for (const auto& n : o.needs) EXPECT_TRUE(names.count(n)) << "--" << o.name << " needs --" << n << ", not an option";
    for (const auto& n : o.excludes)
      EXPECT_TRUE(names.count(n)) << "--" << o.name << " excludes --" << n << ", not an option";
  }
  EXPECT_EQ(&train_option("d-model"), &*std::find_if(train_options().begin(), train_options().end(),
                                                     [](const TrainOption& o) { return o.name == "d-model"; }));
  try {
    train_option("x");
    ADD_FAILURE() << "train_option(\"x\") was found";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown option --x");
  }
}

// Every key names a field: set_field accepts a value of the option's type and field_text reads it back;
// the default shown is TrainConfig{}'s value of the field.
TEST(TrainOptions, EveryKeyIsARealFieldOfItsType) {
  std::set<std::string> run_settings;
  for (const TrainOption& o : train_options()) {
    if (o.keys.empty()) {
      run_settings.insert(o.name);
      continue;
    }
    std::vector<std::string> samples;
    switch (o.type) {
      case OptionType::FLAG: samples = {"true", "false"}; break;
      case OptionType::INT: samples = {"3"}; break;
      case OptionType::UINT:
        samples = {"18446744073709551615"};
        break;
      case OptionType::FLOAT: samples = {"0.5"}; break;
      case OptionType::TEXT: samples = {"some/path"}; break;
      case OptionType::CHOICE: samples = o.choices; break;
    }
    ASSERT_FALSE(samples.empty()) << "--" << o.name << " is a CHOICE without choices";
    for (const auto& key : o.keys)
      for (const auto& sample : samples) {
        TrainConfig c;
        EXPECT_NO_THROW(set_field(c, key, sample)) << "--" << o.name << ": key " << key << " = " << sample;
        EXPECT_EQ(field_text(c, key), sample) << "--" << o.name << ": key " << key;
      }
    std::string want = field_text(TrainConfig{}, o.keys.front());
    if (o.type == OptionType::FLAG && !want.empty()) want = want == "true" ? "on" : "off";
    EXPECT_EQ(o.default_text, want) << "--" << o.name;
  }
  // The options that set no config field are exactly the run settings and how a run starts.
  EXPECT_EQ(run_settings, (std::set<std::string>{"preset", "resume", "threads", "comm-timeout", "bucket-mb", "force"}));
  // The check above is not vacuous: an unknown key is refused.
  TrainConfig c;
  EXPECT_THROW(set_field(c, "no_such_field", "1"), std::invalid_argument);
}

TEST(TrainOptions, TypesChoicesAndDefaultsFollowTheFields) {
  EXPECT_EQ(train_option("d-model").type, OptionType::INT);
  EXPECT_EQ(train_option("d-model").default_text, "64");
  EXPECT_EQ(train_option("d-model").keys, (std::vector<std::string>{"d_model"}));
  EXPECT_EQ(train_option("lr").type, OptionType::FLOAT);
  EXPECT_EQ(train_option("lr").default_text, "0.001");
  const TrainOption& arch = train_option("arch");
  EXPECT_EQ(arch.type, OptionType::CHOICE);
  EXPECT_EQ(arch.choices, (std::vector<std::string>{"encoder", "seq2seq", "decoder"}));
  EXPECT_EQ(arch.default_text, "encoder");
  const TrainOption& bias = train_option("bias");
  EXPECT_EQ(bias.type, OptionType::FLAG);
  EXPECT_EQ(bias.default_text, "on");
  EXPECT_EQ(train_option("strict").default_text, "off");
  EXPECT_EQ(train_option("qkv-bias").default_text, "");  // unset: follows --bias
  EXPECT_EQ(train_option("layers").keys, (std::vector<std::string>{"num_encoder_layers", "num_decoder_layers"}));
  EXPECT_EQ(train_option("text").type, OptionType::TEXT);
  EXPECT_EQ(train_option("preset").type, OptionType::CHOICE);
  EXPECT_EQ(train_option("preset").choices, (std::vector<std::string>{"nanogpt-baby"}));
  EXPECT_EQ(train_option("threads").type, OptionType::INT);
  EXPECT_EQ(train_option("threads").default_text, "0");
  EXPECT_EQ(train_option("comm-timeout").type, OptionType::FLOAT);
  EXPECT_EQ(train_option("comm-timeout").default_text, "600");
  EXPECT_EQ(train_option("bucket-mb").default_text, "4");
}

// ---- the starting config ------------------------------------------------------------------------------

TEST(ResolveTrainOptions, TextWithoutArchTrainsALanguageModel) {
  const TrainSetup s = resolve({"--text", "t.txt", "--out", "o"});
  EXPECT_EQ(s.mode, StartMode::FRESH);
  EXPECT_EQ(s.config.model.arch, Arch::DECODER);
  EXPECT_EQ(s.config.text_path, std::filesystem::absolute("t.txt").string());  // saved absolute: --resume from anywhere
  EXPECT_EQ(s.config.out_dir, "o");
  TrainConfig want;
  want.model.arch = Arch::DECODER;
  want.text_path = s.config.text_path;  // (copied, not assigned from a literal: GCC 12's -Wrestrict false positive)
  want.out_dir = s.config.out_dir;
  EXPECT_EQ(json(s.config), json(want));
  // An --arch given is kept, and judged by the config's own checks.
  EXPECT_EQ(error_of({"--text", "t.txt", "--arch", "seq2seq", "--out", "o"}),
            "train config: arch must be decoder for text data (a language model trains on text), got seq2seq");
  // TSV data without --arch: TrainConfig{}'s arch.
  EXPECT_EQ(resolve({"--train", "a.tsv", "--valid", "b.tsv", "--out", "o"}).config.model.arch, Arch::ENCODER);
}

TEST(ResolveTrainOptions, TaskStartsFromTheTaskPresetForItsArch) {
  const TrainSetup s = resolve({"--task", "reverse", "--arch", "seq2seq", "--out", "o"});
  EXPECT_EQ(s.config.out_dir, "o");
  TrainConfig want = task_preset(data::Task::REVERSE, Arch::SEQ2SEQ);
  want.out_dir = s.config.out_dir;
  EXPECT_EQ(json(s.config), json(want));
  EXPECT_EQ(s.config.max_steps, 1600);
  EXPECT_EQ(s.config.batch.batch_size, 256);
  // Options given apply on top of it.
  const TrainSetup t = resolve({"--task", "sort", "--out", "o", "--lr", "0.01", "--d-model", "32"});
  TrainConfig want_sort = task_preset(data::Task::SORT, Arch::ENCODER);
  want_sort.out_dir = s.config.out_dir;
  want_sort.lr = 0.01f;
  want_sort.model.d_model = 32;
  EXPECT_EQ(json(t.config), json(want_sort));
}

TEST(ResolveTrainOptions, PresetStartsFromThePresetWithTheText) {
  const TrainSetup s = resolve({"--preset", "nanogpt-baby", "--text", "t.txt", "--out", "o"});
  EXPECT_EQ(s.config.text_path, std::filesystem::absolute("t.txt").string());  // saved absolute: --resume from anywhere
  EXPECT_EQ(s.config.out_dir, "o");
  TrainConfig want = preset_config(Preset::NANOGPT_BABY);
  want.text_path = s.config.text_path;  // (copied, not assigned from a literal: GCC 12's -Wrestrict false positive)
  want.out_dir = s.config.out_dir;
  EXPECT_EQ(json(s.config), json(want));
  EXPECT_EQ(s.config.model.num_decoder_layers, 4);
  EXPECT_EQ(s.config.model.d_model, 128);
  EXPECT_EQ(error_of({"--preset", "nanogpt-baby", "--out", "o", "--task", "reverse"}), "--preset requires --text");
  EXPECT_TRUE(contains(error_of({"--preset", "gpt5", "--text", "t", "--out", "o"}), "gpt5"));
}

// The length options replace the starting config's length together: --epochs on a task drops its
// preset's 1600 steps.
TEST(ResolveTrainOptions, LengthOptionsReplaceThePresetLengthTogether) {
  const TrainConfig c = resolve({"--task", "reverse", "--epochs", "2", "--out", "o"}).config;
  EXPECT_EQ(c.epochs, 2);
  EXPECT_EQ(c.max_steps, 0);
  EXPECT_EQ(c.time_budget, 0);
  const TrainConfig d = resolve({"--task", "reverse", "--time-budget", "30", "--out", "o"}).config;
  EXPECT_EQ(d.max_steps, 0);
  EXPECT_EQ(d.time_budget, 30);
  EXPECT_EQ(resolve({"--task", "reverse", "--out", "o"}).config.max_steps, 1600);  // none given: the preset's
}

// ---- layer counts by model family --------------------------------------------------------------------

TEST(ResolveTrainOptions, LayersSetEachStackTheFamilyHas) {
  const ModelConfig s2s = resolve({"--task", "reverse", "--arch", "seq2seq", "--layers", "3", "--out", "o"}).config.model;
  EXPECT_EQ(s2s.num_encoder_layers, 3);
  EXPECT_EQ(s2s.num_decoder_layers, 3);
  const ModelConfig lm = resolve({"--text", "t", "--layers", "3", "--out", "o"}).config.model;
  EXPECT_EQ(lm.arch, Arch::DECODER);
  EXPECT_EQ(lm.num_decoder_layers, 3);
  EXPECT_EQ(lm.with_arch_defaults().num_encoder_layers, 0);
  const ModelConfig enc = resolve({"--task", "reverse", "--arch", "encoder", "--layers", "3", "--out", "o"}).config.model;
  EXPECT_EQ(enc.num_encoder_layers, 3);
  // --encoder-layers / --decoder-layers override --layers whatever the order on the command line.
  for (const auto& words : {std::vector<std::string>{"--layers", "3", "--encoder-layers", "1"},
                            std::vector<std::string>{"--encoder-layers", "1", "--layers", "3"}}) {
    std::vector<std::string> w = {"--task", "reverse", "--arch", "seq2seq", "--out", "o"};
    w.insert(w.end(), words.begin(), words.end());
    const ModelConfig m = resolve(w).config.model;
    EXPECT_EQ(m.num_encoder_layers, 1);
    EXPECT_EQ(m.num_decoder_layers, 3);
  }
  EXPECT_EQ(resolve({"--text", "t", "--decoder-layers", "5", "--out", "o"}).config.model.num_decoder_layers, 5);
  // The preset's stack is replaced too.
  EXPECT_EQ(resolve({"--preset", "nanogpt-baby", "--text", "t", "--layers", "2", "--out", "o"}).config.model.num_decoder_layers, 2);
}

TEST(ResolveTrainOptions, ALayerCountForAStackTheFamilyLacksIsRefusedByName) {
  for (const auto& arch : {std::vector<std::string>{}, std::vector<std::string>{"--arch", "decoder"}}) {
    std::vector<std::string> w = {"--text", "t", "--encoder-layers", "2", "--out", "o"};
    w.insert(w.end(), arch.begin(), arch.end());
    const std::string e = error_of(w);
    EXPECT_TRUE(contains(e, "--encoder-layers does not apply to arch decoder")) << e;
    EXPECT_TRUE(contains(e, "--decoder-layers or --layers")) << e;  // what to give instead
  }
  const std::string e = error_of({"--task", "reverse", "--arch", "encoder", "--decoder-layers", "2", "--out", "o"});
  EXPECT_TRUE(contains(e, "--decoder-layers does not apply to arch encoder")) << e;
  EXPECT_TRUE(contains(e, "--encoder-layers or --layers")) << e;
  // seq2seq has both.
  EXPECT_EQ(error_of({"--task", "reverse", "--arch", "seq2seq", "--encoder-layers", "2", "--decoder-layers", "1",
                      "--out", "o"}),
            "");
}

// ---- what must and must not be given together ----------------------------------------------------------

TEST(ResolveTrainOptions, NeedsExcludesAndRequiredOptions) {
  EXPECT_EQ(error_of({"--task", "reverse", "--valid-text", "v", "--out", "o"}), "--valid-text requires --text");
  EXPECT_EQ(error_of({"--text", "t", "--task", "reverse", "--out", "o"}), "--text excludes --task");
  EXPECT_EQ(error_of({"--task", "reverse", "--train", "a", "--valid", "b", "--out", "o"}), "--task excludes --train");
  EXPECT_EQ(error_of({"--train", "a", "--out", "o"}), "--train requires --valid");
  EXPECT_EQ(error_of({"--text", "t", "--valid-text", "v", "--valid-fraction", "0.2", "--out", "o"}),
            "--valid-text excludes --valid-fraction");
  EXPECT_EQ(error_of({"--tokens", "char", "--src-tokens", "char", "--task", "reverse", "--out", "o"}),
            "--tokens excludes --src-tokens");
  EXPECT_EQ(error_of({"--task", "reverse", "--block-size", "8", "--out", "o"}), "--block-size requires --text");
  EXPECT_EQ(error_of({"--task", "reverse"}), "--out is required");
  EXPECT_EQ(error_of({"--out", "o", "--lr", "0.1"}), "--task or --train/--valid or --text is required");
  EXPECT_EQ(error_of({"--text", "t", "--valid-text", "v", "--out", "o"}), "");
}

TEST(ResolveTrainOptions, UnknownAndRepeatedOptionsAreRefused) {
  EXPECT_EQ(error_of({"--x", "1"}), "unknown option --x");
  try {
    resolve_train_options({{"x", "1"}});
    ADD_FAILURE() << "an unknown option was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown option --x");
  }
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--lr", "0.1", "--lr", "0.2"}), "--lr is given twice");
  // A flag given again replaces its value, as on tfm train's command line: the last one counts.
  EXPECT_FALSE(resolve_train_options(parse_train_args({"--task", "reverse", "--out", "o", "--bias", "--no-bias"})).config.model.bias);
  EXPECT_TRUE(resolve_train_options(parse_train_args({"--task", "reverse", "--out", "o", "--no-bias", "--bias"})).config.model.bias);
  try {
    resolve_train_options({{"out", "o"}, {"task", "reverse"}, {"d-model", "8"}, {"d-model", "8"}});
    ADD_FAILURE() << "a repeated option was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--d-model is given twice");
  }
  // A value that does not fit its field names the option (AValueThatDoesNotParseNamesTheOptionGiven below).
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--d-model", "wide"}),
            "train config: --d-model must be an integer, got 'wide'");
  EXPECT_TRUE(contains(error_of({"--task", "reverse", "--out", "o", "--arch", "rnn"}), "rnn"));
}

// A value that does not parse names the option given, as the user spelled it (a Python keyword is the same name with
// '_' for '-'), never the config fields it sets: --tokens sets src_tokens and tgt_tokens, --layers the layer count of
// each stack, num_encoder_layers first even for a model without an encoder. For every option with a typed value: a
// refused value's message names --<option> (or the closed set's noun when that is the option's name: "unknown task"),
// and no key other than the option's own name.
TEST(ResolveTrainOptions, AValueThatDoesNotParseNamesTheOptionGiven) {
  EXPECT_EQ(error_of({"--text", "t.txt", "--tokens", "wordpiece", "--out", "o"}),
            "train config: --tokens: unknown tokenization 'wordpiece' (expected char, space, byte, spm or gpt2-bpe)");
  EXPECT_EQ(error_of({"--text", "t.txt", "--layers", "x", "--out", "o"}),
            "train config: --layers must be an integer, got 'x'");
  EXPECT_EQ(error_of({"--task", "reverse", "--decoder-layers", "1.5", "--out", "o"}),
            "train config: --decoder-layers must be an integer, got '1.5'");
  EXPECT_EQ(error_of({"--task", "reverse", "--arch", "rnn", "--out", "o"}),
            "train config: --arch: unknown architecture 'rnn' (expected encoder, seq2seq or decoder)");
  EXPECT_EQ(error_of({"--text", "t.txt", "--arch", "rnn", "--out", "o"}),
            "train config: --arch: unknown architecture 'rnn' (expected encoder, seq2seq or decoder)");
  EXPECT_EQ(error_of({"--task", "rot13", "--out", "o"}),
            "train config: unknown task 'rot13' (expected reverse, copy or sort)");
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--lr", "fast"}),
            "train config: --lr must be a number, got 'fast'");
  const std::vector<GivenOptions> starts = {
      {{"out", "o"}}, {{"text", "t.txt"}, {"out", "o"}}, {{"train", "a.tsv"}, {"valid", "b.tsv"}, {"out", "o"}}};
  int checked = 0;
  for (const TrainOption& o : train_options()) {
    if (o.keys.empty() || o.type == OptionType::TEXT) continue;
    const std::string bad = o.type == OptionType::FLAG ? "maybe" : "x";
    std::string e;
    for (GivenOptions given : starts) {  // the first start the option's needs and excludes allow
      given.emplace_back(o.name, bad);
      try {
        resolve_train_options(given);
        e = "";
      } catch (const std::invalid_argument& error) {
        e = error.what();
      }
      if (!contains(e, "requires --") && !contains(e, "excludes --") && !contains(e, " is required")) break;
    }
    std::string keyword = o.name;
    std::replace(keyword.begin(), keyword.end(), '-', '_');
    EXPECT_TRUE(contains(e, "--" + o.name + (o.type == OptionType::CHOICE ? ": unknown " : " must be ")) ||
                contains(e, "train config: unknown " + o.name + " '" + bad + "'"))
        << "--" << o.name << " " << bad << ": " << e;
    for (const auto& key : o.keys)
      EXPECT_TRUE(key == keyword || !contains(e, key)) << "--" << o.name << " " << bad << " names " << key << ": " << e;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// A value that parses but is out of range is refused by the config's own check, which names config
// fields: the options that set a field under another name are named beside it.
TEST(ResolveTrainOptions, ARangeErrorNamesTheOptionThatSetTheField) {
  EXPECT_EQ(error_of({"--text", "t.txt", "--tokens", "space", "--out", "o"}),
            "train config: tgt_tokens must be char or byte for text data (not space), or spm or gpt2-bpe for "
            "subwords (given as --tokens space)");
  EXPECT_EQ(error_of({"--text", "t.txt", "--layers", "0", "--out", "o"}),
            "model config: num_decoder_layers must be at least 1, got 0 (given as --layers 0)");
  EXPECT_EQ(error_of({"--task", "reverse", "--arch", "seq2seq", "--decoder-layers", "0", "--out", "o"}),
            "model config: num_decoder_layers must be at least 1, got 0 (given as --decoder-layers 0)");
  EXPECT_EQ(error_of({"--task", "reverse", "--tokens", "spm", "--out", "o"}),
            "train config: src_tokens/tgt_tokens spm does not apply to a built-in task (its tokens are numbers) "
            "(given as --tokens spm)");
  // An option named as its field adds nothing; a value from a preset is no option's.
  EXPECT_EQ(error_of({"--task", "reverse", "--lr", "-1", "--out", "o"}),
            "train config: lr must be a positive number, got -1");
  EXPECT_EQ(error_of({"--task", "reverse", "--drop-path", "1.5", "--out", "o"}),
            "model config: drop_path must be in [0, 1), got 1.5");
  // Checked before the run starts: nothing is written.
  EXPECT_FALSE(std::filesystem::exists("o"));
}

// ---- run settings -----------------------------------------------------------------------------------------

TEST(ResolveTrainOptions, RunSettingsAreNotPartOfTheConfig) {
  const TrainSetup plain = resolve({"--task", "reverse", "--out", "o"});
  EXPECT_EQ(plain.run.threads, 0);
  EXPECT_EQ(plain.run.comm_timeout, 600);
  EXPECT_EQ(plain.run.bucket_mb, 4);
  const TrainSetup s = resolve({"--task", "reverse", "--out", "o", "--threads", "3", "--comm-timeout", "5", "--bucket-mb", "0.5"});
  EXPECT_EQ(s.run.threads, 3);
  EXPECT_EQ(s.run.comm_timeout, 5);
  EXPECT_EQ(s.run.bucket_mb, 0.5);
  EXPECT_EQ(json(s.config), json(plain.config));
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--threads", "two"}), "--threads must be a number, got 'two'");
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--threads", "1.5"}),
            "--threads must be an integer, got '1.5'");
  // A negative count is out of --threads' range, said as every command says it.
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--threads", "-1"}),
            "--threads must be in [0, 1024] (0: OMP_NUM_THREADS, else every core), got -1");
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--comm-timeout", "0"}),
            "--comm-timeout must be a positive number of seconds");
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "o", "--bucket-mb", "2048"}), "--bucket-mb must be in (0, 1024] MiB, got 2048");
}

// ---- --resume and --init-from ---------------------------------------------------------------------------

// A checkpointed run of 4 steps (a tiny reverse-task encoder) to resume.
const std::string& saved_run() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("options_resume");
    TrainConfig c;
    c.task = data::Task::REVERSE;
    c.task_train_size = 64;
    c.task_valid_size = 8;
    c.model.d_model = 8;
    c.model.nhead = 2;
    c.model.num_encoder_layers = 1;
    c.model.dim_feedforward = 16;
    c.max_steps = 4;
    c.eval_every = 4;
    c.batch.batch_size = 16;
    c.lr = 5e-3f;
    c.out_dir = d;
    run_training(c);
    return d;
  }();
  return dir;
}

TEST(ResolveTrainOptions, ResumeContinuesTheSavedConfig) {
  const std::string dir = saved_run();
  const TrainConfig saved = load_train_config(dir);
  ASSERT_EQ(saved.max_steps, 4);
  const TrainSetup s = resolve({"--resume", dir});
  EXPECT_EQ(s.mode, StartMode::RESUME);
  EXPECT_EQ(json(s.config), json(saved));
  EXPECT_EQ(s.config.out_dir, dir);
  // Run settings may change.
  const TrainSetup t = resolve({"--resume", dir, "--threads", "2", "--comm-timeout", "30", "--bucket-mb", "1"});
  EXPECT_EQ(t.run.threads, 2);
  EXPECT_EQ(json(t.config), json(saved));
}

TEST(ResolveTrainOptions, ResumeRefusesSettingsByName) {
  const std::string dir = saved_run();
  std::string e = error_of({"--resume", dir, "--lr", "0.1"});
  EXPECT_TRUE(contains(e, "(got --lr)")) << e;
  EXPECT_TRUE(contains(e, dir + "/config.json")) << e;
  e = error_of({"--resume", dir, "--d-model", "16", "--lr", "0.1", "--max-steps", "9"});
  EXPECT_TRUE(contains(e, "(got --d-model, --lr)")) << e;  // every one, in the table's order; the length is allowed
  e = error_of({"--resume", dir, "--out", "elsewhere"});
  EXPECT_TRUE(contains(e, "(got --out)")) << e;
}

// The run's precision may be repeated on --resume (it is the saved one); another is refused by name, and int8 is
// refused for training wherever it is asked.
TEST(ResolveTrainOptions, ResumeKeepsTheDtypeAndRefusesAnother) {
  const std::string dir = saved_run();  // trained in f32
  EXPECT_EQ(resolve({"--resume", dir, "--dtype", "f32"}).config.dtype, Precision::FLOAT32);
  EXPECT_EQ(resolve({"--resume", dir, "--dtype", "float32"}).config.dtype, Precision::FLOAT32);
  const std::string e = error_of({"--resume", dir, "--dtype", "bf16"});
  EXPECT_TRUE(contains(e, "--dtype bf16: the run in " + dir + " trains in f32 (config.json \"dtype\")")) << e;
  EXPECT_EQ(error_of({"--task", "reverse", "--out", "x", "--dtype", "int8"}),
            "train config: dtype (--dtype) int8 is for inference (eval, translate, generate, forward, bench --mode "
            "infer); train in f32 or bf16");
  EXPECT_EQ(resolve({"--task", "reverse", "--out", "x", "--dtype", "bf16"}).config.dtype, Precision::BFLOAT16);
}

TEST(ResolveTrainOptions, ResumeLengthOptionsReplaceTheSavedLengthTogether) {
  const std::string dir = saved_run();
  const TrainConfig epochs = resolve({"--resume", dir, "--epochs", "3"}).config;
  EXPECT_EQ(epochs.epochs, 3);
  EXPECT_EQ(epochs.max_steps, 0);  // the saved 4 steps no longer limit the run
  EXPECT_EQ(epochs.time_budget, 0);
  const TrainConfig both = resolve({"--resume", dir, "--time-budget", "60", "--max-steps", "9"}).config;
  EXPECT_EQ(both.max_steps, 9);
  EXPECT_EQ(both.time_budget, 60);
  EXPECT_EQ(both.epochs, 0);
  // Nothing else changes.
  TrainConfig want = load_train_config(dir);
  want.max_steps = 9;
  want.time_budget = 60;
  EXPECT_EQ(json(both), json(want));
  EXPECT_EQ(resolve({"--resume", dir}).config.max_steps, 4);
}

TEST(ResolveTrainOptions, InitFromRefusesModelOptionsByName) {
  const std::string dir = saved_run();
  std::string e = error_of({"--init-from", dir, "--task", "reverse", "--out", "o2", "--d-model", "16", "--tokens", "char"});
  EXPECT_TRUE(contains(e, "(got --tokens, --d-model)")) << e;
  const TrainSetup s = resolve({"--init-from", dir, "--task", "reverse", "--out", "o2", "--dropout", "0.2", "--lr", "0.01"});
  EXPECT_EQ(s.mode, StartMode::INIT_FROM);
  EXPECT_EQ(s.config.init_from, dir);
  EXPECT_FLOAT_EQ(s.config.model.dropout, 0.2f);
  EXPECT_FLOAT_EQ(s.config.lr, 0.01f);
}

// ---- parse_train_args ---------------------------------------------------------------------------------------

TEST(ParseTrainArgs, ValuesFlagsAndErrors) {
  const GivenOptions g = parse_train_args({"--d-model=32", "--lr", "0.5", "--no-bias", "--strict", "--out=a=b", "--text="});
  EXPECT_EQ(g, (GivenOptions{{"d-model", "32"}, {"lr", "0.5"}, {"bias", "false"}, {"strict", "true"}, {"out", "a=b"}, {"text", ""}}));
  const auto error = [](const std::vector<std::string>& words) {
    try {
      parse_train_args(words);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error({"--lr", "0.1", "--d-model"}), "--d-model needs a value");
  EXPECT_EQ(error({"--x", "1"}), "unknown option --x");
  EXPECT_EQ(error({"--no-x"}), "unknown option --x");
  EXPECT_EQ(parse_train_args({"--bias=false"}), (GivenOptions{{"bias", "false"}}));  // CLI11's --x=value form
  EXPECT_EQ(parse_train_args({"--strict=true"}), (GivenOptions{{"strict", "true"}}));
  EXPECT_EQ(error({"--bias=yes"}), "--bias is a flag: --bias, --no-bias or --bias=true|false, got '--bias=yes'");
  EXPECT_EQ(error({"--no-bias=true"}), "--bias is a flag: --bias, --no-bias or --bias=true|false, got '--no-bias=true'");
  EXPECT_EQ(error({"--no-lr"}), "--no-lr: --lr is not a flag");
  EXPECT_EQ(error({"reverse"}), "expected an option, got 'reverse'");
  EXPECT_EQ(error({"--lr", "0.1", "0.2"}), "expected an option, got '0.2'");
  EXPECT_EQ(parse_train_args({}), GivenOptions{});
}

// ---- the model config's compatibility rule ---------------------------------------------------------------------

// A language model's config.json written before its stack was sized by num_decoder_layers holds the
// stack's size in num_encoder_layers; one written now holds num_encoder_layers 0.
TEST(ModelConfigCompat, LanguageModelLayersOfOldAndNewFiles) {
  const ModelConfig old = ModelConfig::from_json(
      R"({"arch": "decoder", "num_encoder_layers": 4, "num_decoder_layers": 2, "tgt_vocab_size": 10, "d_model": 16, "nhead": 2, "dim_feedforward": 32})");
  EXPECT_EQ(old.num_decoder_layers, 4);
  EXPECT_EQ(old.num_encoder_layers, 0);

  ModelConfig c;
  c.arch = Arch::DECODER;
  c.tgt_vocab_size = 10;
  c.num_decoder_layers = 3;
  c.num_encoder_layers = 5;  // not used by a language model
  const std::string written = c.to_json();
  const nlohmann::json j = nlohmann::json::parse(written);
  EXPECT_EQ(j["num_encoder_layers"], 0) << written;
  EXPECT_EQ(j["num_decoder_layers"], 3) << written;
  const ModelConfig back = ModelConfig::from_json(written);  // not read by the old files' rule
  EXPECT_EQ(back.num_decoder_layers, 3);
  EXPECT_EQ(back.num_encoder_layers, 0);
  EXPECT_EQ(back.to_json(), written);
  // The other families keep both counts as given.
  ModelConfig s2s;
  s2s.arch = Arch::SEQ2SEQ;
  s2s.src_vocab_size = s2s.tgt_vocab_size = 10;
  s2s.num_encoder_layers = 4;
  s2s.num_decoder_layers = 2;
  const ModelConfig s2s_back = ModelConfig::from_json(s2s.to_json());
  EXPECT_EQ(s2s_back.num_encoder_layers, 4);
  EXPECT_EQ(s2s_back.num_decoder_layers, 2);
}

}  // namespace
}  // namespace tfm::train
