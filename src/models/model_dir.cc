// src/models/model_dir.cc — reading a trained model directory and decoding with it
// (tfm/models/model_dir.h describes the files).
#include "tfm/models/model_dir.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <tuple>

#include "io/file_util.h"
#include "json_fields.h"
#include "quote.h"
#include "tensor_impl.h"
#include "tfm/data/batching.h"
#include "tfm/data/text.h"
#include "tfm/data/tsv.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/quantize.h"
#include "tfm/random.h"

namespace tfm {

namespace model_dir {

std::string path(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

std::string config_json(const ModelConfig& model, const std::string& train_json, const data::Vocab& src_vocab,
                        const data::Vocab& tgt_vocab, data::Tokenization src_tokens, data::Tokenization tgt_tokens,
                        bool json_vocab) {
  ordered_json j;
  j["format"] = "tfm-train";
  j["version"] = FORMAT_VERSION;
  j["model"] = ordered_json::parse(model.to_json());
  j["train"] = ordered_json::parse(train_json);
  j["vocab"] = {{"src", json_vocab ? SRC_VOCAB_JSON : SRC_VOCAB},
                {"tgt", json_vocab ? TGT_VOCAB_JSON : TGT_VOCAB},
                {"src_size", src_vocab.size()},
                {"tgt_size", tgt_vocab.size()},
                {"src_tokens", enum_name(src_tokens)},
                {"tgt_tokens", enum_name(tgt_tokens)}};
  return j.dump(2) + "\n";
}

std::string src_vocab_path(const std::string& dir) {
  const std::string j = path(dir, SRC_VOCAB_JSON);
  return std::filesystem::exists(j) ? j : path(dir, SRC_VOCAB);
}

std::string tgt_vocab_path(const std::string& dir) {
  const std::string j = path(dir, TGT_VOCAB_JSON);
  return std::filesystem::exists(j) ? j : path(dir, TGT_VOCAB);
}

void save_vocabs(const std::string& dir, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, bool json) {
  src_vocab.save(path(dir, json ? SRC_VOCAB_JSON : SRC_VOCAB));
  tgt_vocab.save(path(dir, json ? TGT_VOCAB_JSON : TGT_VOCAB));
  std::error_code ec;  // a file of the other format left by an earlier run in DIR would shadow or confuse
  std::filesystem::remove(path(dir, json ? SRC_VOCAB : SRC_VOCAB_JSON), ec);
  std::filesystem::remove(path(dir, json ? TGT_VOCAB : TGT_VOCAB_JSON), ec);
}

void copy_description(const std::string& from, const std::string& to) {
  for (const char* f : DESCRIPTION_FILES) {
    const std::filesystem::path p = std::filesystem::path(from) / f;
    if (std::filesystem::exists(p)) std::filesystem::copy_file(p, std::filesystem::path(to) / f);
  }
}

void save_tokenizers(const std::string& dir, const data::Tokenizer& src, const data::Tokenizer& tgt) {
  const bool joint = src.is_spm() && tgt.is_spm() && src.spm_model() == tgt.spm_model();
  std::error_code ec;
  if (joint) {
    io::write_file_atomic(path(dir, JOINT_SPM), src.spm_model());
  } else {
    if (src.is_spm()) io::write_file_atomic(path(dir, SRC_SPM), src.spm_model());
    if (tgt.is_spm()) io::write_file_atomic(path(dir, TGT_SPM), tgt.spm_model());
    std::filesystem::remove(path(dir, JOINT_SPM), ec);
  }
  // A model left by an earlier run in DIR would be taken for this run's.
  if (joint || !src.is_spm()) std::filesystem::remove(path(dir, SRC_SPM), ec);
  if (joint || !tgt.is_spm()) std::filesystem::remove(path(dir, TGT_SPM), ec);
  // One BPE per directory: its two files, as they were read.
  const data::Tokenizer* bpe = tgt.is_bpe() ? &tgt : src.is_bpe() ? &src : nullptr;
  if (bpe && src.is_bpe() && tgt.is_bpe() &&
      (src.bpe_vocab_json() != tgt.bpe_vocab_json() || src.bpe_merges() != tgt.bpe_merges()))
    throw std::invalid_argument(dir + ": the source and target sides have different gpt2-bpe files (" + src.name() +
                                "; " + tgt.name() + "); a model directory holds one BPE");
  if (bpe) {
    io::write_file_atomic(path(dir, BPE_VOCAB), bpe->bpe_vocab_json());
    io::write_file_atomic(path(dir, BPE_MERGES), bpe->bpe_merges());
  } else {
    std::filesystem::remove(path(dir, BPE_VOCAB), ec);
    std::filesystem::remove(path(dir, BPE_MERGES), ec);
  }
}

data::Tokenizer load_tokenizer(const std::string& dir, data::Tokenization t, bool target) {
  if (t == data::Tokenization::GPT2_BPE) return data::Tokenizer::load_gpt2_bpe(path(dir, BPE_VOCAB), path(dir, BPE_MERGES));
  if (t != data::Tokenization::SPM) return t;
  const std::string side = path(dir, target ? TGT_SPM : SRC_SPM), joint = path(dir, JOINT_SPM);
  if (std::filesystem::exists(side)) return data::Tokenizer::load_spm(side);
  if (std::filesystem::exists(joint)) return data::Tokenizer::load_spm(joint);
  throw std::runtime_error(side + ": missing (" + path(dir, CONFIG) + " says the " + (target ? "target" : "source") +
                           " tokenization is spm, and there is no " + joint + " either)");
}

namespace {

// DIR/config.json parsed and checked (format, version, the "model" and "train" objects). A file that is
// not such a config is a data-file error (data::DataError), as a corrupt model.safetensors beside it is.
ordered_json parse_config(const std::string& dir) {
  const std::string file = path(dir, CONFIG);
  ordered_json j;
  try {
    j = parse_json_keys_once(io::read_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw data::DataError(file + ": not valid JSON: " + escape_text(e.what(), kMaxMessage));
  } catch (const std::invalid_argument& e) {  // a repeated key
    throw data::DataError(file + ": " + e.what());
  }
  const auto* format = j.is_object() && j.contains("format") ? &j.at("format") : nullptr;
  if (!format || !format->is_string() || format->get<std::string>() != "tfm-train")
    throw data::DataError(file + ": not a tfm training directory config (\"format\": \"tfm-train\" missing)");
  const ordered_json version = j.value("version", ordered_json(0));
  if (!version.is_number_integer() || version.get<int64_t>() != FORMAT_VERSION)
    throw data::DataError(file + ": unsupported version " + version.dump());
  if (!j.contains("model") || !j.contains("train")) throw data::DataError(file + ": missing \"model\" or \"train\"");
  return j;
}

}  // namespace

std::string read_config_section(const std::string& dir, const char* section) {
  const ordered_json j = parse_config(dir);
  if (!j.contains(section)) throw data::DataError(path(dir, CONFIG) + ": missing \"" + section + "\"");
  return j.at(section).dump();
}

ConfigSections read_config(const std::string& dir) {
  const ordered_json j = parse_config(dir);
  if (!j.contains("vocab")) throw data::DataError(path(dir, CONFIG) + ": missing \"vocab\"");
  return ConfigSections{j.at("model").dump(), j.at("train").dump(), j.at("vocab").dump()};
}

}  // namespace model_dir

TrainedModel load_model_dir(const std::string& dir, WeightsLoad weights) {
  TrainedModel m;
  m.dir = dir;
  const model_dir::ConfigSections config = model_dir::read_config(dir);
  m.train_json = config.train;
  const std::string config_file = model_dir::path(dir, model_dir::CONFIG);
  const ModelConfig mc = [&] {
    // Keys every config.json tfm has written holds. Missing, one would take its default without a word, and
    // some change what the model computes without changing a weight's shape (nhead, the special ids).
    const ordered_json model = ordered_json::parse(config.model);
    // A config that is not what tfm writes is the directory's data error (OSError in Python), as a corrupt
    // model.safetensors beside it is.
    for (const char* key : {"d_model", "nhead", "dim_feedforward", "num_encoder_layers", "num_decoder_layers",
                            "src_vocab_size", "tgt_vocab_size", "max_len", "pad_id", "bos_id", "eos_id"})
      if (model.is_object() && !model.contains(key))
        throw data::DataError(config_file + ": model config: missing required key '" + key + "'");
    try {
      return ModelConfig::from_json(config.model);
    } catch (const std::invalid_argument& e) {  // "model config: ..." — said of this file
      throw data::DataError(config_file + ": " + e.what());
    }
  }();
  // "vocab": {"src", "tgt": the files (one of the two names each), "src_size", "tgt_size": their entries,
  // "src_tokens", "tgt_tokens": the tokenizations}, as config_json writes it; each key checked, none other taken.
  const ordered_json vocab = ordered_json::parse(config.vocab);
  const auto bad_vocab = [&](const std::string& what) { return data::DataError(config_file + ": \"vocab\": " + what); };
  if (!vocab.is_object()) throw bad_vocab("expected an object, got " + escape_text(vocab.dump(), kMaxMessage));
  for (const auto& [key, value] : vocab.items())
    if (key != "src" && key != "tgt" && key != "src_size" && key != "tgt_size" && key != "src_tokens" &&
        key != "tgt_tokens")
      throw bad_vocab("unknown key " + quote_name(key));
  const auto tokens_of = [&](const char* key) {
    if (!vocab.contains(key) || !vocab.at(key).is_string())
      throw bad_vocab(std::string("'") + key + "' must be a tokenization name, got " +
                      (vocab.contains(key) ? escape_text(vocab.at(key).dump(), kMaxMessage) : "nothing"));
    try {
      return enum_from_name<data::Tokenization>(vocab.at(key).get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw bad_vocab(std::string("'") + key + "': " + e.what());
    }
  };
  const data::Tokenization src_tokens = tokens_of("src_tokens"), tgt_tokens = tokens_of("tgt_tokens");
  // The file named, when named (one of the two names tfm writes), else the one present.
  const auto vocab_file = [&](const char* key, const char* txt, const char* json, const std::string& present) {
    if (!vocab.contains(key)) return present;
    const ordered_json& v = vocab.at(key);
    if (!v.is_string() || (v.get<std::string>() != txt && v.get<std::string>() != json))
      throw bad_vocab(std::string("'") + key + "' must be \"" + txt + "\" or \"" + json + "\", got " +
                      escape_text(v.dump(), kMaxMessage));
    return model_dir::path(dir, v.get<std::string>().c_str());
  };
  m.src_tokenizer = model_dir::load_tokenizer(dir, src_tokens, /*target=*/false);
  m.tgt_tokenizer = model_dir::load_tokenizer(dir, tgt_tokens, /*target=*/true);
  const std::string src_file =
      vocab_file("src", model_dir::SRC_VOCAB, model_dir::SRC_VOCAB_JSON, model_dir::src_vocab_path(dir));
  const std::string tgt_file =
      vocab_file("tgt", model_dir::TGT_VOCAB, model_dir::TGT_VOCAB_JSON, model_dir::tgt_vocab_path(dir));
  try {
    m.src_vocab = data::Vocab::load(src_file);
    m.tgt_vocab = data::Vocab::load(tgt_file);
  } catch (const std::invalid_argument& e) {  // a vocabulary file that is not one: the directory's data
    throw data::DataError(e.what());
  }
  if (m.src_vocab.size() != mc.src_vocab_size || m.tgt_vocab.size() != mc.tgt_vocab_size)
    throw data::DataError(src_file + " and " + tgt_file + ": " + std::to_string(m.src_vocab.size()) + " and " +
                          std::to_string(m.tgt_vocab.size()) + " entries, but the model's config.json says " +
                          std::to_string(mc.src_vocab_size) + " and " + std::to_string(mc.tgt_vocab_size));
  for (const auto& [key, v] : {std::pair{"src_size", &m.src_vocab}, {"tgt_size", &m.tgt_vocab}})
    if (vocab.contains(key) && vocab.at(key) != ordered_json(v->size()))
      throw bad_vocab(std::string("'") + key + "' is " + escape_text(vocab.at(key).dump(), kMaxMessage) +
                      ", but its file holds " + std::to_string(v->size()) + " entries");
  // The special ids the config names are those entries of the vocabularies where these hold tfm's specials: a file
  // whose <pad> and <eos> lines were swapped would end every sentence at a pad. (An imported model may name a word
  // as a special id, or one entry for two roles, pad_id = eos_id: only an entry that is another special the config
  // puts elsewhere is refused.)
  const auto is_special = [](const std::string& t) {
    return t == data::Vocab::PAD || t == data::Vocab::BOS || t == data::Vocab::EOS || t == data::Vocab::UNK;
  };
  const auto config_id = [&](const std::string& t) {  // the id config.json gives special t (−1: none)
    return t == data::Vocab::PAD   ? mc.pad_id
           : t == data::Vocab::BOS ? mc.bos_id
           : t == data::Vocab::EOS ? mc.eos_id
                                   : -1;
  };
  for (const auto& [file, v] : {std::pair{&src_file, &m.src_vocab}, {&tgt_file, &m.tgt_vocab}})
    for (const auto& [key, id, piece] : {std::tuple{"pad_id", mc.pad_id, data::Vocab::PAD},
                                         {"bos_id", mc.bos_id, data::Vocab::BOS},
                                         {"eos_id", mc.eos_id, data::Vocab::EOS}})
      if (id >= 0 && id < v->size() && v->token(id) != piece && is_special(v->token(id)) &&
          config_id(v->token(id)) != id)
        throw data::DataError(*file + ": entry " + std::to_string(id) + " is " + quote_name(v->token(id)) +
                              ", but config.json's model " + key + " " + std::to_string(id) + " names " + piece);
  // With weights, every parameter is overwritten next: the initialisation draws nothing.
  m.generator = std::make_unique<Generator>(Generator{0, 0, /*no_draws=*/weights != WeightsLoad::NONE});
  m.model = std::make_unique<Model>(mc, *m.generator);
  if (weights != WeightsLoad::NONE) {
    const std::string file = model_dir::path(dir, model_dir::MODEL);
    const bool mapped = weights == WeightsLoad::MAP_READ_ONLY;
    // Zero-copy: COPY copies into the parameters from the mapping (one copy, not two); MAP_READ_ONLY's
    // parameters are the mapping's views (load_state_dict's assign).
    io::SafeTensorsFile f =
        io::load_safetensors(file, io::LoadOptions{.zero_copy = true, .read_only = mapped, .keep_int8 = true});
    m.quantized = is_quantized(f);
    // tfm quantize's files say what they hold in their metadata: another value, or I8 tensors without it, is a
    // file this version cannot read as it was meant.
    const auto tag = f.metadata.find(QUANTIZATION_METADATA_KEY);
    if (!m.quantized && tag != f.metadata.end())
      throw data::DataError(file + ": metadata " + quote_name(QUANTIZATION_METADATA_KEY) + " is " +
                            quote_name(tag->second) + ", expected '" + QUANTIZATION_INT8 + "' (tfm quantize's)");
    if (!m.quantized && !f.int8.empty())
      throw data::DataError(file + ": I8 tensors (" + quote_name(f.int8.begin()->first) +
                            ", ...) without the metadata " + quote_name(QUANTIZATION_METADATA_KEY) + " = '" +
                            QUANTIZATION_INT8 + "' that tfm quantize writes beside them");
    if (m.quantized) check_quantized_shapes(f, m.model->state_dict());  // its errors name the stored I8
    if (m.quantized && mapped) {  // matrices computed when read: int8 inference packs their integers
      m.model->load_state_dict(dequantize_state_dict_lazy(f), file, /*assign=*/true);
      allocator_release_cache();
    } else if (m.quantized) {  // dequantized straight into the parameters (a failed load discards the model)
      const NamedTensors params = m.model->state_dict();
      m.model->load_state_dict(dequantize_state_dict(f, &params), file);
    } else {
      NamedTensors state = f.tensors;
      // PyTorch's state_dict() of a tied model lists the shared matrix twice, as the embedding and as
      // generator.weight: that alias is taken when it holds the embedding's values, and named otherwise.
      const char* tied = mc.family().tied_key;
      const auto head = state.find("generator.weight");
      if (mc.ties_embeddings() && tied && head != state.end()) {
        const auto emb = state.find(tied);
        const auto same = [](const Tensor& a, const Tensor& b) {  // bitwise (file tensors load as Float32)
          return a.dtype() == DType::FLOAT32 && b.dtype() == DType::FLOAT32 && a.shape() == b.shape() &&
                 std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
        };
        if (emb == state.end() || !same(head->second, emb->second))
          throw data::DataError(file + ": tensor 'generator.weight' is not " + quote_name(tied) +
                                " (config.json's tie_embeddings shares one matrix): drop the key, or set "
                                "tie_embeddings false");
        state.erase("generator.weight");
      }
      for (const auto& [key, q] : f.int8) {  // I8 in an unquantized file loads as Float32, as any integer dtype
        Tensor t = Tensor::empty(q.shape);
        const int8_t* v = q.values();
        for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = v[i];
        state.insert(key, std::move(t));
      }
      m.model->load_state_dict(state, file, /*assign=*/mapped);
      // The parameters' first storage, now unused, to the system rather than the allocator's idle blocks.
      if (mapped) allocator_release_cache();
    }
    // A weight that is NaN or infinite (a corrupt or hand-made file: training never saves one) would make
    // every output NaN, decoded without a word as empty text.
    for (const auto& [key, t] : m.model->named_parameters()) {
      if (!materialized(t)) continue;  // a lazy int8 matrix: finite by its scales' check
      const float* p = t.data();
      for (int64_t i = 0, n = t.numel(); i < n; ++i)
        if (!std::isfinite(p[i]))
          throw std::runtime_error(file + ": tensor '" + key + "' holds " + (std::isnan(p[i]) ? "NaN" : "an infinity") +
                                   " (element " + std::to_string(i) + "): not a model tfm can run");
      drop_file_pages(t);  // MAP_READ_ONLY's, read once here: the run reads again only what it uses
    }
  }
  m.generator->no_draws = false;
  m.model->eval();
  return m;
}

const Model& require_model(const TrainedModel& m) {
  if (!m.model)
    throw std::invalid_argument(
        "TrainedModel: holds no model (default-constructed or moved from): load one with load_model_dir");
  return *m.model;
}

void require_data(const TrainedModel& m, DataKind kind, const std::string& use) {
  const ModelConfig& c = require_model(m).config();
  if (c.family().data == kind) return;
  if (kind == DataKind::TEXT)
    throw std::invalid_argument(m.dir + " is not a language model (arch " + std::string(enum_name(c.arch)) + "); " + use);
  throw std::invalid_argument(m.dir + " is a language model: " + use);
}

void check_stop_text(const std::string& text) {
  if (text.empty()) throw std::invalid_argument("stop: empty: give the text to stop at");
}

std::function<bool(int64_t, const std::vector<int32_t>&)> stop_at_text(const TrainedModel& m, const std::string& text) {
  require_model(m);
  check_stop_text(text);
  return [&m, text](int64_t, const std::vector<int32_t>& generated) {
    if (generated.empty()) return false;
    const auto piece = [&](size_t i) { return data::decode_text(m.tgt_vocab, m.tgt_tokenizer, {generated[i]}); };
    // The newest token's text after enough of the earlier tokens' to hold text.size() − 1 bytes: a match
    // the newest token completes lies there, and every earlier match would have ended the sample before.
    const std::string newest = piece(generated.size() - 1);
    std::string before;
    for (size_t i = generated.size() - 1; i-- > 0 && before.size() + 1 < text.size();) before = piece(i) + before;
    const std::string tail = before + newest;
    const size_t at = tail.find(text, before.size() >= text.size() ? before.size() - (text.size() - 1) : 0);
    return at != std::string::npos && at + text.size() > before.size();
  };
}

std::string read_prompt_file(const std::string& path) {
  if (path == "-") return read_prompt_file("/dev/stdin");  // the usual name of standard input
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return io::read_file(path);
  if (std::filesystem::is_directory(path, ec)) throw io::IoError(path + ": is a directory, not a prompt file");
  // A pipe or a device (--prompt-file /dev/stdin, <(cmd)): read to its end, within a bound a prompt never nears.
  constexpr size_t kMaxPrompt = size_t(64) << 20;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw io::IoError(path + ": open failed: " + std::strerror(errno));
  std::string text;
  std::vector<char> buf(size_t(1) << 16);
  while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())) || f.gcount() > 0) {
    text.append(buf.data(), static_cast<size_t>(f.gcount()));
    if (text.size() > kMaxPrompt) throw io::IoError(path + ": longer than 64 MiB, more than a prompt");
  }
  return text;
}

std::vector<int32_t> encode_prompt(const TrainedModel& m, const std::string& prompt, const std::string& prompt_name) {
  require_model(m);
  if (prompt.empty())
    throw std::invalid_argument((prompt_name == "prompt" || prompt_name.rfind("--", 0) == 0 ? "" : prompt_name + ": ") +
                                "the prompt is empty (give at least one character)");  // a file's name said
  return data::encode_text(m.tgt_vocab, m.tgt_tokenizer, prompt, prompt_name);
}

std::vector<std::string> generate_text(const TrainedModel& m, const std::string& prompt, GenerateOptions options,
                                       const std::optional<std::string>& stop,
                                       const std::function<void(int64_t, const std::string&)>& on_piece,
                                       const std::string& prompt_name) {
  return generate_text(m, encode_prompt(m, prompt, prompt_name), std::move(options), stop, on_piece);
}

std::vector<std::string> generate_text(const TrainedModel& m, const std::vector<int32_t>& prompt_ids,
                                       GenerateOptions options, const std::optional<std::string>& stop,
                                       const std::function<void(int64_t, const std::string&)>& on_piece) {
  const Model& model = require_model(m);
  check_generate_options(options);  // num_samples bounded before `texts` is sized by it
  const std::vector<int32_t> never = never_generated(m);
  options.suppress.insert(options.suppress.end(), never.begin(), never.end());
  if (stop) options.stop_after = stop_at_text(m, *stop);
  std::vector<std::string> texts(static_cast<size_t>(options.num_samples));
  generate(model, prompt_ids, options, [&](int64_t sample, int32_t token) {
    const std::string piece = data::decode_text(m.tgt_vocab, m.tgt_tokenizer, {token});
    texts[static_cast<size_t>(sample)] += piece;
    if (on_piece) on_piece(sample, piece);
  });
  return texts;
}

int64_t unknown_tokens(const TrainedModel& m, const std::string& text, const std::string& prompt_name) {
  require_model(m);
  if (m.tgt_vocab.unk_id() < 0 || text.empty()) return 0;
  return unknown_tokens(m, data::encode_text(m.tgt_vocab, m.tgt_tokenizer, text, prompt_name));
}

int64_t unknown_tokens(const TrainedModel& m, const std::vector<int32_t>& ids) {
  require_model(m);
  const int32_t unk = m.tgt_vocab.unk_id();
  return unk < 0 ? 0 : std::count(ids.begin(), ids.end(), unk);
}

std::vector<int32_t> never_generated(const TrainedModel& m) {
  require_model(m);
  const data::Vocab& v = m.tgt_vocab;
  std::vector<int32_t> ids;
  for (int32_t id : {v.pad_id(), v.bos_id() != v.eos_id() ? v.bos_id() : -1, v.unk_id()})
    if (id >= 0) ids.push_back(id);
  if (m.tgt_tokenizer.is_bpe())
    for (auto id = static_cast<int32_t>(m.tgt_tokenizer.bpe().vocab_size()); id < v.size(); ++id) ids.push_back(id);
  if (!m.tgt_tokenizer.is_bpe() && v.eos_id() >= 0) {
    const ordered_json train = ordered_json::parse(m.train_json.empty() ? "{}" : m.train_json, nullptr, false);
    const auto text = train.is_object() ? train.find("text_path") : train.end();
    if (text != train.end() && text->is_string() && !text->get<std::string>().empty()) ids.push_back(v.eos_id());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

namespace {

// The target tokens that stand for a line break, "\n" or "\r": a prediction is one line (a TSV target never holds
// either: lines end at "\n", and a "\r" inside one is refused; tfm translate writes one output a line), so predict
// never picks them. The byte tokens <0x0A> and <0x0D> of a vocabulary that holds every byte token (--tokens byte,
// an spm model's byte fallback: there they are bytes, not the words a space vocabulary could spell so), and a
// token holding either character (none in a vocabulary built from TSV).
std::vector<int32_t> line_break_tokens(const data::Vocab& v) {
  std::vector<int32_t> ids;
  bool bytes = true;
  for (int b = 0; b < 256 && bytes; ++b) bytes = v.contains(data::byte_token(static_cast<uint8_t>(b)));
  if (bytes)
    for (const uint8_t b : {'\n', '\r'}) ids.push_back(v.id(data::byte_token(b)));
  for (int32_t id = 0; id < v.size(); ++id)
    if (v.token(id).find_first_of("\n\r") != std::string::npos) ids.push_back(id);
  return ids;
}

}  // namespace

std::vector<data::Tokens> predict(const Model& model, const data::Vocab& tgt_vocab,
                                  const std::vector<std::vector<int32_t>>& sources, int beam, int64_t batch_size) {
  DecodeOptions opt;
  opt.beam = beam;
  return predict(model, tgt_vocab, sources, opt, batch_size);
}

std::vector<data::Tokens> predict(const Model& model, const data::Vocab& tgt_vocab,
                                  const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& options,
                                  int64_t batch_size, uint64_t first_stream, int64_t* truncated) {
  if (truncated) *truncated = 0;
  check_decode_options(options);
  InferenceMode scope(InferenceMode::current_precision());  // one weight cache for every batch
  std::vector<data::Example> ex(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) ex[i].src = sources[i];
  data::BatchSettings bs;
  bs.batch_size = batch_size;
  std::vector<data::Tokens> out(sources.size());
  DecodeOptions opt = options;
  // An encoder's position predicts a word, never a mark; a decoder never generates pad or bos, and its eos (the
  // config's, which an imported model's vocabulary may name otherwise) ends the prediction: none suppressed.
  if (model.config().target_layout() != data::TargetLayout::SHIFTED)
    for (const int32_t id : {tgt_vocab.pad_id(), tgt_vocab.bos_id(), tgt_vocab.eos_id()})  // the marks, not words
      if (id >= 0) opt.suppress.push_back(id);
  for (const int32_t id : line_break_tokens(tgt_vocab)) opt.suppress.push_back(id);
  for (const auto& idx : data::plan_eval(ex, bs)) {
    std::vector<std::vector<int32_t>> batch;
    std::vector<int64_t> which;
    for (int64_t i : idx)
      if (!sources[static_cast<size_t>(i)].empty()) batch.push_back(sources[static_cast<size_t>(i)]), which.push_back(i);
    if (batch.empty()) continue;  // empty sources predict nothing
    opt.sample_streams.clear();
    for (int64_t i : which) opt.sample_streams.push_back(first_stream + static_cast<uint64_t>(i));
    const auto pred = decode_hypotheses(model, batch, opt);
    for (size_t k = 0; k < which.size(); ++k) {
      data::Tokens& t = out[static_cast<size_t>(which[k])];
      if (model.config().target_layout() == data::TargetLayout::SHIFTED) {
        t = tgt_vocab.decode(pred[k].tokens);  // stops at eos
      } else {
        for (int32_t id : pred[k].tokens) t.push_back(tgt_vocab.token(id));  // never a mark: opt.suppress
      }
      if (truncated && pred[k].truncated) ++*truncated;
    }
  }
  return out;
}

std::string truncation_note(const TrainedModel& m, int64_t truncated, int64_t outputs, int64_t max_len) {
  const int64_t model_max_len = require_model(m).config().max_len;
  if (truncated <= 0) return "";
  const std::string cap = std::to_string(model_max_len);  // the longest any output can be
  const std::string raise =
      "; a larger max_len (--max-len; in Python max_len=) raises it, up to the model's max_len " + cap;
  const bool at_cap = max_len >= model_max_len;
  const std::string limit = at_cap      ? "the model's max_len " + cap + ", its longest output"
                            : max_len > 0 ? "max_len " + std::to_string(max_len)
                                          : "by default 2·source tokens + 10, at most the model's max_len " + cap;
  return std::to_string(truncated) + " of " + std::to_string(outputs) + " output" + (outputs == 1 ? "" : "s") +
         " stopped at the length limit (" + limit + ") without an end token" + (at_cap ? "" : raise);
}

void check_decode_options(const TrainedModel& m, const DecodeOptions& options) {
  const ModelConfig& c = require_model(m).config();
  check_decode_options(options);
  if (c.target_layout() == data::TargetLayout::PER_POSITION) {
    const std::string model = m.dir + " (arch " + std::string(enum_name(c.arch)) + ")";
    if (options.beam > 1)
      throw std::invalid_argument("beam " + std::to_string(options.beam) + " does nothing for " + model +
                                  ": it predicts every source position at once, without a search (use beam 1)");
    if (options.max_len != 0)
      throw std::invalid_argument("max_len does nothing for " + model +
                                  ": its output has one token per source position, whatever the limit");
  }
  if (options.max_len > c.max_len)
    throw std::invalid_argument("max_len " + std::to_string(options.max_len) + " is beyond the model's max_len " +
                                std::to_string(c.max_len) + " (the positions it has; " + m.dir + "/config.json)");
}

std::string unknown_note(int64_t unknown) {
  if (unknown <= 0) return "";
  return std::to_string(unknown) + " source token" + (unknown == 1 ? " is" : "s are") +
         " not in the model's vocabulary, read as <unk>";
}

std::vector<std::string> translate_lines(const TrainedModel& m, const std::vector<std::string>& sources, int beam,
                                         int64_t batch_size) {
  DecodeOptions opt;
  opt.beam = beam;
  return translate_lines(m, sources, opt, batch_size);
}

std::vector<std::string> translate_lines(const TrainedModel& m, const std::vector<std::string>& sources,
                                         const DecodeOptions& options, int64_t batch_size, uint64_t first_stream,
                                         int64_t* truncated, int64_t* unknown) {
  const Model& model = require_model(m);
  check_decode_options(m, options);
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(sources.size());
  const int64_t max_len = model.config().max_len;
  const auto translate = [&] {
    const auto pred = predict(model, m.tgt_vocab, ids, options, batch_size, first_stream, truncated);
    std::vector<std::string> out;
    out.reserve(pred.size());
    for (const auto& p : pred) out.push_back(m.tgt_tokenizer.detokenize(p));
    return out;
  };
  for (size_t i = 0; i < sources.size(); ++i) {
    std::string bad;
    try {
      ids.push_back(m.src_vocab.encode(m.src_tokenizer.tokenize(sources[i])));
      if (static_cast<int64_t>(ids.back().size()) > max_len)  // decode would refuse its batch, not naming the line
        bad = std::to_string(ids.back().size()) + " source tokens, more than the model's max_len " +
              std::to_string(max_len);
    } catch (const std::invalid_argument& e) {
      bad = e.what();
    }
    if (!bad.empty()) {  // the lines before it are translated first
      if (ids.size() > i) ids.pop_back();
      throw BadInputLine(first_stream + i + 1, bad, ids.empty() ? std::vector<std::string>{} : translate());
    }
    if (unknown && m.src_vocab.unk_id() >= 0)
      *unknown += std::count(ids.back().begin(), ids.back().end(), m.src_vocab.unk_id());
  }
  return translate();
}

}  // namespace tfm
