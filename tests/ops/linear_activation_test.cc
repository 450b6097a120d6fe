// tests/ops/linear_activation_test.cc — the fused FFN input op (ops/linear_activation.h) against
// the composition it replaces, activation(linear(x, W, b)).
//
// Forward: the fused op computes x·Wᵀ with beta = 0 and adds b afterwards, the composition starts the
// GEMM from b; both are float evaluations of the same K+1-term sum, so each element differs from
// the double value by at most γ_{K+1}·(Σ_k |x_ik||w_jk| + |b_j|) and the two by twice that
// (relu is 1-Lipschitz). Backward (ReLU): dz = dy ⊙ [y > 0] in the fused op and dy ⊙ [z > 0] in the
// composition; where the two pre-activations have the same sign (checked) dz is bitwise the same
// and both then run the same GEMMs and bias sum, so dx, dW, db must be bitwise equal.
// To add a case: another activation or shape in the loops below.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "ops/linear_activation.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/linear.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::random_tensor;

double gamma_f(int64_t n) {
  const double u = FLT_EPSILON / 2.0;
  return double(n) * u / (1.0 - double(n) * u);
}

// |fused − composed| ≤ 2·γ_{K+1}·(Σ|x||w| + |b|) per element, for y (N, F) of x (N, K), w (F, K).
void expect_forward_close(const Tensor& fused, const Tensor& composed, const Tensor& x, const Tensor& w,
                          const Tensor& b) {
  const int64_t K = w.size(1), F = fused.size(-1), N = fused.numel() / F;
  std::vector<double> tol;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      double s = b.defined() ? std::fabs(b.data()[j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(x.data()[i * K + k]) * std::fabs(w.data()[j * K + k]);
      tol.push_back(2.0 * gamma_f(K + 1) * s + FLT_MIN);
    }
  EXPECT_TRUE(tfm::testing::close_abs(fused, composed, tol, "fused vs composed"));
}

TEST(LinearActivation, InferenceMatchesComposition) {
  for (Activation act : {Activation::RELU, Activation::GELU, Activation::SWIGLU}) {
    for (bool with_bias : {true, false}) {
      const int64_t K = 37, Fin = 2 * 45;  // not multiples of 16; even for the gated halves
      Tensor x = random_tensor({3, 7, K}, 1), w = random_tensor({Fin, K}, 2);
      Tensor b = with_bias ? random_tensor({Fin}, 3) : Tensor();
      NoGradGuard no_grad;
      Tensor fused = linear_activation(x, w, b, act);
      Tensor composed = activation(linear(x, w, b), act);
      if (act == Activation::RELU) {
        expect_forward_close(fused, composed, x, w, b);
      } else {
        // Smooth and gated activations: no per-element proof here (the gated product mixes both
        // halves). The pre-activations differ by at most 2γ_38·Σ|x||w| ≲ 4e-5 absolute and
        // |gelu'| ≤ 1.13, so 1e-4 of max|y| is a loose check that the fused path computes the same
        // function; its exactness is covered by the parity suite against PyTorch.
        ASSERT_EQ(fused.shape(), composed.shape());
        EXPECT_TRUE(tfm::testing::close_rel(fused, composed, 1e-4, std::string(enum_name(act))));
      }
    }
  }
}

TEST(LinearActivation, ReluTrainingGradientsBitwiseEqualComposition) {
  const int64_t K = 29, F = 53;
  Tensor x0 = random_tensor({4, 9, K}, 11), w0 = random_tensor({F, K}, 12), b0 = random_tensor({F}, 13);
  Tensor dy = random_tensor({4, 9, F}, 14);
  auto run = [&](bool fused, Tensor& y, Tensor& dx, Tensor& dw, Tensor& db) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    x.requires_grad_();
    w.requires_grad_();
    b.requires_grad_();
    y = fused ? linear_activation(x, w, b, Activation::RELU) : activation(linear(x, w, b), Activation::RELU);
    y.backward(dy);
    dx = x.grad();
    dw = w.grad();
    db = b.grad();
  };
  Tensor yf, dxf, dwf, dbf, yc, dxc, dwc, dbc;
  run(true, yf, dxf, dwf, dbf);
  run(false, yc, dxc, dwc, dbc);
  expect_forward_close(yf.detach(), yc.detach(), x0, w0, b0);
  for (int64_t i = 0; i < yf.numel(); ++i)
    ASSERT_EQ(yf.data()[i] > 0.0f, yc.data()[i] > 0.0f) << "relu mask differs at " << i;
  EXPECT_TRUE(bitwise_equal(dxf, dxc, "dx"));
  EXPECT_TRUE(bitwise_equal(dwf, dwc, "dW"));
  EXPECT_TRUE(bitwise_equal(dbf, dbc, "db"));
}

// Training with a non-ReLU activation takes the composition itself: bitwise equal.
TEST(LinearActivation, GeluTrainingIsTheComposition) {
  Tensor x = random_tensor({5, 16}, 21), w = random_tensor({24, 16}, 22), b = random_tensor({24}, 23);
  w.requires_grad_();
  Tensor yf = linear_activation(x, w, b, Activation::GELU);
  Tensor yc = activation(linear(x, w, b), Activation::GELU);
  EXPECT_TRUE(bitwise_equal(yf.detach(), yc.detach(), "y"));
}

TEST(LinearActivation, ErrorsNameTheTensor) {
  Tensor x = random_tensor({2, 8}, 1);
  EXPECT_THROW(linear_activation(x, random_tensor({6, 7}, 2), Tensor(), Activation::RELU), std::invalid_argument);
  EXPECT_THROW(linear_activation(x, random_tensor({6, 8}, 2), random_tensor({5}, 3), Activation::RELU),
               std::invalid_argument);
  EXPECT_THROW(linear_activation(x, random_tensor({7, 8}, 2), Tensor(), Activation::GLU), std::invalid_argument);
}

}  // namespace
}  // namespace tfm::ops
