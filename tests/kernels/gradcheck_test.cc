// tests/kernels/gradcheck_test.cc — finite-difference gradient checks in double precision for the
// backward rules of the LayerNorm, RMSNorm, activation (every kind) and cross-entropy kernels — their scalar
// templates (*_scalar.h) instantiated with double — and of Linear (expressed with
// gemm_scalar<double>). The attention backward has its own check in attention_test.cc.
//
// Method: for a scalar loss ℓ(x) = Σ w ⊙ f(x) with fixed random weights w, compare the analytic
// gradient from the backward kernel with the central difference (ℓ(x+h·e_i) − ℓ(x−h·e_i)) / 2h.
// With h = 1e-5 in double the truncation error is O(h²·f''') ≈ 1e-10 and the rounding error
// O(ε/h) ≈ 1e-11, so a relative bound of 1e-7 leaves a wide margin while any wrong term in a
// derivative (errors of order 1) fails by many orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/activation_scalar.h"
#include "kernels/cross_entropy_scalar.h"
#include "kernels/gemm_scalar.h"
#include "kernels/layer_norm_scalar.h"
#include "kernels/rms_norm_scalar.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using Vec = std::vector<double>;

Vec rand_vec(size_t n, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  auto f = tfm::testing::random_values(static_cast<int64_t>(n), seed, static_cast<float>(lo), static_cast<float>(hi));
  return Vec(f.begin(), f.end());
}

// Central differences of loss() with respect to every element of x (x is restored afterwards).
Vec numeric_grad(Vec& x, const std::function<double()>& loss) {
  const double h = 1e-5;
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// max|analytic − numeric| / max|numeric| ≤ 1e-7 (the bound derived above).
void expect_close(const Vec& analytic, const Vec& numeric, const char* what) {
  EXPECT_TRUE(tfm::testing::close_rel(analytic, numeric, 1e-7, what, 1e-300));
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(GradCheck, LayerNormInputWeightBias) {
  const int64_t N = 3, D = 7;
  Vec x = rand_vec(N * D, 1), w = rand_vec(D, 2), b = rand_vec(D, 3), dy = rand_vec(N * D, 4);
  Vec y(N * D), mean(N), rstd(N);
  auto loss = [&] {
    layer_norm_forward_scalar<double>(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, D, 1e-5);
    return dot(y, dy);
  };
  loss();
  Vec dx(N * D), dw(D, 0.0), db(D, 0.0);
  layer_norm_backward_scalar<double>(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), N, D, 1e-5);
  expect_close(dx, numeric_grad(x, loss), "dx");
  expect_close(dw, numeric_grad(w, loss), "dw");
  expect_close(db, numeric_grad(b, loss), "db");
}

// RMSNorm's backward takes the forward's rstd: the loss re-runs the forward, so the analytic gradient
// is evaluated at the unperturbed x with its own rstd. The backward sees eps only through rstd; eps
// 1e-3 as well as 1e-5 checks the formula where eps is a visible share of mean(x²) + eps (rows of
// 7 values in [−1.5, 1.5)), so a rule exact only for eps = 0 fails.
TEST(GradCheck, RMSNormInputWeight) {
  const int64_t N = 3, D = 7;
  for (double eps : {1e-5, 1e-3}) {
    Vec x = rand_vec(N * D, 5), w = rand_vec(D, 6), dy = rand_vec(N * D, 7);
    Vec y(N * D), rstd(N);
    auto loss = [&] {
      rms_norm_forward_scalar<double>(x.data(), w.data(), y.data(), rstd.data(), N, D, eps);
      return dot(y, dy);
    };
    loss();
    Vec dx(N * D), dw(D, 0.0);
    rms_norm_backward_scalar<double>(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, D);
    expect_close(dx, numeric_grad(x, loss), eps == 1e-5 ? "dx" : "dx (eps 1e-3)");
    expect_close(dw, numeric_grad(w, loss), eps == 1e-5 ? "dw" : "dw (eps 1e-3)");
  }
}

class ActivationGrad : public ::testing::TestWithParam<Activation> {};

TEST_P(ActivationGrad, MatchesCentralDifferences) {
  const Activation k = GetParam();
  const int64_t N = 4, F = 5, in_row = activation_is_gated(k) ? 2 * F : F;
  Vec x = rand_vec(N * in_row, 11), dy = rand_vec(N * F, 12), y(N * F);
  // Keep ReLU's inputs away from its kink at 0, where the derivative is undefined.
  if (k == Activation::RELU)
    for (double& v : x)
      if (std::fabs(v) < 1e-3) v = 0.5;
  auto loss = [&] {
    activation_forward_scalar<double>(k, x.data(), y.data(), N, F);
    return dot(y, dy);
  };
  Vec dx(N * in_row);
  activation_backward_scalar<double>(k, dy.data(), x.data(), dx.data(), N, F);
  expect_close(dx, numeric_grad(x, loss), "dx");
}

INSTANTIATE_TEST_SUITE_P(All, ActivationGrad,
                         ::testing::Values(Activation::RELU, Activation::GELU,
                                           Activation::GELU_TANH, Activation::GLU,
                                           Activation::GEGLU, Activation::SWIGLU));

// Linear y = x·Wᵀ + b with the backward rules used by ops::linear: dx = dy·W, dW = dyᵀ·x, db = Σ dy.
TEST(GradCheck, LinearThroughReferenceGemm) {
  const int64_t N = 3, in = 5, out = 4;
  Vec x = rand_vec(N * in, 21), W = rand_vec(out * in, 22), b = rand_vec(out, 23), dy = rand_vec(N * out, 24);
  Vec y(N * out);
  auto loss = [&] {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out; ++o) y[n * out + o] = b[o];
    gemm_scalar<double>(false, true, N, out, in, 1.0, x.data(), in, W.data(), in, 1.0, y.data(), out);
    return dot(y, dy);
  };
  Vec dx(N * in), dW(out * in), db(out, 0.0);
  gemm_scalar<double>(false, false, N, in, out, 1.0, dy.data(), out, W.data(), in, 0.0, dx.data(), in);
  gemm_scalar<double>(true, false, out, in, N, 1.0, dy.data(), out, x.data(), in, 0.0, dW.data(), in);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) db[o] += dy[n * out + o];
  expect_close(dx, numeric_grad(x, loss), "dx");
  expect_close(dW, numeric_grad(W, loss), "dW");
  expect_close(db, numeric_grad(b, loss), "db");
}

// Cross-entropy with label smoothing and an ignored row: ℓ = Σ_n loss_n (scale 1 per row).
TEST(GradCheck, CrossEntropyWithSmoothingAndIgnoredRow) {
  const int64_t N = 4, V = 6;
  const int32_t target[N] = {2, -100, 0, 5};
  Vec z = rand_vec(N * V, 31, -3, 3), loss(N), lse(N), scale(N, 1.0);
  for (double eps : {0.0, 0.1}) {
    auto total = [&] {
      cross_entropy_forward_scalar<double>(z.data(), target, loss.data(), lse.data(), N, V, -100, eps);
      double t = 0;
      for (double l : loss) t += l;
      return t;
    };
    total();
    Vec dz(N * V);
    cross_entropy_backward_scalar<double>(z.data(), target, lse.data(), scale.data(), dz.data(), N, V, -100, eps);
    expect_close(dz, numeric_grad(z, total), eps == 0.0 ? "dz" : "dz (smoothing 0.1)");
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dz[V + v], 0.0);  // the ignored row
  }
}

// A hand-checkable case: LayerNorm of [1, 3] (D = 2): μ = 2, var = 1, rstd = 1/√(1+eps) ≈ 1, so with
// w = 1, b = 0 the output is [−1, 1]; dy = [1, 0] gives g = [1, 0], mean(g) = 0.5,
// mean(g·x̂) = −0.5, dx = rstd·(g − 0.5 + x̂·0.5) = [1 − 0.5 − 0.5, 0 − 0.5 + 0.5] = [0, 0].
TEST(GradCheck, LayerNormHandChecked) {
  double x[2] = {1, 3}, w[2] = {1, 1}, y[2], mean, rstd, dy[2] = {1, 0}, dx[2], dw[2] = {0, 0};
  layer_norm_forward_scalar<double>(x, w, nullptr, y, &mean, &rstd, 1, 2, 0.0);
  EXPECT_DOUBLE_EQ(y[0], -1.0);
  EXPECT_DOUBLE_EQ(y[1], 1.0);
  layer_norm_backward_scalar<double>(dy, x, w, dx, dw, nullptr, 1, 2, 0.0);
  EXPECT_NEAR(dx[0], 0.0, 1e-15);
  EXPECT_NEAR(dx[1], 0.0, 1e-15);
  EXPECT_DOUBLE_EQ(dw[0], -1.0);  // dy·x̂ = 1·(−1)
}

}  // namespace
}  // namespace tfm::kernels
