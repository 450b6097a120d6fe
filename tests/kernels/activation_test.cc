// tests/kernels/activation_test.cc — the activation kernels (activation.cc, activation_avx512.cc):
// the AVX-512 relu bodies against their scalar twins on sizes that are not multiples of the 16-float
// vector, and the dispatcher against the twin for every kind (the kinds without a SIMD body take
// the twin). Every comparison is bitwise: the SIMD body performs the same float operations in the
// same order per element as the twin. The fused bias + relu + dropout kernels are tested with their
// op in tests/ops/dropout_fusion_test.cc; the finite-difference checks of every backward are in
// gradcheck_test.cc.
// To add a SIMD body: a TEST comparing foo_avx512 with foo_scalar over kSizes, bitwise.
#include <cstdint>
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

}  // namespace
}  // namespace tfm::kernels
