// tests/models/module_config_test.cc — ModuleConfig (src/models/module_config.cc): defaults from the
// modules' option structs, every kind by its PyTorch class name, errors that name the key.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <stdexcept>

#include "test_util.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/bench.h"
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
  EXPECT_EQ(a.attention.kdim, 8);
  EXPECT_FALSE(a.attention.vdim.has_value());  // PyTorch's None: embed_dim

  const ModuleConfig kv = parse_module_config(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2,
                                                  "kdim": 5, "vdim": 11})");
  EXPECT_EQ(kv.attention.kdim, 5);
  EXPECT_EQ(kv.attention.vdim, 11);
  EXPECT_FALSE(kv.attention.add_bias_kv);  // PyTorch's defaults
  EXPECT_FALSE(kv.attention.add_zero_attn);

  const ModuleConfig extra = parse_module_config(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2,
                                                     "add_bias_kv": true, "add_zero_attn": true})");
  EXPECT_TRUE(extra.attention.add_bias_kv);
  EXPECT_TRUE(extra.attention.add_zero_attn);
  LoadedModule loaded(extra);
  EXPECT_EQ(loaded.module().state_dict().at("bias_k").shape(), (Shape{1, 1, 8}));
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
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2, "num_layers": -1})"),
            "config: num_layers must be ≥ 0, got -1");
  EXPECT_EQ(error_of(R"({"module": "Transformer", "d_model": 8, "nhead": 2, "num_decoder_layers": -3})"),
            "config: num_decoder_layers must be ≥ 0, got -3");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "layer_norm_eps": -1})"),
            "config: layer_norm_eps must be positive, got -1");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "vdim": 0})"),
            "config: 'vdim' must be positive, got 0");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "kdim": -3})"),
            "config: 'kdim' must be positive, got -3");
  // Integers that do not fit the key's type are refused, not narrowed (18446744073709551615 read as -1).
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 18446744073709551615, "nhead": 2})"),
            "config: 'd_model' must be an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709551615");
  // A model whose weights alone cannot fit in memory is refused before anything is allocated.
  const std::string huge = error_of(R"({"module": "TransformerEncoder", "d_model": 16, "nhead": 2, "dim_feedforward": 32,
                                       "num_layers": 100000000000})");
  EXPECT_EQ(huge.rfind("config: its layers of d_model 16 and dim_feedforward 32 make a model of at least 2.05e+14 "
                       "parameters (8.19e+05 GB as float32), more than this machine's ",
                       0),
            0u)
      << huge;
  // The attention's projections count too: wide heads alone (nothing allocated: no std::bad_alloc).
  const std::string wide = error_of(R"({"module": "TransformerEncoderLayer", "d_model": 16, "nhead": 2,
                                       "dim_feedforward": 32, "head_dim": 1073741824})");
  EXPECT_EQ(wide.rfind("config: one layer of d_model 16 and dim_feedforward 32, head_dim 1073741824 make a model of "
                       "at least 1.37e+11 parameters",
                       0),
            0u)
      << wide;
  // A key said twice: refused, not the last one taken.
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "d_model": 16})"),
            "config: key 'd_model' appears twice in one object");
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
            "config: MultiheadAttention: head_dim must be positive, got 0");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "v_head_dim": -2})"),
            "config: MultiheadAttention: v_head_dim must be positive, got -2");
  EXPECT_EQ(error_of(R"({"module": "Transformer", "attn_scale": 0})"),
            "config: MultiheadAttention: attn_scale must be finite and positive, got 0.000000");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "qkv_bias": 1})"),
            "config: 'qkv_bias' must be a boolean, got 1");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 6, "num_heads": 4})"),
            "config: MultiheadAttention: embed_dim 6 is not divisible by num_heads 4 (or give head_dim)");
}

// The layer variant keys: defaults leave the option structs' values; set, they reach every layer (and
// the stacks' share_layers); bad values and combinations name the key.
TEST(ModuleConfig, LayerVariantKeys) {
  const ModuleConfig d = parse_module_config(R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2,
                                                 "num_layers": 2})");
  const TransformerLayerOptions o;
  EXPECT_FALSE(d.layer.ffn_bias || d.layer.norm_bias);
  EXPECT_EQ(d.layer.norm_type, NormType::LAYER_NORM);
  EXPECT_FALSE(d.layer.share_layers);
  EXPECT_EQ(d.layer.drop_path, o.drop_path);

  const ModuleConfig t = parse_module_config(
      R"({"module": "Transformer", "d_model": 8, "nhead": 2, "num_encoder_layers": 3, "num_decoder_layers": 2,
          "norm_type": "rms_norm", "ffn_bias": false, "norm_bias": false, "share_layers": true, "drop_path": 0.1,
          "qkv_bias": false})");
  EXPECT_EQ(t.layer.norm_type, NormType::RMS_NORM);
  EXPECT_EQ(t.layer.ffn_bias, false);
  EXPECT_EQ(t.layer.norm_bias, false);
  EXPECT_TRUE(t.layer.share_layers);
  EXPECT_EQ(t.layer.drop_path, 0.1f);
  LoadedModule m(t);
  NamedTensors sd = m.module().state_dict();
  EXPECT_TRUE(sd.contains("encoder.layers.0.norm1.weight"));
  EXPECT_FALSE(sd.contains("encoder.layers.0.norm1.bias"));
  EXPECT_FALSE(sd.contains("encoder.layers.1.norm1.weight"));
  EXPECT_FALSE(sd.contains("decoder.layers.0.linear1.bias"));
  EXPECT_TRUE(sd.contains("decoder.layers.0.self_attn.out_proj.bias"));
  EXPECT_FALSE(sd.contains("decoder.layers.0.self_attn.in_proj_bias"));
  EXPECT_TRUE(sd.contains("decoder.norm.weight"));
  EXPECT_FALSE(sd.contains("decoder.norm.bias"));
  const ModuleConfig l = parse_module_config(
      R"({"module": "TransformerDecoderLayer", "d_model": 8, "nhead": 2, "bias": false, "norm_bias": true})");
  EXPECT_TRUE(LoadedModule(l).module().state_dict().contains("norm3.bias"));
  EXPECT_FALSE(LoadedModule(l).module().state_dict().contains("linear1.bias"));

  // A shared stack runs the same matmuls as distinct layers: the same FLOP count.
  ModuleConfig distinct = t;
  distinct.layer.share_layers = false;
  for (BenchMode mode : {BenchMode::INFER, BenchMode::TRAIN})
    EXPECT_EQ(bench_flop_count(t, 2, 5, 7, mode), bench_flop_count(distinct, 2, 5, 7, mode));

  const std::string layer = R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, )";
  EXPECT_EQ(error_of(layer + R"("norm_type": "batch_norm"})"),
            "config: 'norm_type': unknown norm type 'batch_norm' (expected layer_norm or rms_norm)");
  EXPECT_EQ(error_of(layer + R"("norm_type": "rms_norm", "norm_bias": true})"),
            "config: norm_bias: rms_norm has no bias (expected norm_bias false or unset)");
  EXPECT_EQ(error_of(layer + R"("share_layers": true})"),
            "config: 'share_layers' applies to TransformerEncoder, TransformerDecoder and Transformer, not to a "
            "single layer");
  EXPECT_EQ(error_of(layer + R"("drop_path": 1})"), "config: drop_path must be in [0, 1), got 1");
  EXPECT_EQ(error_of(layer + R"("drop_path": -0.5})"), "config: drop_path must be in [0, 1), got -0.5");
  EXPECT_EQ(error_of(layer + R"("ffn_bias": "no"})"), "config: 'ffn_bias' must be a boolean, got \"no\"");
  EXPECT_EQ(error_of(layer + R"("norm_bias": 0})"), "config: 'norm_bias' must be a boolean, got 0");
  EXPECT_EQ(error_of(R"({"module": "TransformerDecoder", "d_model": 8, "nhead": 2, "num_layers": 1,
                        "share_layers": 1})"),
            "config: 'share_layers' must be a boolean, got 1");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "norm_type": "rms_norm"})"),
            "config: unknown key 'norm_type'");
}

// bf16 inference with every layer variant at once (RMSNorm, one shared layer per stack, no attention
// or norm biases, a biased FFN): the parity fixture transformer_shared_rms_nobias_pre, whose float32 run
// the parity suite checks against PyTorch, in bfloat16. Bound (docs/bf16.md): ≤ 8·u_b per layer
// normwise, u_b = 2⁻⁸; four layers applied (two encoder, two decoder) → 32·u_b = 0.125, here on the
// largest element error over the largest |output|; and > 0, so bf16 really ran.
TEST(ModuleConfig, LayerVariantsRunInBf16) {
  const std::string dir = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/parity/transformer_shared_rms_nobias_pre/";
  const std::string config = tfm::testing::slurp(dir + "config.json");
  const NamedTensors weights = io::load_safetensors(dir + "weights.safetensors").tensors;
  NamedTensors inputs;
  for (const auto& [k, t] : io::load_safetensors(dir + "inputs.safetensors").tensors)
    if (k != "grad_output") inputs.insert(k, t);
  const Tensor f32 = run_forward(config, weights, inputs).at("output");
  const Tensor bf16 = run_forward(config, weights, inputs, "weights", Precision::BFLOAT16).at("output");
  const double err = tfm::testing::rel_error(bf16, f32);
  EXPECT_GT(err, 0.0);
  EXPECT_LE(err, 32.0 / 256.0);
  std::cout << "[ bf16 ] layer variants: rel error " << err << "\n";
}

// nn.TransformerEncoder's nested-tensor path (src/models/forward.cc) by TorchCall: given only a left-aligned
// src_key_padding_mask, forward(NO_GRAD) gives the final norm of 0 (its bias) at the padded positions, as PyTorch's
// no-grad call; forward(AUTOGRAD) the regular path, as its call with autograd recording, which forward_backward's
// output (the training math's kernels: a few ulps away) agrees with. The unpadded positions are the same numbers in
// both (the padded keys are masked in both).
TEST(LoadedModule, NestedPathTakenOnlyForTheNoGradCall) {
  Generator gen{5};
  LoadedModule m(parse_module_config(R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2, "num_layers": 2,
                                         "dim_feedforward": 16, "dropout": 0.0, "batch_first": true, "norm": true})"),
                 Precision::FLOAT32, gen);
  NamedTensors w = m.module().state_dict();
  const Tensor bias =
      testing::random_tensor({8}, 9);  // LayerNorm(0) = bias: a nonzero one makes the padded rows recognisable
  w.at("norm.bias") = bias;
  m.load_weights(w);
  NamedTensors in;
  in.insert("src", testing::random_tensor({2, 5, 8}, 11));
  in.insert("src_key_padding_mask", Tensor::from_bool({2, 5}, {0, 0, 0, 1, 1, 0, 0, 0, 0, 0}));
  const Tensor fast = m.forward(in, "inputs", TorchCall::NO_GRAD).at("output");
  const Tensor regular = m.forward(in, "inputs", TorchCall::AUTOGRAD).at("output");
  const Tensor trained = m.forward_backward(in, testing::random_tensor({2, 5, 8}, 13)).at("output");
  for (int64_t s = 0; s < 5; ++s)
    for (int64_t d = 0; d < 8; ++d) {
      const int64_t i = s * 8 + d;  // batch row 0: positions 3 and 4 padded
      if (s >= 3) {
        EXPECT_EQ(fast.data()[i], bias.data()[d]) << "padded position " << s;
        EXPECT_NE(regular.data()[i], bias.data()[d]) << "padded position " << s;
      } else {
        EXPECT_EQ(fast.data()[i], regular.data()[i]) << "position " << s;
      }
    }
  for (int64_t i = 40; i < 80; ++i) EXPECT_EQ(fast.data()[i], regular.data()[i]) << "batch row 1, no padding";
  EXPECT_TRUE(testing::close_rel(regular, trained, 1e-6f));  // a few float32 ulps apart
}

}  // namespace
}  // namespace tfm
