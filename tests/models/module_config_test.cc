// tests/models/module_config_test.cc — ModuleConfig (src/models/module_config.cc): defaults from the
// modules' option structs, every kind by its PyTorch class name, errors that name the key.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "tfm/models/forward.h"

namespace tfm {
namespace {

// The message parse_module_config throws for `json`, or "(no error)".
std::string error_of(const std::string& json) {
  try {
    parse_module_config(json);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- ModuleConfig ---------------------------------------------------------------------------------
TEST(ModuleConfig, DefaultsComeFromTheOptionStructs) {
  const ModuleConfig t = parse_module_config(R"({"module": "Transformer"})");
  const TransformerLayerOptions o;
  EXPECT_EQ(t.kind, ModuleKind::TRANSFORMER);
  EXPECT_EQ(t.layer.d_model, o.d_model);
  EXPECT_EQ(t.layer.nhead, o.nhead);
  EXPECT_EQ(t.layer.dim_feedforward, o.dim_feedforward);
  EXPECT_EQ(t.layer.activation, o.activation);
  EXPECT_EQ(t.num_encoder_layers, 6);  // nn.Transformer's defaults
  EXPECT_EQ(t.num_decoder_layers, 6);

  const ModuleConfig e = parse_module_config(
      R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2, "num_layers": 3, "norm": true,
          "activation": "swiglu", "batch_first": true, "enable_nested_tensor": false})");
  EXPECT_EQ(e.kind, ModuleKind::TRANSFORMER_ENCODER);
  EXPECT_EQ(e.num_layers, 3);
  EXPECT_TRUE(e.norm);
  EXPECT_EQ(e.layer.activation, Activation::SWIGLU);
  EXPECT_TRUE(e.layer.batch_first);

  const ModuleConfig a = parse_module_config(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 4,
                                                 "kdim": 8, "bias": false})");
  EXPECT_EQ(a.kind, ModuleKind::MULTIHEAD_ATTENTION);
  EXPECT_EQ(a.attention.embed_dim, 8);
  EXPECT_EQ(a.attention.num_heads, 4);
  EXPECT_FALSE(a.attention.bias);
  EXPECT_EQ(a.attention.dropout, 0.0f);
}

TEST(ModuleConfig, EveryKindByItsPyTorchName) {
  const std::map<ModuleKind, std::string> sizes = {
      {ModuleKind::MULTIHEAD_ATTENTION, R"("embed_dim": 4, "num_heads": 2)"},
      {ModuleKind::TRANSFORMER_ENCODER_LAYER, R"("d_model": 4, "nhead": 2)"},
      {ModuleKind::TRANSFORMER_ENCODER, R"("d_model": 4, "nhead": 2, "num_layers": 1)"},
      {ModuleKind::TRANSFORMER_DECODER_LAYER, R"("d_model": 4, "nhead": 2)"},
      {ModuleKind::TRANSFORMER_DECODER, R"("d_model": 4, "nhead": 2, "num_layers": 1)"},
      {ModuleKind::TRANSFORMER, R"("d_model": 4, "nhead": 2)"}};
  for (const auto& [kind, args] : sizes) {
    const std::string json = std::string(R"({"module": ")") + std::string(enum_name(kind)) + R"(", )" + args + "}";
    EXPECT_EQ(parse_module_config(json).kind, kind) << json;
    EXPECT_EQ(LoadedModule(parse_module_config(json)).config().kind, kind) << json;
  }
}

TEST(ModuleConfig, ErrorsNameTheKey) {
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "n_head": 2})"),
            "config: unknown key 'n_head'");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": "8", "nhead": 2})"),
            "config: 'd_model' must be an integer, got \"8\"");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2})"),
            "config: missing required key 'num_layers'");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "vdim": 4})"),
            "config: 'vdim' different from embed_dim is not supported");
  // A wrong type is reported before an unknown key, whatever their order in the file.
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "zz": 1, "d_model": 8, "nhead": 2, "bias": 1})"),
            "config: 'bias' must be a boolean, got 1");
}

// The attention variant keys: unset they stay unset (the modules derive PyTorch's values), set they
// are carried to every attention; bad values and a width the heads do not divide name the key.
TEST(ModuleConfig, AttentionVariantKeys) {
  const ModuleConfig d = parse_module_config(R"({"module": "TransformerDecoderLayer", "d_model": 8, "nhead": 2})");
  EXPECT_FALSE(d.layer.attention.head_dim || d.layer.attention.v_head_dim || d.layer.attention.qkv_bias ||
               d.layer.attention.out_bias || d.layer.attention.attn_scale);
  const ModuleConfig v = parse_module_config(
      R"({"module": "TransformerEncoderLayer", "d_model": 16, "nhead": 4, "head_dim": 16, "v_head_dim": 8,
          "qkv_bias": false, "out_bias": true, "attn_scale": 0.5})");
  EXPECT_EQ(v.layer.attention.head_dim, 16);
  EXPECT_EQ(v.layer.attention.v_head_dim, 8);
  EXPECT_EQ(v.layer.attention.qkv_bias, false);
  EXPECT_EQ(v.layer.attention.out_bias, true);
  EXPECT_EQ(v.layer.attention.attn_scale, 0.5f);
  // head_dim frees d_model from being a multiple of nhead.
  const ModuleConfig a = parse_module_config(
      R"({"module": "MultiheadAttention", "embed_dim": 6, "num_heads": 4, "head_dim": 3})");
  EXPECT_EQ(a.attention.variant.head_dim, 3);
  LoadedModule m(a);
  EXPECT_EQ(m.module().state_dict().at("in_proj_weight").shape(), (Shape{36, 6}));

  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "head_dim": 0})"),
            "config: 'head_dim' must be positive, got 0");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "v_head_dim": -2})"),
            "config: 'v_head_dim' must be positive, got -2");
  EXPECT_EQ(error_of(R"({"module": "Transformer", "attn_scale": 0})"),
            "config: 'attn_scale' must be a finite positive number, got 0.000000");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "qkv_bias": 1})"),
            "config: 'qkv_bias' must be a boolean, got 1");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 6, "num_heads": 4})"),
            "config: embed_dim 6 is not divisible by num_heads 4");
}

}  // namespace
}  // namespace tfm
