// tests/kernels/activation_test.cc — the activation kernels (activation.cc, activation_avx512.cc):
// the AVX-512 relu bodies against their scalar twins on sizes that are not multiples of the 16-float
// vector, and the dispatcher against the twin for every kind (the kinds without a SIMD body take
// the twin), and the fused bias + relu + dropout kernels against their twins and the composition
// (bias_activation_forward, then dropout_forward). Every comparison is bitwise: the SIMD body performs
// the same float operations in the same order per element as the twin. The fused op itself is tested
// in tests/ops/linear_activation_test.cc; the finite-difference checks of every backward are in
// gradcheck_test.cc.
// To add a SIMD body: a TEST comparing foo_avx512 with foo_scalar over kSizes, bitwise.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using test::kSizes;
using test::rnd;

TEST(ActivationKernel, ReluBiasForwardAndBackwardBitwise) {
  SKIP_WITHOUT_AVX512();
  const int64_t N = 3;
  for (int64_t F : kSizes) {
    auto x = rnd(N * F, 20 + F), b = rnd(F, 21 + F), dy = rnd(N * F, 22 + F);
    x[0] = -0.0f;  // relu(−0) = +0 in both
    std::vector<float> y1(N * F), y2(N * F);
    ASSERT_TRUE(bias_activation_forward_avx512(Activation::RELU, x.data(), b.data(), y1.data(), N, F));
    bias_activation_forward_scalar(Activation::RELU, x.data(), b.data(), y2.data(), N, F);
    EXPECT_TRUE(bitwise_equal(y1, y2)) << "bias+relu F=" << F;
    ASSERT_TRUE(bias_activation_forward_avx512(Activation::RELU, x.data(), nullptr, y1.data(), N, F));
    activation_forward_scalar(Activation::RELU, x.data(), y2.data(), N, F);
    EXPECT_TRUE(bitwise_equal(y1, y2)) << "relu F=" << F;
    std::vector<float> d1(N * F), d2(N * F);
    ASSERT_TRUE(activation_backward_avx512(Activation::RELU, dy.data(), x.data(), d1.data(), N, F));
    activation_backward_scalar(Activation::RELU, dy.data(), x.data(), d2.data(), N, F);
    EXPECT_TRUE(bitwise_equal(d1, d2)) << "relu backward F=" << F;
  }
}

TEST(ActivationKernel, BiasActivationDispatchMatchesScalarForEveryKind) {
  // Kinds without a SIMD body fall back to the twin: the dispatcher must equal it bitwise.
  const int64_t N = 70;  // more than one row chunk
  for (auto k : {Activation::RELU, Activation::GELU, Activation::GELU_TANH,
                 Activation::GLU, Activation::GEGLU, Activation::SWIGLU}) {
    for (int64_t F : {int64_t(17), int64_t(33)}) {
      const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
      auto x = rnd(N * in_row, 30 + F), b = rnd(in_row, 31 + F);
      std::vector<float> y1(N * F), y2(N * F);
      bias_activation_forward(k, x.data(), b.data(), y1.data(), N, F);
      bias_activation_forward_scalar(k, x.data(), b.data(), y2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "kind " << int(k) << " F=" << F;
      // bias_activation with the bias pre-added equals activation_forward on the sum.
      std::vector<float> xb(x);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < in_row; ++f) xb[n * in_row + f] += b[f];
      activation_forward(k, xb.data(), y1.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "pre-added bias, kind " << int(k) << " F=" << F;
    }
  }
}

// The kernels' AVX-512 bodies against their scalar twins, at widths around the vector width, with
// row offsets crossing 2³²; the backward selects: NaN or inf in dy where y = 0 gives +0.
TEST(ActivationKernel, ReluDropoutMatchesScalarTwins) {
  for (int64_t F : {1, 15, 16, 17, 100, 515}) {
    for (uint64_t offset : {uint64_t{1000}, (uint64_t{1} << 32) - 700}) {
      const int64_t N = 9, n = N * F;
      const auto x = testing::random_values(n, 100), bias = testing::random_values(F, 101);
      auto dy = testing::random_values(n, 102);
      std::vector<float> fast(n), slow(n), dfast(n), dslow(n);
      const DropoutSpec d{0.3f, 17, offset};
      bias_relu_dropout_forward(x.data(), bias.data(), fast.data(), N, F, d);
      bias_relu_dropout_forward_scalar(x.data(), bias.data(), slow.data(), N, F, d);
      ASSERT_TRUE(bitwise_equal(fast, slow, "forward F " + std::to_string(F)));
      // The composition's forward, bitwise.
      std::vector<float> comp(n);
      bias_activation_forward(Activation::RELU, x.data(), bias.data(), comp.data(), N, F);
      dropout_forward(comp.data(), comp.data(), n, d.p, d.seed, d.offset);
      ASSERT_TRUE(bitwise_equal(fast, comp, "composition F " + std::to_string(F)));
      float* g = dy.data();
      g[0] = std::numeric_limits<float>::quiet_NaN();
      if (n > 1) g[n - 1] = std::numeric_limits<float>::infinity();
      relu_dropout_backward(g, fast.data(), dfast.data(), n, d.p);
      relu_dropout_backward_scalar(g, fast.data(), dslow.data(), n, d.p);
      ASSERT_TRUE(bitwise_equal(dfast, dslow, "backward F " + std::to_string(F)));
      const float scale = 1.0f / (1.0f - d.p);
      for (int64_t i = 0; i < n; ++i) {
        const float want = fast[i] > 0.0f ? g[i] * scale : 0.0f;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(dfast[i]));
        } else {
          EXPECT_EQ(dfast[i], want) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tfm::kernels
