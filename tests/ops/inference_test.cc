// tests/ops/inference_test.cc — InferenceMode (include/tfm/inference.h): what the scope changes
// (Linear weights packed once per outermost scope, no tape, bf16 matmul inputs on request) and what
// it must not (float32 numbers within rounding of the plain path, bitwise repeatability).
//
// Tolerances, per Linear output y_ij = Σ_k x_ik w_jk + b_j against the double value from the
// unrounded float inputs, with S = Σ_k |x_ik w_jk| + |b_j| and γ_n = n·u/(1 − n·u), u = 2^-24:
//   Float32:  the packed GEMM and the plain one are float evaluations of the same K+1-term sum,
//             each within γ_{K+1}·S of the double value.
//   BFloat16: x and w are first rounded to bfloat16 (8-bit significand, relative error ≤ u_b =
//             2^-8), so each product is off by at most (2u_b + u_b²)|x w|; the float32 sum of the
//             rounded products adds γ_{K+1}·(1 + u_b)²·S. Bound: (2u_b + u_b² + γ_{K+1}(1 + u_b)²)·S.
// A whole layer chains four Linears through softmax, residual adds and LayerNorm; no tight
// elementwise bound exists there, so the layer test checks the normwise relative error against
// 8·u_b (four Linears in series, each ≤ 2u_b relative in the worst case) and that it is not zero
// (bf16 really ran). The measured figure is in docs/bf16.md.
//
// Int8 (docs/int8.md): row m of x is quantized with step s_x = (max(0, max x_m) − min(0, min x_m)) / 255,
// row n of W with step s_w = max|w_n| / 127; each element moves by at most half its step, plus the
// rounding of the float quotient (x·fl(1/s): ≤ (2u + u²)·255 < 511u steps for x; w/s: ≤ 127u steps):
// e_x = s_x·(1/2 + 512u), e_w = s_w·(1/2 + 256u). The int32 sum is exact, so
//   |Σ x w − Σ x̂ ŵ| ≤ e_x·Σ|w| + e_w·Σ|x̂| ≤ e_x·Σ_k|w_k| + e_w·(Σ_k|x_k| + K·e_x),
// and the float32 dequantization (int32 → float, the scale product, one fma with the bias) adds at
// most 4u·(Σ(|x| + e_x)(|w| + e_w) + |b|). Unlike bf16 this bound is absolute, set by the row's
// largest element, not relative to each product.
// Int8 layer, normwise: quantizing a row moves it by at most √K·s/2, and s ≤ 2·max|x|/255 (input),
// max|w|/127 (weight), so each Linear's output moves by at most (√K/255 + √K/254)·‖x‖‖W‖ — about
// 2√K/255 relative to the product of the norms; the four Linears of a layer (K = D, D, D, F) add:
// bound Σ 2√K/255, held normwise like bf16's 8·u_b, and > 0 (int8 really ran).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/models/forward.h"
#include "tfm/inference.h"
#include "tfm/modules/basic.h"
#include "tfm/modules/transformer.h"
#include "tfm/random.h"

namespace tfm {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::random_tensor;

constexpr double kU = FLT_EPSILON / 2.0;  // float32 unit roundoff, 2^-24
constexpr double kUb = 1.0 / 256.0;       // bfloat16 unit roundoff, 2^-8

double gamma_f(int64_t n) { return double(n) * kU / (1.0 - double(n) * kU); }

// Checks |got − exact| ≤ coef(K)·S elementwise for y = x·Wᵀ + b, exact in double from x, W, b.
void expect_linear_within(const Tensor& got, const Tensor& x, const Linear& lin, double coef, const char* what) {
  const int64_t K = lin.in_features, F = lin.out_features, N = x.numel() / K;
  const float* xp = x.data();
  const float* wp = lin.weight.data();
  std::vector<double> exact, tol;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      double e = lin.bias.data()[j], s = std::fabs(lin.bias.data()[j]);
      for (int64_t k = 0; k < K; ++k) {
        e += double(xp[i * K + k]) * wp[j * K + k];
        s += std::fabs(double(xp[i * K + k]) * wp[j * K + k]);
      }
      exact.push_back(e);
      tol.push_back(coef * s + FLT_MIN);
    }
  EXPECT_TRUE(tfm::testing::close_abs(tfm::testing::values(got), exact, tol, what, {N, F}));
}

TEST(InferenceMode, Float32LinearWithinRoundingOfExact) {
  Generator gen{7, 0};
  Linear lin(96, 80, true, gen);
  const Tensor x = random_tensor({3, 17, 96}, 11);
  InferenceMode scope;
  const Tensor y = lin.forward(x);
  EXPECT_EQ(InferenceMode::cached_weights(), 1u);
  expect_linear_within(y, x, lin, gamma_f(96 + 1), "f32");
}

TEST(InferenceMode, BFloat16LinearWithinBf16Bound) {
  Generator gen{8, 0};
  Linear lin(128, 64, true, gen);
  const Tensor x = random_tensor({40, 128}, 12);
  Tensor y, y32;
  {
    InferenceMode scope(Precision::BFLOAT16);
    y = lin.forward(x);
  }
  {
    NoGradGuard g;
    y32 = lin.forward(x);
  }
  const double coef = 2 * kUb + kUb * kUb + gamma_f(128 + 1) * (1 + kUb) * (1 + kUb);
  expect_linear_within(y, x, lin, coef, "bf16");
  // And it is not the float32 result: bf16 rounding of x and W is visible in the output.
  EXPECT_GT(tfm::testing::rel_error(y, y32), 1e-4);
}

// Per-row quantization steps as tfm computes them (kernels::quantize_rows_u8 / _s8, in float).
float input_step(const float* x, int64_t K) {
  float lo = 0.f, hi = 0.f;
  for (int64_t k = 0; k < K; ++k) lo = std::min(lo, x[k]), hi = std::max(hi, x[k]);
  return (hi - lo) / 255.0f;
}
float weight_step(const float* w, int64_t K) {
  float m = 0.f;
  for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(w[k]));
  return m / 127.0f;
}

TEST(InferenceMode, Int8LinearWithinScaleBound) {
  Generator gen{10, 0};
  const int64_t K = 200, F = 70, N = 33;
  Linear lin(K, F, true, gen);
  Tensor x = random_tensor({N, K}, 13);
  float* xp = x.data();
  for (int64_t k = 0; k < K; ++k) xp[k] = std::fabs(xp[k]);  // row 0 non-negative: zero point 0
  for (int64_t k = 0; k < K; ++k) xp[K + k] *= 1e-3f;        // row 1 small: its own step
  xp[2 * K + 5] = 40.0f;                                     // row 2 one outlier: a coarse step
  Tensor y, y32;
  {
    InferenceMode scope(Precision::INT8);
    y = lin.forward(x);
    EXPECT_EQ(InferenceMode::cached_weights(), 1u);
  }
  {
    NoGradGuard g;
    y32 = lin.forward(x);
  }
  const float* wp = lin.weight.data();
  const float* bp = lin.bias.data();
  std::vector<double> exact, tol;
  for (int64_t i = 0; i < N; ++i) {
    const double ex = input_step(xp + i * K, K) * (0.5 + 512 * kU);
    for (int64_t j = 0; j < F; ++j) {
      const double ew = weight_step(wp + j * K, K) * (0.5 + 256 * kU);
      double e = bp[j], sw = 0, sx = 0, mag = std::fabs(bp[j]);
      for (int64_t k = 0; k < K; ++k) {
        const double xv = xp[i * K + k], wv = wp[j * K + k];
        e += xv * wv;
        sw += std::fabs(wv);
        sx += std::fabs(xv);
        mag += (std::fabs(xv) + ex) * (std::fabs(wv) + ew);
      }
      exact.push_back(e);
      tol.push_back(ex * sw + ew * (sx + K * ex) + 4 * kU * mag);
    }
  }
  EXPECT_TRUE(tfm::testing::close_abs(tfm::testing::values(y), exact, tol, "int8", {N, F}));
  // It is not the float32 result: quantization is visible (steps of ~1/127 of the largest weight).
  EXPECT_GT(tfm::testing::rel_error(y, y32), 1e-3);
}

TransformerLayerOptions small_layer() {
  TransformerLayerOptions o;
  o.d_model = 64;
  o.nhead = 4;
  o.dim_feedforward = 128;
  o.dropout = 0.0f;
  o.batch_first = true;
  return o;
}

TEST(InferenceMode, EncoderLayerPacksEachWeightOnceAndRepeatsBitwise) {
  Generator gen{3, 0};
  TransformerEncoderLayer layer(small_layer(), gen);
  layer.eval();
  const Tensor x = random_tensor({2, 9, 64}, 5);
  Tensor plain;
  {
    NoGradGuard g;
    plain = layer.forward(x);
  }
  Tensor first, second;
  {
    InferenceMode scope;
    first = layer.forward(x);
    // self_attn.in_proj_weight, self_attn.out_proj.weight, linear1.weight, linear2.weight.
    EXPECT_EQ(InferenceMode::cached_weights(), 4u);
    second = layer.forward(x);
    EXPECT_EQ(InferenceMode::cached_weights(), 4u) << "a second forward must reuse the packed weights";
    EXPECT_FALSE(first.requires_grad());
    EXPECT_TRUE(first.is_leaf()) << "InferenceMode must not record a tape";
  }
  EXPECT_EQ(InferenceMode::cached_weights(), 0u) << "the cache ends with the outermost scope";
  EXPECT_TRUE(bitwise_equal(first, second, "repeat"));
  // Packed float32 differs from the plain GEMM only in summation order: well inside the
  // float32 parity budget the suite uses against PyTorch (rel_error ≤ 1e-5 here).
  EXPECT_TRUE(tfm::testing::close_rel(first, plain, 1e-5, "packed f32 vs plain"));
}

TEST(InferenceMode, NestedScopesKeepOuterCacheAndRestorePrecision) {
  EXPECT_EQ(InferenceMode::current_precision(), Precision::FLOAT32);
  Generator gen{4, 0};
  Linear lin(32, 16, true, gen);
  const Tensor x = random_tensor({5, 32}, 6);
  InferenceMode outer;
  lin.forward(x);
  EXPECT_EQ(InferenceMode::cached_weights(), 1u);
  {
    InferenceMode inner(Precision::BFLOAT16);
    EXPECT_EQ(InferenceMode::current_precision(), Precision::BFLOAT16);
    lin.forward(x);
    EXPECT_EQ(InferenceMode::cached_weights(), 2u) << "bf16 packing is a separate cache entry";
    {
      InferenceMode inherit(InferenceMode::current_precision());
      EXPECT_EQ(InferenceMode::current_precision(), Precision::BFLOAT16);
    }
  }
  EXPECT_EQ(InferenceMode::current_precision(), Precision::FLOAT32);
  EXPECT_EQ(InferenceMode::cached_weights(), 2u) << "an inner scope must not clear the outer cache";
}

TEST(InferenceMode, GradientsStillFlowOutsideTheScope) {
  Generator gen{9, 0};
  Linear lin(16, 8, true, gen);
  Tensor x = random_tensor({4, 16}, 2);
  x.requires_grad_(true);
  {
    InferenceMode scope;
    EXPECT_FALSE(lin.forward(x).requires_grad());
  }
  Tensor y = lin.forward(x);
  ASSERT_TRUE(y.requires_grad());
  y.backward(Tensor::full(y.shape(), 1.0f));
  EXPECT_TRUE(x.grad().defined());
}

TEST(InferenceMode, BFloat16EncoderLayerNormwiseError) {
  Generator gen{21, 0};
  TransformerLayerOptions o = small_layer();
  o.d_model = 128;
  o.dim_feedforward = 256;
  TransformerEncoderLayer layer(o, gen);
  layer.eval();
  const Tensor x = random_tensor({2, 16, 128}, 22);
  Tensor ref, got;
  {
    NoGradGuard g;
    ref = layer.forward(x);
  }
  {
    InferenceMode scope(Precision::BFLOAT16);
    got = layer.forward(x);
  }
  const double rel = tfm::testing::rel_error_l2(got, ref);
  EXPECT_GT(rel, 0.0) << "bf16 must actually change the numbers";
  EXPECT_LE(rel, 8 * kUb) << "normwise relative error of a bf16 encoder layer";
  RecordProperty("bf16_layer_rel_rms", std::to_string(rel));
}

TEST(InferenceMode, Int8EncoderLayerNormwiseError) {
  Generator gen{21, 0};
  TransformerLayerOptions o = small_layer();
  o.d_model = 128;
  o.dim_feedforward = 256;
  TransformerEncoderLayer layer(o, gen);
  layer.eval();
  const Tensor x = random_tensor({2, 16, 128}, 22);
  Tensor ref, got, again;
  {
    NoGradGuard g;
    ref = layer.forward(x);
  }
  {
    InferenceMode scope(Precision::INT8);
    got = layer.forward(x);
    again = layer.forward(x);
  }
  EXPECT_TRUE(bitwise_equal(got, again, "int8 repeat"));
  const double rel = tfm::testing::rel_error_l2(got, ref);
  const double bound = 2.0 * (3 * std::sqrt(128.0) + std::sqrt(256.0)) / 255.0;  // K = D, D, D, F
  EXPECT_GT(rel, 0.0) << "int8 must actually change the numbers";
  EXPECT_LE(rel, bound) << "normwise relative error of an int8 encoder layer";
  RecordProperty("int8_layer_rel_rms", std::to_string(rel));
}

TEST(InferenceMode, ParsePrecision) {
  EXPECT_EQ(enum_from_name<Precision>("int8"), Precision::INT8);
  EXPECT_EQ(enum_name(Precision::INT8), "int8");
  EXPECT_EQ(enum_from_name<Precision>("bf16"), Precision::BFLOAT16);
  EXPECT_EQ(enum_from_name<Precision>("float32"), Precision::FLOAT32);
  EXPECT_THROW(enum_from_name<Precision>("f16"), std::invalid_argument);
  EXPECT_EQ(enum_name(Precision::BFLOAT16), "bf16");
}

}  // namespace
}  // namespace tfm
