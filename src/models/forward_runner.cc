// src/models/forward_runner.cc — JSON config → module, and the `tfm forward` contract.
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "tfm/autograd.h"
#include "tfm/inference.h"
#include "tfm/forward.h"
#include "tfm/modules/transformer.h"
#include "quote.h"

namespace tfm {
namespace {

using json = nlohmann::json;

struct ConfigReader {
  const json& j;
  std::set<std::string> known{"module"};

  template <typename T>
  T get(const std::string& key, T fallback) {
    known.insert(key);
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    const json& v = j.at(key);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) throw std::invalid_argument("config: '" + key + "' must be a boolean, got " + v.dump());
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) throw std::invalid_argument("config: '" + key + "' must be an integer, got " + v.dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) throw std::invalid_argument("config: '" + key + "' must be a number, got " + v.dump());
    } else {
      if (!v.is_string()) throw std::invalid_argument("config: '" + key + "' must be a string, got " + v.dump());
    }
    return v.get<T>();
  }
  template <typename T>
  T require(const std::string& key) {
    if (!j.contains(key)) throw std::invalid_argument("config: missing required key '" + key + "'");
    return get<T>(key, T{});
  }
  void ignore(const std::string& key) { known.insert(key); }
  void finish() {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known.count(it.key())) throw std::invalid_argument("config: unknown key " + quote_name(it.key()));
  }
};

TransformerLayerOptions layer_options(ConfigReader& r, bool transformer_defaults) {
  TransformerLayerOptions o;
  o.d_model = transformer_defaults ? r.get<int64_t>("d_model", 512) : r.require<int64_t>("d_model");
  o.nhead = transformer_defaults ? r.get<int64_t>("nhead", 8) : r.require<int64_t>("nhead");
  o.dim_feedforward = r.get<int64_t>("dim_feedforward", 2048);
  o.dropout = r.get<float>("dropout", 0.1f);
  o.activation = r.get<std::string>("activation", "relu");
  o.layer_norm_eps = r.get<float>("layer_norm_eps", 1e-5f);
  o.batch_first = r.get<bool>("batch_first", false);
  o.norm_first = r.get<bool>("norm_first", false);
  o.bias = r.get<bool>("bias", true);
  o.validate();
  return o;
}

const Tensor& opt(const NamedTensors& in, const char* name) {
  static const Tensor none;
  auto it = in.find(name);
  return it == in.end() ? none : it->second;
}
const Tensor& req(const NamedTensors& in, const char* name) {
  auto it = in.find(name);
  if (it == in.end() || !it->second.defined()) throw std::invalid_argument(std::string("inputs: missing tensor '") + name + "'");
  return it->second;
}
bool flag(const NamedTensors& in, const char* name) {
  auto it = in.find(name);
  if (it == in.end()) return false;
  const Tensor& t = it->second;
  if (t.dtype() != DType::Bool || t.numel() != 1)
    throw std::invalid_argument(std::string("inputs: '") + name + "' must be a 0-dimensional BOOL tensor, got " + describe(t));
  return t.data_bool()[0] != 0;
}
void check_names(const NamedTensors& in, std::initializer_list<const char*> allowed,
                 std::initializer_list<const char*> required) {
  for (const char* r : required) req(in, r);  // a missing argument is reported before a stray one
  for (auto& [k, v] : in) {
    if (k == "grad_output") continue;
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      throw std::invalid_argument("inputs: unexpected tensor '" + k + "' (expected some of: " + list + ")");
    }
  }
}

// Shape checks of the forward arguments, each naming the argument: a sequence is (B, T, E) when
// batch_first, else (T, B, E); masks follow nn.MultiheadAttention's rules.
struct ShapeChecker {
  const NamedTensors& in;
  int64_t E, H;
  bool batch_first;
  int64_t B = -1;

  int64_t sequence(const char* name) {  // returns T
    const Tensor& t = req(in, name);
    const std::string layout = batch_first ? "(B, T, " : "(T, B, ";
    if (t.dtype() != DType::Float32)
      throw std::invalid_argument(std::string("inputs: tensor '") + name + "' must be Float32, got " + describe(t));
    if (t.dim() != 3 || t.size(2) != E)
      throw std::invalid_argument(std::string("inputs: tensor '") + name + "' has shape " + shape_str(t.shape()) +
                                  ", expected " + layout + std::to_string(E) + ")");
    const int64_t b = batch_first ? t.size(0) : t.size(1);
    if (B >= 0 && b != B)
      throw std::invalid_argument(std::string("inputs: tensor '") + name + "' has batch size " + std::to_string(b) +
                                  ", expected " + std::to_string(B) + " (shape " + shape_str(t.shape()) + ")");
    B = b;
    return batch_first ? t.size(1) : t.size(0);
  }
  void attn_mask(const char* name, int64_t L, int64_t S) {
    auto it = in.find(name);
    if (it == in.end()) return;
    const Shape& s = it->second.shape();
    if (s == Shape{L, S} || s == Shape{B * H, L, S}) return;
    throw std::invalid_argument(std::string("inputs: tensor '") + name + "' has shape " + shape_str(s) +
                                ", expected " + shape_str({L, S}) + " or " + shape_str({B * H, L, S}));
  }
  void padding_mask(const char* name, int64_t S) {
    auto it = in.find(name);
    if (it == in.end()) return;
    const Shape& s = it->second.shape();
    if (s == Shape{B, S}) return;
    throw std::invalid_argument(std::string("inputs: tensor '") + name + "' has shape " + shape_str(s) +
                                ", expected " + shape_str({B, S}));
  }
};

template <typename M>
struct Holder : ConformanceModule {
  std::unique_ptr<M> m;
  Module& module() override { return *m; }
};

struct MhaHolder : Holder<MultiheadAttention> {
  std::string name() const override { return "MultiheadAttention"; }
  std::vector<std::string> differentiable_inputs() const override { return {"query", "key", "value"}; }
  Tensor forward(const NamedTensors& in) const override {
    check_names(in, {"query", "key", "value", "attn_mask", "key_padding_mask", "is_causal"}, {"query"});
    ShapeChecker c{in, m->embed_dim, m->num_heads, m->batch_first};
    const int64_t L = c.sequence("query");
    const int64_t S = in.count("key") ? c.sequence("key") : L;
    if (in.count("value") && c.sequence("value") != S)
      throw std::invalid_argument("inputs: tensors 'key' and 'value' have different lengths");
    c.attn_mask("attn_mask", L, S);
    c.padding_mask("key_padding_mask", S);
    const Tensor& q = req(in, "query");
    const Tensor& k = in.count("key") ? req(in, "key") : q;
    const Tensor& v = in.count("value") ? req(in, "value") : k;
    ops::AttentionMasks masks;
    masks.attn_mask = opt(in, "attn_mask");
    masks.key_padding_mask = opt(in, "key_padding_mask");
    masks.is_causal = flag(in, "is_causal");
    return m->forward(q, k, v, masks);
  }
};
struct EncLayerHolder : Holder<TransformerEncoderLayer> {
  std::string name() const override { return "TransformerEncoderLayer"; }
  std::vector<std::string> differentiable_inputs() const override { return {"src"}; }
  Tensor forward(const NamedTensors& in) const override {
    check_names(in, {"src", "src_mask", "src_key_padding_mask", "is_causal"}, {"src"});
    const auto& o = m->options;
    ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
    const int64_t S = c.sequence("src");
    c.attn_mask("src_mask", S, S);
    c.padding_mask("src_key_padding_mask", S);
    return m->forward(req(in, "src"), opt(in, "src_mask"), opt(in, "src_key_padding_mask"), flag(in, "is_causal"));
  }
};
struct EncHolder : Holder<TransformerEncoder> {
  std::string name() const override { return "TransformerEncoder"; }
  std::vector<std::string> differentiable_inputs() const override { return {"src"}; }
  Tensor forward(const NamedTensors& in) const override {
    check_names(in, {"src", "mask", "src_key_padding_mask", "is_causal"}, {"src"});
    if (!m->layers.empty()) {
      const auto& o = m->layers[0]->options;
      ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
      const int64_t S = c.sequence("src");
      c.attn_mask("mask", S, S);
      c.padding_mask("src_key_padding_mask", S);
    }
    return m->forward(req(in, "src"), opt(in, "mask"), opt(in, "src_key_padding_mask"), flag(in, "is_causal"));
  }
};
template <typename M>
struct DecHolderT : Holder<M> {
  std::string label;
  const TransformerLayerOptions* options() const {
    if constexpr (std::is_same_v<M, TransformerDecoderLayer>) {
      return &this->m->options;
    } else {
      return this->m->layers.empty() ? nullptr : &this->m->layers[0]->options;
    }
  }
  std::string name() const override { return label; }
  std::vector<std::string> differentiable_inputs() const override { return {"tgt", "memory"}; }
  Tensor forward(const NamedTensors& in) const override {
    check_names(in, {"tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask",
                     "tgt_is_causal", "memory_is_causal"},
                {"tgt", "memory"});
    if (const TransformerLayerOptions* o = options()) {
      ShapeChecker c{in, o->d_model, o->nhead, o->batch_first};
      const int64_t T = c.sequence("tgt");
      const int64_t S = c.sequence("memory");
      c.attn_mask("tgt_mask", T, T);
      c.attn_mask("memory_mask", T, S);
      c.padding_mask("tgt_key_padding_mask", T);
      c.padding_mask("memory_key_padding_mask", S);
    }
    return this->m->forward(req(in, "tgt"), req(in, "memory"), opt(in, "tgt_mask"), opt(in, "memory_mask"),
                            opt(in, "tgt_key_padding_mask"), opt(in, "memory_key_padding_mask"),
                            flag(in, "tgt_is_causal"), flag(in, "memory_is_causal"));
  }
};
struct TransformerHolder : Holder<Transformer> {
  std::string name() const override { return "Transformer"; }
  std::vector<std::string> differentiable_inputs() const override { return {"src", "tgt"}; }
  Tensor forward(const NamedTensors& in) const override {
    check_names(in, {"src", "tgt", "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask",
                     "tgt_key_padding_mask", "memory_key_padding_mask", "src_is_causal", "tgt_is_causal",
                     "memory_is_causal"},
                {"src", "tgt"});
    const auto& o = m->encoder.layers.empty() ? m->decoder.layers.at(0)->options : m->encoder.layers[0]->options;
    ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
    const int64_t S = c.sequence("src");
    const int64_t T = c.sequence("tgt");
    c.attn_mask("src_mask", S, S);
    c.attn_mask("tgt_mask", T, T);
    c.attn_mask("memory_mask", T, S);
    c.padding_mask("src_key_padding_mask", S);
    c.padding_mask("tgt_key_padding_mask", T);
    c.padding_mask("memory_key_padding_mask", S);
    return m->forward(req(in, "src"), req(in, "tgt"), opt(in, "src_mask"), opt(in, "tgt_mask"), opt(in, "memory_mask"),
                      opt(in, "src_key_padding_mask"), opt(in, "tgt_key_padding_mask"),
                      opt(in, "memory_key_padding_mask"), flag(in, "src_is_causal"), flag(in, "tgt_is_causal"),
                      flag(in, "memory_is_causal"));
  }
};

}  // namespace

std::unique_ptr<ConformanceModule> build_module(const std::string& config_json) {
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("config: invalid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("config: top level must be a JSON object");
  if (!j.contains("module") || !j.at("module").is_string())
    throw std::invalid_argument("config: missing string key 'module'");
  const std::string name = j.at("module").get<std::string>();
  ConfigReader r{j};
  std::unique_ptr<ConformanceModule> out;
  if (name == "MultiheadAttention") {
    const auto E = r.require<int64_t>("embed_dim");
    const auto H = r.require<int64_t>("num_heads");
    const float dropout = r.get<float>("dropout", 0.0f);
    const bool bias = r.get<bool>("bias", true);
    const bool bf = r.get<bool>("batch_first", false);
    if (r.get<bool>("add_bias_kv", false)) throw std::invalid_argument("config: 'add_bias_kv' true is not supported");
    if (r.get<bool>("add_zero_attn", false)) throw std::invalid_argument("config: 'add_zero_attn' true is not supported");
    for (const char* kd : {"kdim", "vdim"}) {
      const auto d = r.get<int64_t>(kd, E);
      if (d != E) throw std::invalid_argument(std::string("config: '") + kd + "' different from embed_dim is not supported");
    }
    if (E <= 0 || H <= 0 || E % H != 0)
      throw std::invalid_argument("config: embed_dim " + std::to_string(E) + " is not divisible by num_heads " +
                                  std::to_string(H));
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<MhaHolder>();
    h->m = std::make_unique<MultiheadAttention>(E, H, dropout, bias, bf);
    out = std::move(h);
  } else if (name == "TransformerEncoderLayer") {
    auto o = layer_options(r, false);
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<EncLayerHolder>();
    h->m = std::make_unique<TransformerEncoderLayer>(o);
    out = std::move(h);
  } else if (name == "TransformerEncoder") {
    auto o = layer_options(r, false);
    const auto n = r.require<int64_t>("num_layers");
    const bool norm = r.get<bool>("norm", false);
    r.ignore("enable_nested_tensor");
    r.ignore("mask_check");
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<EncHolder>();
    h->m = std::make_unique<TransformerEncoder>(o, n, norm);
    out = std::move(h);
  } else if (name == "TransformerDecoderLayer") {
    auto o = layer_options(r, false);
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<DecHolderT<TransformerDecoderLayer>>();
    h->label = name;
    h->m = std::make_unique<TransformerDecoderLayer>(o);
    out = std::move(h);
  } else if (name == "TransformerDecoder") {
    auto o = layer_options(r, false);
    const auto n = r.require<int64_t>("num_layers");
    const bool norm = r.get<bool>("norm", false);
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<DecHolderT<TransformerDecoder>>();
    h->label = name;
    h->m = std::make_unique<TransformerDecoder>(o, n, norm);
    out = std::move(h);
  } else if (name == "Transformer") {
    auto o = layer_options(r, true);
    const auto ne = r.get<int64_t>("num_encoder_layers", 6);
    const auto nd = r.get<int64_t>("num_decoder_layers", 6);
    r.finish();  // unknown keys are reported before anything is built
    auto h = std::make_unique<TransformerHolder>();
    h->m = std::make_unique<Transformer>(o, ne, nd);
    out = std::move(h);
  } else {
    throw std::invalid_argument("config: unknown module " + quote_name(name) +
                                " (expected MultiheadAttention, TransformerEncoderLayer, TransformerEncoder, "
                                "TransformerDecoderLayer, TransformerDecoder or Transformer)");
  }
  return out;
}

NamedTensors run_forward(const std::string& config_json, const NamedTensors& weights, const NamedTensors& inputs,
                         const std::string& weights_source, Precision precision) {
  auto cm = build_module(config_json);
  Module& m = cm->module();
  m.load_state_dict(weights, weights_source);
  m.eval();
  auto go = inputs.find("grad_output");
  const bool backward = go != inputs.end();
  if (backward && precision != Precision::Float32)
    throw std::invalid_argument(std::string("inputs: 'grad_output' asks for gradients, which are computed in f32 only (got ") +
                                precision_name(precision) + ")");
  NamedTensors in;
  for (auto& [k, v] : inputs) {
    if (k == "grad_output") continue;
    in[k] = v.dtype() == DType::Float32 ? v.detach() : v;  // fresh leaves: each its own gradient
  }
  const auto diff = cm->differentiable_inputs();
  NamedTensors out;
  if (!backward) {
    InferenceMode scope(precision);  // no tape; each Linear weight packed once
    out["output"] = cm->forward(in);
    return out;
  }
  for (const auto& n : diff) {
    auto it = in.find(n);
    if (it != in.end() && it->second.dtype() == DType::Float32) it->second.requires_grad_(true);
  }
  Tensor y = cm->forward(in);
  if (go->second.dtype() != DType::Float32 || go->second.shape() != y.shape())
    throw std::invalid_argument("inputs: 'grad_output' is " + describe(go->second) + ", expected Float32" +
                                shape_str(y.shape()) + " (the output's shape)");
  y.backward(go->second);
  out["output"] = y.detach();
  m.visit_parameters([&](const std::string& k, Tensor& p) {
    Tensor g = p.grad();
    out["grad." + k] = g.defined() ? g : Tensor::zeros(p.shape());
  });
  for (const auto& n : diff) {
    auto it = in.find(n);
    if (it == in.end() || !it->second.requires_grad()) continue;
    Tensor g = it->second.grad();
    out["grad." + n] = g.defined() ? g : Tensor::zeros(it->second.shape());
  }
  return out;
}

}  // namespace tfm
