// src/models/module_config.cc — a module config's JSON text → ModuleConfig (include/tfm/models/forward.h),
// parsed and validated in one place. Every key is read once, with its type checked and its default
// taken from the option struct it fills (TransformerLayerOptions, AttentionOptions, ModuleConfig),
// so PyTorch's defaults are written only there. Keys are read in a fixed order and unknown keys are
// reported last, so a config with several faults always reports the same one.
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>

#include "io/file_util.h"
#include "quote.h"
#include "tfm/models/forward.h"

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
  // An optional key: unset when absent or null (the option struct derives its default).
  template <typename T>
  std::optional<T> get_optional(const std::string& key) {
    known.insert(key);
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    return get<T>(key, T{});
  }
  void ignore(const std::string& key) { known.insert(key); }
  void finish() {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known.count(it.key())) throw std::invalid_argument("config: unknown key " + quote_name(it.key()));
  }
};

// The attention variant keys (tfm/modules/attention.h), checked with errors naming the key. The width
// must be divisible by the heads only when head_dim is unset: the caller checks that.
AttentionVariant attention_variant(ConfigReader& r) {
  AttentionVariant v;
  v.head_dim = r.get_optional<int64_t>("head_dim");
  v.v_head_dim = r.get_optional<int64_t>("v_head_dim");
  v.qkv_bias = r.get_optional<bool>("qkv_bias");
  v.out_bias = r.get_optional<bool>("out_bias");
  v.attn_scale = r.get_optional<float>("attn_scale");
  for (auto [key, value] : {std::pair{"head_dim", v.head_dim}, std::pair{"v_head_dim", v.v_head_dim}})
    if (value && *value <= 0)
      throw std::invalid_argument(std::string("config: '") + key + "' must be positive, got " + std::to_string(*value));
  if (v.attn_scale && !(std::isfinite(*v.attn_scale) && *v.attn_scale > 0.0f))
    throw std::invalid_argument("config: 'attn_scale' must be a finite positive number, got " +
                                std::to_string(*v.attn_scale));
  return v;
}

// The layer arguments shared by every Transformer* module. nn.Transformer has defaults for d_model
// and nhead; the layers and stacks require them. share_layers belongs to the stacks (and Transformer):
// on a single layer the key is an error.
TransformerLayerOptions layer_options(ConfigReader& r, bool transformer_defaults, bool stack) {
  TransformerLayerOptions o;
  o.d_model = transformer_defaults ? r.get<int64_t>("d_model", o.d_model) : r.require<int64_t>("d_model");
  o.nhead = transformer_defaults ? r.get<int64_t>("nhead", o.nhead) : r.require<int64_t>("nhead");
  o.dim_feedforward = r.get<int64_t>("dim_feedforward", o.dim_feedforward);
  o.dropout = r.get<float>("dropout", o.dropout);
  o.activation = enum_from_name<Activation>(r.get<std::string>("activation", std::string(enum_name(o.activation))));
  o.layer_norm_eps = r.get<float>("layer_norm_eps", o.layer_norm_eps);
  o.batch_first = r.get<bool>("batch_first", o.batch_first);
  o.norm_first = r.get<bool>("norm_first", o.norm_first);
  o.bias = r.get<bool>("bias", o.bias);
  o.attention = attention_variant(r);
  o.ffn_bias = r.get_optional<bool>("ffn_bias");
  o.norm_bias = r.get_optional<bool>("norm_bias");
  try {
    o.norm_type = enum_from_name<NormType>(r.get<std::string>("norm_type", std::string(enum_name(o.norm_type))));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("config: 'norm_type': ") + e.what());
  }
  if (o.norm_type == NormType::RMS_NORM && o.norm_bias.value_or(false))
    throw std::invalid_argument("config: 'norm_bias' true with norm_type 'rms_norm' (an RMSNorm has no bias)");
  if (stack)
    o.share_layers = r.get<bool>("share_layers", o.share_layers);
  else if (r.j.contains("share_layers"))
    throw std::invalid_argument("config: 'share_layers' applies to TransformerEncoder, TransformerDecoder and "
                                "Transformer, not to a single layer");
  o.drop_path = r.get<float>("drop_path", o.drop_path);
  if (!(o.drop_path >= 0.0f && o.drop_path < 1.0f))
    throw std::invalid_argument("config: 'drop_path' must be in [0, 1), got " + std::to_string(o.drop_path));
  o.validate();
  return o;
}

AttentionOptions attention_options(ConfigReader& r) {
  AttentionOptions a;
  a.embed_dim = r.require<int64_t>("embed_dim");
  a.num_heads = r.require<int64_t>("num_heads");
  a.dropout = r.get<float>("dropout", a.dropout);
  a.bias = r.get<bool>("bias", a.bias);
  a.batch_first = r.get<bool>("batch_first", a.batch_first);
  if (r.get<bool>("add_bias_kv", false)) throw std::invalid_argument("config: 'add_bias_kv' true is not supported");
  if (r.get<bool>("add_zero_attn", false)) throw std::invalid_argument("config: 'add_zero_attn' true is not supported");
  for (const char* kd : {"kdim", "vdim"}) {
    const auto d = r.get<int64_t>(kd, a.embed_dim);
    if (d != a.embed_dim)
      throw std::invalid_argument(std::string("config: '") + kd + "' different from embed_dim is not supported");
  }
  a.variant = attention_variant(r);
  if (a.embed_dim <= 0 || a.num_heads <= 0 || (!a.variant.head_dim && a.embed_dim % a.num_heads != 0))
    throw std::invalid_argument("config: embed_dim " + std::to_string(a.embed_dim) + " is not divisible by num_heads " +
                                std::to_string(a.num_heads));
  return a;
}

}  // namespace

ModuleConfig parse_module_config(const std::string& config_json) {
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
  ModuleConfig c;
  try {
    c.kind = enum_from_name<ModuleKind>(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("config: ") + e.what());
  }
  ConfigReader r{j};
  switch (c.kind) {
    case ModuleKind::MULTIHEAD_ATTENTION:
      c.attention = attention_options(r);
      break;
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
      c.layer = layer_options(r, false, false);
      break;
    case ModuleKind::TRANSFORMER_ENCODER:
    case ModuleKind::TRANSFORMER_DECODER:
      c.layer = layer_options(r, false, true);
      c.num_layers = r.require<int64_t>("num_layers");
      c.norm = r.get<bool>("norm", c.norm);
      if (c.kind == ModuleKind::TRANSFORMER_ENCODER) {  // nn.TransformerEncoder's fast-path switches
        r.ignore("enable_nested_tensor");
        r.ignore("mask_check");
      }
      break;
    case ModuleKind::TRANSFORMER:
      c.layer = layer_options(r, true, true);
      c.num_encoder_layers = r.get<int64_t>("num_encoder_layers", c.num_encoder_layers);
      c.num_decoder_layers = r.get<int64_t>("num_decoder_layers", c.num_decoder_layers);
      break;
  }
  r.finish();
  return c;
}

ModuleConfig read_module_config(const std::string& path) {
  const std::string text = io::read_file(path);
  try {
    return parse_module_config(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace tfm
