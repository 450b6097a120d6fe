// tests/modules/transformer_variants_test.cc — the layer and stack variants of TransformerLayerOptions
// that the parity suite cannot see or checks only in eval mode: which keys exist (ffn_bias, norm_bias,
// norm_type, share_layers), the errors naming the option, the default path staying bitwise what it
// was, shared layers against the same weights copied into every layer (outputs and summed
// gradients), and drop_path in training against the layer's own parts composed by hand with the same
// generator (bitwise: the same ops in the same order).
//
// Tolerance (shared-layer gradients only): the shared parameter's gradient is accumulated use by use
// in the backward's order (last layer first) and the reference adds the three copies' gradients in the
// same order, so they agree to a few float32 roundings of values of the gradients' magnitude: we
// allow 1e-6 relative to the largest |gradient| (≈ 8 ε).
//
// To add a case: another option in the key/error tables below, or a TEST per property.
#include "tfm/modules/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "ops/linear_activation.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"

namespace tfm {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::close_rel;
using tfm::testing::random_tensor;

constexpr int64_t D = 8, H = 2, F = 24, B = 6, T = 5;

TransformerLayerOptions options(bool norm_first, bool batch_first) {
  TransformerLayerOptions o;
  o.d_model = D;
  o.nhead = H;
  o.dim_feedforward = F;
  o.dropout = 0.0f;
  o.activation = Activation::GELU;
  o.batch_first = batch_first;
  o.norm_first = norm_first;
  return o;
}

bool has(NamedTensors& sd, const std::string& key) { return sd.contains(key); }

TEST(TransformerVariants, KeysFollowTheBiasAndNormOptions) {
  TransformerLayerOptions o = options(false, true);
  o.norm_type = NormType::RMS_NORM;
  o.ffn_bias = false;
  {
    TransformerEncoderLayer layer(o);
    NamedTensors sd = layer.state_dict();
    EXPECT_TRUE(has(sd, "norm1.weight"));
    EXPECT_FALSE(has(sd, "norm1.bias"));  // rms_norm: never a bias, though `bias` is true
    EXPECT_FALSE(has(sd, "linear1.bias"));
    EXPECT_FALSE(has(sd, "linear2.bias"));
    EXPECT_TRUE(has(sd, "self_attn.in_proj_bias"));
    EXPECT_TRUE(has(sd, "self_attn.out_proj.bias"));
  }
  o.norm_type = NormType::LAYER_NORM;
  o.norm_bias = false;
  o.ffn_bias = true;
  o.bias = false;  // attention projections follow `bias`; the FFN and norms their own switches
  {
    TransformerDecoderLayer layer(o);
    NamedTensors sd = layer.state_dict();
    for (const char* k : {"norm1.bias", "norm2.bias", "norm3.bias", "self_attn.in_proj_bias",
                          "multihead_attn.out_proj.bias"})
      EXPECT_FALSE(has(sd, k)) << k;
    for (const char* k : {"norm3.weight", "linear1.bias", "linear2.bias"}) EXPECT_TRUE(has(sd, k)) << k;
  }
  o = options(true, true);
  o.norm_type = NormType::RMS_NORM;
  o.share_layers = true;
  Transformer tr(o, 3, 2);
  EXPECT_EQ(tr.encoder.num_layers(), 3);
  EXPECT_EQ(tr.decoder.num_layers(), 2);
  EXPECT_EQ(tr.encoder.layers.size(), 1u);
  NamedTensors sd = tr.state_dict();
  EXPECT_TRUE(has(sd, "encoder.layers.0.linear1.weight"));
  EXPECT_TRUE(has(sd, "decoder.layers.0.multihead_attn.in_proj_weight"));
  EXPECT_FALSE(has(sd, "encoder.layers.1.linear1.weight"));
  EXPECT_FALSE(has(sd, "decoder.layers.1.norm1.weight"));
  EXPECT_TRUE(has(sd, "encoder.norm.weight"));
  EXPECT_FALSE(has(sd, "decoder.norm.bias"));
  // One encoder and one decoder layer's weights, as Transformer(…, 1, 1) with LayerNorms has, less
  // the seven norms' biases (2 encoder, 3 decoder, 2 final).
  Transformer one(options(true, true), 1, 1);
  EXPECT_EQ(tr.num_parameters(), one.num_parameters() - 7 * D);
}

TEST(TransformerVariants, BadCombinationsNameTheOption) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no exception";
  };
  TransformerLayerOptions o = options(false, false);
  o.norm_type = NormType::RMS_NORM;
  o.norm_bias = true;
  EXPECT_NE(message([&] { o.validate(); }).find("norm_bias"), std::string::npos);
  EXPECT_NE(message([&] { TransformerEncoder(o, 0, true); }).find("norm_bias"), std::string::npos);
  o.norm_bias = false;
  EXPECT_NO_THROW(o.validate());
  for (float p : {1.0f, -0.1f, 1.5f}) {
    o.drop_path = p;
    EXPECT_NE(message([&] { o.validate(); }).find("drop_path"), std::string::npos) << p;
  }
  o.drop_path = 0.99f;
  EXPECT_NO_THROW(o.validate());
}

// The new options at their defaults, or drop_path set but in eval mode: the same parameters (the
// DropPath draws nothing at construction) and bitwise the same outputs.
TEST(TransformerVariants, DefaultsAndEvalDropPathAreBitwiseUnchanged) {
  for (bool norm_first : {false, true}) {
    TransformerLayerOptions o = options(norm_first, false);
    o.dropout = 0.1f;
    TransformerLayerOptions v = o;
    v.norm_type = NormType::LAYER_NORM;
    v.ffn_bias = true;
    v.norm_bias = true;
    v.drop_path = 0.3f;
    Generator g1{3, 0}, g2{3, 0};
    TransformerDecoder a(o, 2, true, g1), b(v, 2, true, g2);
    EXPECT_EQ(g1.offset, g2.offset);
    a.eval();
    b.eval();
    const Tensor x = random_tensor({T, B, D}, 1), mem = random_tensor({T + 1, B, D}, 2);
    EXPECT_TRUE(bitwise_equal(a.forward(x, mem), b.forward(x, mem), "eval"));
    // Training with drop_path 0: the same dropout draws and numbers.
    v.drop_path = 0.0f;
    Generator g3{4, 0}, g4{4, 0};
    TransformerEncoderLayer c(o, g3), d(v, g4);
    EXPECT_TRUE(bitwise_equal(c.forward(x), d.forward(x), "training"));
    EXPECT_EQ(g3.offset, g4.offset);
  }
}

// One layer applied three times against three layers holding copies of its weights: the same
// output (the same ops on the same numbers), and the shared gradient equal to the copies' sum.
TEST(TransformerVariants, SharedLayersEqualCopiedWeightsAndSumGradients) {
  for (bool norm_first : {false, true}) {
    TransformerLayerOptions o = options(norm_first, true);
    o.norm_type = NormType::RMS_NORM;
    o.attention.qkv_bias = false;
    TransformerLayerOptions s = o;
    s.share_layers = true;
    Generator g{7, 0};
    TransformerEncoder shared(s, 3, true, g), copies(o, 3, true, g);
    NamedTensors state;
    for (const auto& [k, t] : shared.state_dict()) {
      if (k.rfind("layers.0.", 0) == 0)
        for (int l = 0; l < 3; ++l) state.insert("layers." + std::to_string(l) + k.substr(8), t);
      else
        state.insert(k, t);
    }
    copies.load_state_dict(state);
    const Tensor x = random_tensor({B, T, D}, 3), gy = random_tensor({B, T, D}, 4);
    Tensor ys = shared.forward(x), yc = copies.forward(x);
    ASSERT_TRUE(bitwise_equal(ys, yc, "y"));
    ys.backward(gy);
    yc.backward(gy);
    shared.visit_parameters([&](const std::string& k, Tensor& t) {
      if (k.rfind("layers.0.", 0) != 0) {
        EXPECT_TRUE(bitwise_equal(t.grad(), copies.state_dict().at(k).grad(), k));
        return;
      }
      const std::string rest = k.substr(8);
      Tensor sum = Tensor::zeros(t.shape());
      for (int l = 2; l >= 0; --l) {
        const Tensor gl = copies.state_dict().at("layers." + std::to_string(l) + rest).grad();
        for (int64_t i = 0; i < sum.numel(); ++i) sum.data()[i] += gl.data()[i];
      }
      EXPECT_TRUE(close_rel(t.grad(), sum, 1e-6, k)) << "norm_first " << norm_first;
    });
  }
}

// drop_path in training (dropout 0, so the only draws are drop_path's, one per sample and branch)
// against the layer's parts composed by hand: x + drop_path(sa(norm1(x))) … (pre-norm) and
// norm1(x + drop_path(sa(x))) … (post-norm), batch_first and not (sample dim 0 or 1), forward and
// the input gradient.
TEST(TransformerVariants, DropPathIsEveryResidualBranchDroppedPerSample) {
  for (bool norm_first : {false, true})
    for (bool batch_first : {true, false}) {
      TransformerLayerOptions o = options(norm_first, batch_first);
      o.drop_path = 0.5f;
      Generator g{static_cast<uint64_t>(20 + 2 * norm_first + batch_first), 0};
      TransformerEncoderLayer layer(o, g);
      const Shape shape = batch_first ? Shape{B, T, D} : Shape{T, B, D};
      Tensor x1 = random_tensor(shape, 5).requires_grad_(true), x2 = random_tensor(shape, 5).requires_grad_(true);
      const Tensor gy = random_tensor(shape, 6);
      Generator ref = g;  // the state the layer's forward starts from
      Tensor y = layer.forward(x1);
      EXPECT_EQ(g.offset, ref.offset + 2 * static_cast<uint64_t>(B));
      const int64_t dim = batch_first ? 0 : 1;
      auto sa = [&](const Tensor& h) { return layer.self_attn.forward(h, h, h); };
      auto ff = [&](const Tensor& h) {
        return layer.linear2.forward(
            ops::linear_activation(h, layer.linear1.weight, layer.linear1.bias, Activation::GELU));
      };
      auto dp = [&](const Tensor& r) { return ops::drop_path(r, 0.5f, dim, true, ref); };
      Tensor e;
      if (norm_first) {
        Tensor h = ops::add(x2, dp(sa(layer.norm1.forward(x2))));
        e = ops::add(h, dp(ff(layer.norm2.forward(h))));
      } else {
        Tensor h = layer.norm1.forward(ops::add(x2, dp(sa(x2))));
        e = layer.norm2.forward(ops::add(h, dp(ff(h))));
      }
      ASSERT_TRUE(bitwise_equal(y, e, "y")) << "norm_first " << norm_first << " batch_first " << batch_first;
      EXPECT_EQ(g.offset, ref.offset);
      y.backward(gy);
      e.backward(gy);
      EXPECT_TRUE(bitwise_equal(x1.grad(), x2.grad(), "dx"));
    }
  // A decoder layer draws for its three branches.
  TransformerLayerOptions o = options(true, true);
  o.drop_path = 0.2f;
  Generator g{30, 0};
  TransformerDecoderLayer dec(o, g);
  const uint64_t before = g.offset;
  dec.forward(random_tensor({B, T, D}, 7), random_tensor({B, T, D}, 8));
  EXPECT_EQ(g.offset, before + 3 * static_cast<uint64_t>(B));
}

}  // namespace
}  // namespace tfm
