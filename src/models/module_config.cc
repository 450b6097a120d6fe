// src/models/module_config.cc — a module config's JSON text → ModuleConfig (include/tfm/models/forward.h),
// parsed and validated in one place. Every key is read once, with its type checked and its default
// taken from the option struct it fills (TransformerLayerOptions, AttentionOptions, ModuleConfig),
// so PyTorch's defaults are written only there. Keys are read in a fixed order and unknown keys are
// reported last, so a config with several faults always reports the same one.
#include <stdexcept>

#include "io/file_util.h"
#include "json_fields.h"
#include "models/model_size.h"
#include "quote.h"
#include "tfm/models/forward.h"

namespace tfm {
namespace {

void require(const ordered_json& j, const char* key) {
  if (!j.contains(key)) throw std::invalid_argument(std::string("config: missing required key ") + quote_name(key));
}

// A check's message, "config: "-prefixed (the option structs' validate() names the option).
template <typename F>
void checked(F&& validate) {
  try {
    validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("config: ") + e.what());
  }
}

// The layer arguments shared by every Transformer* module: TransformerLayerOptions' keys. nn.Transformer
// has defaults for d_model and nhead; the layers and stacks require them. share_layers belongs to the
// stacks (and Transformer): on a single layer the key is an error.
TransformerLayerOptions layer_options(const ordered_json& j, JsonReader& r, bool transformer, bool stack) {
  if (!transformer) require(j, "d_model"), require(j, "nhead");
  if (!stack && j.contains("share_layers"))
    throw std::invalid_argument("config: 'share_layers' applies to TransformerEncoder, TransformerDecoder and "
                                "Transformer, not to a single layer");
  TransformerLayerOptions o;
  TransformerLayerOptions::fields(o, r);
  return o;
}

// nn.MultiheadAttention's arguments (those tfm supports) and the attention variant's keys.
AttentionOptions attention_options(const ordered_json& j, JsonReader& r) {
  AttentionOptions a;
  require(j, "embed_dim"), require(j, "num_heads");
  r("embed_dim", a.embed_dim);
  r("num_heads", a.num_heads);
  r("dropout", a.dropout);
  r("bias", a.bias);
  r("batch_first", a.batch_first);
  AttentionVariant::fields(a.variant, r);
  r("add_bias_kv", a.add_bias_kv);
  r("add_zero_attn", a.add_zero_attn);
  r("kdim", a.kdim);
  r("vdim", a.vdim);
  for (const auto& [name, d] : {std::pair{"kdim", a.kdim}, std::pair{"vdim", a.vdim}})
    if (d && *d <= 0)
      throw std::invalid_argument(std::string("config: ") + quote_name(name) + " must be positive, got " +
                                  std::to_string(*d));
  return a;
}

}  // namespace

ModuleConfig parse_module_config(const std::string& config_json) {
  const ordered_json j = parse_json(config_json, "config");
  if (!j.is_object()) throw std::invalid_argument("config: top level must be a JSON object");
  if (!j.contains("module")) throw std::invalid_argument("config: missing required key 'module'");
  if (!j.at("module").is_string())
    throw std::invalid_argument("config: 'module' must be a string, got " +
                                escape_text(j.at("module").dump(), kMaxQuoted));
  ModuleConfig c;
  JsonReader r(j, "config");
  r("module", c.kind);
  switch (c.kind) {
    case ModuleKind::MULTIHEAD_ATTENTION:
      c.attention = attention_options(j, r);
      break;
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
      c.layer = layer_options(j, r, false, false);
      break;
    case ModuleKind::TRANSFORMER_ENCODER:
    case ModuleKind::TRANSFORMER_DECODER:
      c.layer = layer_options(j, r, false, true);
      require(j, "num_layers");
      r("num_layers", c.num_layers);
      r("norm", c.norm);
      if (c.kind == ModuleKind::TRANSFORMER_ENCODER) {  // nn.TransformerEncoder's fast-path switches
        r("enable_nested_tensor", c.enable_nested_tensor);
        r("mask_check", c.mask_check);
      }
      break;
    case ModuleKind::TRANSFORMER:
      c.layer = layer_options(j, r, true, true);
      r("num_encoder_layers", c.num_encoder_layers);
      r("num_decoder_layers", c.num_decoder_layers);
      r("enable_nested_tensor", c.enable_nested_tensor);  // its encoder's (nn.Transformer builds it with the default)
      r("mask_check", c.mask_check);
      break;
  }
  r.finish();
  // The checks, once: the option structs' own (a wrong type and an unknown key are reported first).
  if (c.kind == ModuleKind::MULTIHEAD_ATTENTION) checked([&] { c.attention.variant.validate(c.attention.embed_dim, c.attention.num_heads); });
  else checked([&] { c.layer.validate(); });
  checked([&] {
    for (const auto& [key, n] : {std::pair<const char*, int64_t>{"num_layers", c.num_layers},
                                 {"num_encoder_layers", c.num_encoder_layers},
                                 {"num_decoder_layers", c.num_decoder_layers}})
      if (n < 0) throw std::invalid_argument(std::string(key) + " must be ≥ 0, got " + std::to_string(n));
  });
  if (c.kind != ModuleKind::MULTIHEAD_ATTENTION) {
    const bool one = c.kind == ModuleKind::TRANSFORMER_ENCODER_LAYER || c.kind == ModuleKind::TRANSFORMER_DECODER_LAYER;
    const long double layers =
        one ? 1.0L
        : c.kind == ModuleKind::TRANSFORMER
            ? static_cast<long double>(c.num_encoder_layers) + static_cast<long double>(c.num_decoder_layers)
            : static_cast<long double>(c.num_layers);
    checked([&] {
      check_model_fits(c.layer, layers, 0.0L,
                       std::string(one ? "one layer" : "its layers") + " of d_model " +
                           std::to_string(c.layer.d_model) + " and dim_feedforward " +
                           std::to_string(c.layer.dim_feedforward) + head_widths(c.layer.attention));
    });
  }
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
