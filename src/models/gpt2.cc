// src/models/gpt2.cc — GPT-2 checkpoints (Hugging Face layout) to and from tfm model directories
// (tfm/models/gpt2.h describes both layouts and the mapping).
#include "tfm/models/gpt2.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/file_util.h"
#include "json_fields.h"
#include "kernels/gemm_packed.h"  // float_to_bf16
#include "quote.h"
#include "tfm/data/tokenizer.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"
#include "tfm/random.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "transformer.";
constexpr float kMaskedBias = -1e4f;  // GPT-2's attn.masked_bias buffer

std::string join(const std::string& dir, const std::string& file) { return (fs::path(dir) / file).string(); }

// ---- config.json ----

struct Gpt2Config {
  int64_t n_embd = 0, n_head = 0, n_layer = 0, n_positions = 0, vocab_size = 0, n_inner = 0;
  double layer_norm_epsilon = 1e-5, resid_pdrop = 0.1;
  Activation activation = Activation::GELU_TANH;
  bool bias = true, tie = true;
};

Gpt2Config read_hf_config(const std::string& file) {
  const auto bad = [&](const std::string& why) { throw std::invalid_argument(file + ": " + why); };
  ordered_json j;
  try {
    j = ordered_json::parse(io::read_file(file));
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not valid JSON: ") + escape_text(e.what(), kMaxMessage));
  }
  if (!j.is_object()) bad("expected a JSON object, got " + std::string(j.type_name()));
  Gpt2Config c;
  const auto integer = [&](const char* key, int64_t& out, bool required) {
    if (!j.contains(key) || j[key].is_null()) {
      if (required) bad("missing \"" + std::string(key) + "\" (an integer)");
      return;
    }
    const ordered_json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      bad("\"" + std::string(key) + "\" must be a positive integer, got " + v.dump());
    out = v.get<int64_t>();
  };
  const auto number = [&](const char* key, double& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) bad("\"" + std::string(key) + "\" must be a number, got " + j[key].dump());
    out = j[key].get<double>();
  };
  const auto boolean = [&](const char* key, bool& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_boolean()) bad("\"" + std::string(key) + "\" must be true or false, got " + j[key].dump());
    out = j[key].get<bool>();
  };
  integer("n_embd", c.n_embd, true);
  integer("n_head", c.n_head, true);
  integer("n_layer", c.n_layer, true);
  integer("n_positions", c.n_positions, true);
  integer("vocab_size", c.vocab_size, true);
  integer("n_inner", c.n_inner, false);
  if (c.n_inner == 0) c.n_inner = 4 * c.n_embd;
  number("layer_norm_epsilon", c.layer_norm_epsilon);
  number("resid_pdrop", c.resid_pdrop);
  boolean("bias", c.bias);
  boolean("tie_word_embeddings", c.tie);
  if (c.n_embd % c.n_head != 0)
    bad("n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " + std::to_string(c.n_head));
  if (!(c.layer_norm_epsilon > 0)) bad("\"layer_norm_epsilon\" must be positive");
  if (!(c.resid_pdrop >= 0 && c.resid_pdrop < 1)) bad("\"resid_pdrop\" must be in [0, 1)");
  if (j.contains("activation_function")) {
    const ordered_json& a = j["activation_function"];
    const std::string name = a.is_string() ? a.get<std::string>() : a.dump();
    if (name == "gelu_new" || name == "gelu_pytorch_tanh") c.activation = Activation::GELU_TANH;
    else if (name == "gelu") c.activation = Activation::GELU;
    else if (name == "relu") c.activation = Activation::RELU;
    else bad("unsupported activation_function " + a.dump() + " (tfm runs gelu_new, gelu_pytorch_tanh, gelu, relu)");
  }
  // Settings of GPT-2's attention tfm does not compute: refused rather than run differently.
  for (const auto& [key, ok] : {std::pair<const char*, bool>{"scale_attn_weights", true},
                                {"scale_attn_by_inverse_layer_idx", false},
                                {"reorder_and_upcast_attn", false}})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>() != ok)
      bad("\"" + std::string(key) + "\": " + j[key].dump() + " is not supported (tfm computes GPT-2's default, " +
          (ok ? "true" : "false") + ")");
  return c;
}

std::string hf_config_text(const Gpt2Config& c, int32_t eos) {
  ordered_json j;
  j["activation_function"] = c.activation == Activation::GELU_TANH ? "gelu_new" : std::string(enum_name(c.activation));
  j["architectures"] = {"GPT2LMHeadModel"};
  j["attn_pdrop"] = c.resid_pdrop;
  j["bos_token_id"] = eos;
  j["embd_pdrop"] = c.resid_pdrop;
  j["eos_token_id"] = eos;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["model_type"] = "gpt2";
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner == 4 * c.n_embd ? ordered_json(nullptr) : ordered_json(c.n_inner);
  j["n_layer"] = c.n_layer;
  j["n_positions"] = c.n_positions;
  j["resid_pdrop"] = c.resid_pdrop;
  j["tie_word_embeddings"] = c.tie;
  j["vocab_size"] = c.vocab_size;
  if (!c.bias) j["bias"] = false;
  return j.dump(2) + "\n";
}

// ---- the tokenizer files ----

struct TokenizerFiles {
  std::string vocab, merges;  // file names inside the directory
};

TokenizerFiles find_tokenizer(const std::string& dir) {
  for (const auto& [v, m] : {std::pair<const char*, const char*>{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}})
    if (fs::exists(join(dir, v)) && fs::exists(join(dir, m))) return {v, m};
  throw std::runtime_error(dir + ": no GPT-2 tokenizer files (vocab.json + merges.txt, or encoder.json + vocab.bpe)");
}

// ---- the key mapping ----

// One tfm tensor and its GPT-2 source: `transpose` for a Conv1D weight (in, out) held as nn.Linear's
// (out, in).
struct KeyMap {
  std::string hf, tfm;
  bool transpose = false;
};

std::vector<KeyMap> key_map(const Gpt2Config& c, const std::string& prefix, bool tied) {
  std::vector<KeyMap> m = {{prefix + "wte.weight", "embedding.weight"}, {prefix + "wpe.weight", "pos_embedding.weight"}};
  const auto norm = [&](const std::string& hf, const std::string& t) {
    m.push_back({hf + ".weight", t + ".weight"});
    if (c.bias) m.push_back({hf + ".bias", t + ".bias"});
  };
  const auto linear = [&](const std::string& hf, const std::string& weight, const std::string& bias) {
    m.push_back({hf + ".weight", weight, /*transpose=*/true});
    if (c.bias) m.push_back({hf + ".bias", bias});
  };
  for (int64_t n = 0; n < c.n_layer; ++n) {
    const std::string h = prefix + "h." + std::to_string(n) + ".", d = "decoder.layers." + std::to_string(n) + ".";
    norm(h + "ln_1", d + "norm1");
    linear(h + "attn.c_attn", d + "self_attn.in_proj_weight", d + "self_attn.in_proj_bias");
    linear(h + "attn.c_proj", d + "self_attn.out_proj.weight", d + "self_attn.out_proj.bias");
    norm(h + "ln_2", d + "norm2");
    linear(h + "mlp.c_fc", d + "linear1.weight", d + "linear1.bias");
    linear(h + "mlp.c_proj", d + "linear2.weight", d + "linear2.bias");
  }
  norm(prefix + "ln_f", "decoder.norm");
  if (!tied) m.push_back({"lm_head.weight", "generator.weight"});
  return m;
}

// GPT-2's causal-mask buffers: h.N.attn.bias (1, 1, P, P) lower-triangular ones, h.N.attn.masked_bias
// a scalar −1e4. Returns true for such a key.
bool is_mask_buffer(const std::string& key, const std::string& prefix, int64_t n_layer) {
  if (key.rfind(prefix + "h.", 0) != 0) return false;
  const std::string rest = key.substr(prefix.size() + 2);
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 9) return false;
  for (size_t i = 0; i < dot; ++i)
    if (rest[i] < '0' || rest[i] > '9') return false;
  if (std::stoll(rest.substr(0, dot)) >= n_layer) return false;
  const std::string tail = rest.substr(dot + 1);
  return tail == "attn.bias" || tail == "attn.masked_bias";
}

Tensor transposed(const Tensor& t) {  // (r, c) → (c, r), contiguous
  const int64_t r = t.size(0), c = t.size(1);
  Tensor out = Tensor::empty({c, r});
  const float* s = t.data();
  float* d = out.data();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t k = 0; k < c; ++k) d[k * r + i] = s[i * c + k];
  return out;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

// The tfm model config of a GPT-2 config.
ModelConfig model_config(const Gpt2Config& g, bool tied, int32_t eos) {
  ModelConfig m;
  m.arch = Arch::DECODER;
  m.src_vocab_size = m.tgt_vocab_size = g.vocab_size;
  m.d_model = g.n_embd;
  m.nhead = g.n_head;
  m.dim_feedforward = g.n_inner;
  m.num_encoder_layers = 0;
  m.num_decoder_layers = g.n_layer;
  m.dropout = static_cast<float>(g.resid_pdrop);
  m.layer_norm_eps = static_cast<float>(g.layer_norm_epsilon);
  m.bias = g.bias;
  m.activation = g.activation;
  m.norm_first = true;
  m.positional = Positional::LEARNED;
  m.scale_embeddings = false;
  m.tie_embeddings = tied;
  m.max_len = g.n_positions;
  m.pad_id = -1;
  m.bos_id = m.eos_id = eos;
  return m.with_arch_defaults();
}

// ---- narrowing float32 back to a source dtype (exact for values that came from it) ----

uint16_t float_to_half(float x) {  // IEEE binary16, round to nearest even
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / inf
  const int exp = static_cast<int>(abs >> 23) - 127 + 15;
  if (exp >= 31) return sign | 0x7c00u;  // overflow → inf
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  if (exp <= 0) {  // subnormal or zero: shift the 24-bit significand into 10 bits at 2^−24
    if (exp < -10) return sign;
    const int shift = 14 - exp;
    const uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    return sign | static_cast<uint16_t>(half + (rem > mid || (rem == mid && (half & 1))));
  }
  const uint32_t rem = mant & 0x1fffu;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | ((mant >> 13) & 0x3ffu);
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: still right
  return sign | static_cast<uint16_t>(h);
}

// n floats as `dtype` ("F32", "F16", "BF16") bytes appended to `out`.
void append_as(const std::string& dtype, const float* p, int64_t n, std::string& out, const std::string& what) {
  if (dtype == "F32") {
    out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * 4);
    return;
  }
  if (dtype != "F16" && dtype != "BF16") throw std::invalid_argument(what + ": cannot write dtype " + dtype);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == "F16" ? float_to_half(p[i]) : kernels::float_to_bf16(p[i]);
    out.push_back(static_cast<char>(h & 0xff));
    out.push_back(static_cast<char>(h >> 8));
  }
}

// The header of a safetensors file as its bytes (the JSON text, padding included).
std::string safetensors_header(const std::string& file) {
  const io::MappedFile f(file);
  if (f.size() < 8) throw std::invalid_argument(file + ": too short for a safetensors file");
  uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);
  if (n > f.size() - 8) throw std::invalid_argument(file + ": header length exceeds the file");
  return std::string(reinterpret_cast<const char*>(f.data()) + 8, static_cast<size_t>(n));
}

}  // namespace

Gpt2ImportReport import_gpt2(const std::string& hf_dir, const std::string& out_dir, bool force) {
  const std::string config_file = join(hf_dir, "config.json"), weights_file = join(hf_dir, "model.safetensors");
  if (!fs::is_directory(hf_dir)) throw std::runtime_error(hf_dir + ": not a directory (a Hugging Face GPT-2 folder)");
  Gpt2Config g = read_hf_config(config_file);
  const TokenizerFiles names = find_tokenizer(hf_dir);
  const data::Tokenizer tok = data::Tokenizer::load_gpt2_bpe(join(hf_dir, names.vocab), join(hf_dir, names.merges));
  const int64_t tok_size = tok.bpe().vocab_size();
  if (g.vocab_size < tok_size)
    throw std::invalid_argument(config_file + ": vocab_size " + std::to_string(g.vocab_size) + " is smaller than the " +
                                std::to_string(tok_size) + " tokens of " + tok.name());
  const io::SafeTensorsFile f = io::load_safetensors(weights_file, io::LoadOptions{.zero_copy = true});
  Gpt2ImportReport report;
  report.prefixed = f.contains(std::string(kPrefix) + "wte.weight");
  const std::string prefix = report.prefixed ? kPrefix : "";
  if (!f.contains(prefix + "wte.weight"))
    throw std::invalid_argument(weights_file + ": no tensor 'wte.weight' (nor 'transformer.wte.weight'): not a GPT-2 checkpoint");
  // Weights must be F32, F16 or BF16: tfm holds them as float32, which those widen to exactly and export
  // narrows back to the same bits; F64 or an integer dtype would be held rounded, and export refuses it.
  const auto check_weight_dtype = [&](const std::string& key) {
    const std::string& dtype = f.dtypes.at(key);
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16")
      throw std::invalid_argument(
          weights_file + ": tensor '" + key + "' has dtype " + dtype +
          ", expected F32, F16 or BF16 (convert the checkpoint, e.g. with PyTorch's model.float())");
  };
  check_weight_dtype(prefix + "wte.weight");
  const Tensor& wte = f.at(prefix + "wte.weight");
  if (wte.dim() != 2 || wte.size(0) != g.vocab_size || wte.size(1) != g.n_embd)
    throw std::invalid_argument(weights_file + ": tensor '" + prefix + "wte.weight' has shape " + shape_str(wte.shape()) +
                                ", but " + config_file + " says vocab_size " + std::to_string(g.vocab_size) +
                                " × n_embd " + std::to_string(g.n_embd));
  // The head follows tie_word_embeddings (true when absent), as in Hugging Face's GPT2LMHeadModel: tied,
  // lm_head.weight is absent or wte's values; untied, it is its own matrix (generator.weight) even when its
  // values equal wte's (a head copied to be fine-tuned apart).
  const bool has_head = f.contains("lm_head.weight");
  if (has_head) check_weight_dtype("lm_head.weight");
  if (g.tie && has_head && !same_values(f.at("lm_head.weight"), wte))
    throw std::invalid_argument(weights_file + ": 'lm_head.weight' differs from 'wte.weight' but " + config_file +
                                " says tie_word_embeddings");
  if (!g.tie && !has_head)
    throw std::invalid_argument(weights_file + ": no tensor 'lm_head.weight', and " + config_file +
                                " says tie_word_embeddings false");
  report.tied = g.tie;

  // The vocabulary: the BPE's tokens, then the padded rows.
  data::Vocab bpe_vocab = tok.vocab();
  if (bpe_vocab.eos_id() < 0) throw std::invalid_argument(tok.name() + ": no token <|endoftext|> (GPT-2's end of text)");
  std::vector<std::string> tokens = bpe_vocab.tokens();
  for (int64_t id = tok_size; id < g.vocab_size; ++id) tokens.push_back("<|padded_" + std::to_string(id) + "|>");
  const data::Vocab vocab = data::Vocab::from_tokens(std::move(tokens));
  const ModelConfig mc = model_config(g, report.tied, vocab.eos_id());
  mc.validate();

  // Every source tensor mapped or explicitly ignored, each of the shape its parameter takes, said in the
  // file's terms: its key, and a Conv1D's in × out.
  Generator init{0, 0, /*no_draws=*/true};  // every parameter is loaded below
  Model model(mc, init);
  const NamedTensors params = model.named_parameters();
  NamedTensors state;
  std::set<std::string> used;
  for (const KeyMap& k : key_map(g, prefix, report.tied)) {
    if (!f.contains(k.hf))
      throw std::invalid_argument(weights_file + ": missing tensor '" + k.hf + "' (for tfm's '" + k.tfm + "')");
    check_weight_dtype(k.hf);
    const Tensor& t = f.at(k.hf);
    if (k.transpose && t.dim() != 2)
      throw std::invalid_argument(weights_file + ": tensor '" + k.hf + "' has shape " + shape_str(t.shape()) +
                                  ", expected a matrix (Conv1D: in × out)");
    if (params.contains(k.tfm)) {
      Shape want = params.at(k.tfm).shape();
      if (k.transpose) std::swap(want[0], want[1]);
      if (t.shape() != want)
        throw std::invalid_argument(weights_file + ": tensor '" + k.hf + "' has shape " + shape_str(t.shape()) +
                                    ", expected " + shape_str(want) + (k.transpose ? " (Conv1D: in × out)" : "") +
                                    " for " + config_file + "'s sizes");
    }
    // A NaN or infinite weight would write a directory every later load refuses (load_model_dir): refused here.
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(t.data()[i]))
        throw std::invalid_argument(weights_file + ": tensor '" + k.hf + "' holds " +
                                    (std::isnan(t.data()[i]) ? "NaN" : "an infinity") + " (element " +
                                    std::to_string(i) + "): not a model tfm can run");
    state.insert(k.tfm, k.transpose ? transposed(t) : t);
    used.insert(k.hf);
  }
  if (has_head) used.insert("lm_head.weight");  // wte's values when tied
  for (const auto& [key, t] : f.tensors) {
    if (used.count(key)) continue;
    if (is_mask_buffer(key, prefix, g.n_layer)) {
      // Not read, but written back by export (export_gpt2), which writes these dtypes.
      const std::string& dtype = f.dtypes.at(key);
      if (dtype != "F32" && dtype != "F16" && dtype != "BF16" && dtype != "BOOL" && dtype != "U8")
        throw std::invalid_argument(weights_file + ": tensor " + quote_name(key) + " has dtype " + dtype +
                                    ", expected F32, F16, BF16, BOOL or U8 (a causal-mask buffer)");
      ++report.tensors_ignored;
      continue;
    }
    throw std::invalid_argument(weights_file + ": unexpected tensor " + quote_name(key) + " (not part of GPT-2 with " +
                                std::to_string(g.n_layer) + " layers" + (g.bias ? "" : ", without biases") + ")");
  }
  report.tensors_mapped = static_cast<int64_t>(used.size());
  model.load_state_dict(state, weights_file + " (as tfm's keys)");  // dtypes checked there

  // config.json's "train" object: what the model reads its data with (tfm/train/config.h fills in the
  // defaults of everything a run would add, which an imported model never had).
  ordered_json train;
  train["src_tokens"] = train["tgt_tokens"] = std::string(enum_name(data::Tokenization::GPT2_BPE));
  train["block_size"] = g.n_positions;
  ordered_json source;
  source["format"] = "tfm-gpt2-source";
  source["config_json"] = io::read_file(config_file);
  source["safetensors_header"] = safetensors_header(weights_file);
  source["vocab_file"] = names.vocab;
  source["merges_file"] = names.merges;

  io::remove_abandoned_staging(out_dir);  // a killed import's staging (io/file_util.h)
  // Replacing an existing out_dir (force), it holds out_dir's lock (io::lock_for_replacing, as tfm quantize does): a
  // directory a training run works in, or another writer replaces, is refused. Its errors are said of out_dir.
  io::StagedDirectory out(out_dir, force, {hf_dir});
  out.write([&](const std::string& d) {
    io::write_file_atomic(join(d, model_dir::CONFIG),
                          model_dir::config_json(mc, train.dump(2), vocab, vocab, data::Tokenization::GPT2_BPE,
                                                 data::Tokenization::GPT2_BPE, /*json_vocab=*/true));
    model_dir::save_vocabs(d, vocab, vocab, /*json=*/true);
    model_dir::save_tokenizers(d, tok, tok);
    io::save_safetensors(join(d, model_dir::MODEL), model.state_dict());
    io::write_file_atomic(join(d, model_dir::GPT2_SOURCE), source.dump(2) + "\n");
  });
  out.commit();
  report.vocab_size = g.vocab_size;
  report.tokenizer_size = tok_size;
  return report;
}

void export_gpt2(const std::string& dir, const std::string& hf_dir, bool force) {
  TrainedModel m = load_model_dir(dir, WeightsLoad::MAP_READ_ONLY);  // read only
  if (m.quantized)  // its weights would go out dequantized: lossy, and 4× the bytes, without a word
    throw std::invalid_argument(dir +
                                " is an int8-quantized model directory (tfm quantize), for inference only; "
                                "export the float32 directory it was made from");
  const ModelConfig& c = m.model->config();
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(model_dir::path(dir, model_dir::CONFIG) + ": not a GPT-2 model: " + why);
  };
  if (c.arch != Arch::DECODER) refuse("arch " + std::string(enum_name(c.arch)) + " (GPT-2 is arch decoder)");
  if (!m.tgt_tokenizer.is_bpe()) refuse("tokenization " + std::string(enum_name(m.tgt_tokenizer.kind())) + " (GPT-2's is gpt2-bpe)");
  if (c.positional_value() != Positional::LEARNED) refuse("positional " + std::string(enum_name(c.positional_value())));
  if (!c.norm_first_value()) refuse("post-norm layers (GPT-2 normalises first)");
  if (c.scales_embeddings()) refuse("scaled embeddings");
  if (c.norm_type != NormType::LAYER_NORM) refuse("norm_type " + std::string(enum_name(c.norm_type)));
  if (c.share_layers) refuse("shared layers");
  if (c.has_ffn_bias() != c.bias || c.has_norm_bias() != c.bias || c.attention.qkv_bias.value_or(c.bias) != c.bias ||
      c.attention.out_bias.value_or(c.bias) != c.bias)
    refuse("some parts have biases and others not (GPT-2: all or, as nanoGPT's bias=False, none)");
  if (c.attention.head_dim || c.attention.v_head_dim || c.attention.attn_scale)
    refuse("an attention variant (head widths or scale)");
  const Activation act = c.activation_value();
  if (act != Activation::GELU_TANH && act != Activation::GELU && act != Activation::RELU)
    refuse("activation " + std::string(enum_name(act)));

  Gpt2Config g;
  g.n_embd = c.d_model;
  g.n_head = c.nhead;
  g.n_layer = c.num_decoder_layers;
  g.n_positions = c.max_len;
  g.vocab_size = c.tgt_vocab_size;
  g.n_inner = c.dim_feedforward;
  g.layer_norm_epsilon = c.layer_norm_eps;
  g.resid_pdrop = c.dropout;
  g.activation = act;
  g.bias = c.bias;
  g.tie = c.ties_embeddings();

  // The tensors by GPT-2 key (unprefixed), as float32 in GPT-2's layout.
  NamedTensors own = m.model->state_dict();
  std::map<std::string, Tensor> hf;
  for (const KeyMap& k : key_map(g, "", g.tie)) {
    const Tensor& t = own.at(k.tfm);
    hf[k.hf] = k.transpose ? transposed(t) : t;
  }

  const std::string source_file = model_dir::path(dir, model_dir::GPT2_SOURCE);
  io::remove_abandoned_staging(hf_dir);  // a killed export's staging (io/file_util.h)
  // Replacing an existing hf_dir (force), it holds hf_dir's lock (io::lock_for_replacing, as tfm quantize does): a
  // directory a training run works in, or another writer replaces, is refused. Its errors are said of hf_dir.
  io::StagedDirectory out(hf_dir, force, {dir});
  out.write([&](const std::string& d) {
    if (fs::exists(source_file)) {  // the source's own files: header, config and tokenizer names
      ordered_json s;
      try {
        s = ordered_json::parse(io::read_file(source_file));
      } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(source_file + ": not valid JSON: " + escape_text(e.what(), kMaxMessage));
      }
      for (const char* key : {"config_json", "safetensors_header", "vocab_file", "merges_file"})
        if (!s.contains(key) || !s[key].is_string())
          throw std::invalid_argument(source_file + ": missing \"" + key + "\" (a string)");
      const std::string header = s["safetensors_header"].get<std::string>();
      ordered_json h;
      try {
        h = ordered_json::parse(header);
      } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(
            source_file + ": \"safetensors_header\" is not valid JSON: " + escape_text(e.what(), kMaxMessage));
      }
      const std::string prefix = h.contains(std::string(kPrefix) + "wte.weight") ? kPrefix : "";
      // Data in the header's byte ranges, each tensor from the model (or a buffer GPT-2 defines).
      uint64_t size = 0;
      for (const auto& [key, e] : h.items())
        if (key != "__metadata__") size = std::max(size, e.at("data_offsets")[1].get<uint64_t>());
      std::string data(static_cast<size_t>(size), '\0');
      for (const auto& [key, e] : h.items()) {
        if (key == "__metadata__") continue;
        const std::string what = source_file + ": tensor " + quote_name(key);
        const std::string dtype = e.at("dtype").get<std::string>();
        std::vector<int64_t> shape = e.at("shape").get<std::vector<int64_t>>();
        const uint64_t begin = e.at("data_offsets")[0].get<uint64_t>(), end = e.at("data_offsets")[1].get<uint64_t>();
        std::string bytes;
        const std::string bare = !prefix.empty() && key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : key;
        if (hf.count(bare) || (bare == "lm_head.weight" && g.tie)) {  // a tied head: the embedding's values
          const Tensor& t = hf.count(bare) ? hf.at(bare) : hf.at("wte.weight");
          if (Shape(shape.begin(), shape.end()) != t.shape())
            throw std::invalid_argument(what + " has shape " + shape_str(Shape(shape.begin(), shape.end())) +
                                        " in the source, but the model's is " + shape_str(t.shape()));
          append_as(dtype, t.data(), t.numel(), bytes, what);
        } else if (is_mask_buffer(key, prefix, g.n_layer)) {
          int64_t n = 1;
          for (int64_t s : shape) n *= s;
          std::vector<float> v(static_cast<size_t>(n), kMaskedBias);
          if (bare.size() >= 9 && bare.compare(bare.size() - 9, 9, "attn.bias") == 0) {  // (1, 1, P, P) tril of ones
            const int64_t P = shape.empty() ? 1 : shape.back();
            for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i % P) <= (i / P) % P ? 1.0f : 0.0f;
          }
          if (dtype == "BOOL" || dtype == "U8") {
            for (float x : v) bytes.push_back(static_cast<char>(x != 0));
          } else {
            append_as(dtype, v.data(), n, bytes, what);
          }
        } else {
          throw std::invalid_argument(what + " is not a GPT-2 tensor of this model");
        }
        if (bytes.size() != end - begin || end > size)
          throw std::invalid_argument(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                      "] do not hold its " + std::to_string(bytes.size()) + " bytes");
        std::memcpy(data.data() + begin, bytes.data(), bytes.size());
      }
      io::AtomicFileWriter w(join(d, "model.safetensors"));
      const uint64_t n = header.size();
      w.write(&n, 8);
      w.write(header.data(), header.size());
      w.write(data.data(), data.size());
      w.commit();
      io::write_file_atomic(join(d, "config.json"), s["config_json"].get<std::string>());
      io::write_file_atomic(join(d, s["vocab_file"].get<std::string>()), m.tgt_tokenizer.bpe_vocab_json());
      io::write_file_atomic(join(d, s["merges_file"].get<std::string>()), m.tgt_tokenizer.bpe_merges());
    } else {  // the hub's layout
      NamedTensors tensors;
      for (auto& [key, t] : hf) tensors.insert(key, t);
      io::save_safetensors(join(d, "model.safetensors"), tensors, {{"format", "pt"}});
      io::write_file_atomic(join(d, "config.json"), hf_config_text(g, c.eos_id));
      io::write_file_atomic(join(d, "vocab.json"), m.tgt_tokenizer.bpe_vocab_json());
      io::write_file_atomic(join(d, "merges.txt"), m.tgt_tokenizer.bpe_merges());
    }
  });
  out.commit();
}

}  // namespace tfm
