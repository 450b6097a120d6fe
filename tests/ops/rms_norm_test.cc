// tests/ops/rms_norm_test.cc — ops::rms_norm (src/ops/rms_norm.cc), forward and backward, against the
// formula evaluated in float64 on the same float inputs: y = x·r·w, r = 1/sqrt(mean(x²) + eps),
// dx = r·g − r³·x·mean(g ⊙ x) with g = dy ⊙ w, dw = Σ_rows dy ⊙ x·r. PyTorch 1.13 has no RMSNorm, so
// the reference is written here (reference() below), in the expanded form rather than the kernel's
// r·(g − x̂·mean(g ⊙ x̂)). The rule itself is checked by finite differences in
// tests/kernels/gradcheck_test.cc; the kernels' SIMD bodies against their twins in
// tests/kernels/rms_norm_test.cc.
//
// Tolerances, derived (elementwise; δ = 2^-24, float's unit roundoff):
//   * y: the kernel evaluates the formula in double (relative error ≲ (D + 3)·2^-53, below 1e-13
//     here) and rounds once: |y − ref| ≤ δ·|ref| + that. tol = 2δ·|ref|.
//   * dx: the backward uses the forward's float rstd r_f = r·(1 + ε), |ε| ≤ δ. Then
//     r_f·g − r_f³·x·m (m = mean(g ⊙ x)) is off by ε·r·g − 3ε·r³·x·m to first order, i.e. by at most
//     δ·r·(|g| + 3·|x̂|·|mean(g ⊙ x̂)|), and the result is rounded once more (δ·|ref|).
//     tol = 2δ·(|ref| + r·(|g| + 3·|x̂|·|mean(g ⊙ x̂)|)), twice the first-order bound. This holds
//     where dx cancels too (D = 1: dx = r·g·eps/(x² + eps), far below its terms), which the D = 1
//     case checks.
//   * dw: each row's term dy·x·r_f is rounded to float (relative 2δ with r_f's error), then N terms
//     are summed in float (chunk partials, then the partials in chunk order): at most
//     (N − 1)·δ·Σ|terms| on top. tol = (N + 2)·δ·Σ_rows |dy ⊙ x̂|.
// To add a case: another shape or eps in the loop of MatchesFloat64Reference.
#include "tfm/ops/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::close_abs;
using tfm::testing::random_tensor;
using tfm::testing::values;

// The float64 reference and the per-element tolerances derived above.
struct Reference {
  std::vector<double> y, dx, dw;
  std::vector<double> y_tol, dx_tol, dw_tol;
};

Reference reference(const Tensor& x, const Tensor& w, const Tensor& dy, double eps) {
  const int64_t D = w.numel(), N = x.numel() / D;
  const float* xp = x.data();
  const float* wp = w.data();
  const float* gp = dy.data();
  const double delta = std::ldexp(1.0, -24);
  Reference ref;
  ref.y.resize(size_t(N * D));
  ref.dx.resize(size_t(N * D));
  ref.y_tol.resize(size_t(N * D));
  ref.dx_tol.resize(size_t(N * D));
  ref.dw.assign(size_t(D), 0.0);
  std::vector<double> dw_abs(size_t(D), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xp + n * D;
    const float* dyr = gp + n * D;
    double ss = 0, m = 0;  // Σx², mean(g ⊙ x)
    for (int64_t d = 0; d < D; ++d) {
      ss += double(xr[d]) * double(xr[d]);
      m += double(dyr[d]) * double(wp[d]) * double(xr[d]);
    }
    m /= double(D);
    const double r = 1.0 / std::sqrt(ss / double(D) + eps);
    const double mgx = r * m;  // mean(g ⊙ x̂)
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(n * D + d);
      const double g = double(dyr[d]) * double(wp[d]);
      ref.y[i] = double(xr[d]) * r * double(wp[d]);
      ref.dx[i] = r * g - r * r * r * double(xr[d]) * m;
      ref.dw[size_t(d)] += double(dyr[d]) * double(xr[d]) * r;
      dw_abs[size_t(d)] += std::fabs(double(dyr[d]) * double(xr[d]) * r);
      ref.y_tol[i] = 2 * delta * std::fabs(ref.y[i]);
      const double xh = std::fabs(double(xr[d]) * r);
      ref.dx_tol[i] = 2 * delta * (std::fabs(ref.dx[i]) + r * (std::fabs(g) + 3 * xh * std::fabs(mgx)));
    }
  }
  for (int64_t d = 0; d < D; ++d) ref.dw_tol.push_back(double(N + 2) * delta * dw_abs[size_t(d)]);
  return ref;
}

TEST(RMSNorm, MatchesFloat64Reference) {
  uint64_t seed = 100;
  for (Shape shape : {Shape{3, 5, 7}, Shape{130, 1}, Shape{2, 70, 16}, Shape{4, 2}, Shape{3, 64, 515}}) {
    for (float eps : {1e-5f, 1e-3f}) {
      const int64_t D = shape.back();
      const std::string where = shape_str(shape) + " eps " + std::to_string(eps);
      Tensor x = random_tensor(shape, seed++, -2.0f, 2.0f).requires_grad_(true);
      Tensor w = random_tensor({D}, seed++, -2.0f, 2.0f).requires_grad_(true);
      Tensor dy = random_tensor(shape, seed++, -2.0f, 2.0f);
      Tensor y = rms_norm(x, w, eps);
      y.backward(dy);
      const Reference ref = reference(x, w, dy, double(eps));
      EXPECT_TRUE(close_abs(values(y), ref.y, ref.y_tol, "y " + where, shape));
      EXPECT_TRUE(close_abs(values(x.grad()), ref.dx, ref.dx_tol, "dx " + where, shape));
      EXPECT_TRUE(close_abs(values(w.grad()), ref.dw, ref.dw_tol, "dw " + where));
    }
  }
}

// The gradient of one input does not depend on whether the other needs one.
TEST(RMSNorm, GradientsOfEitherInputAlone) {
  const Shape shape{5, 33};
  Tensor x = random_tensor(shape, 1).requires_grad_(true), w = random_tensor({33}, 2).requires_grad_(true);
  Tensor dy = random_tensor(shape, 3);
  rms_norm(x, w, 1e-5f).backward(dy);
  Tensor x_only = random_tensor(shape, 1).requires_grad_(true), w_only = random_tensor({33}, 2).requires_grad_(true);
  rms_norm(x_only, random_tensor({33}, 2), 1e-5f).backward(dy);
  rms_norm(random_tensor(shape, 1), w_only, 1e-5f).backward(dy);
  EXPECT_TRUE(bitwise_equal(x_only.grad(), x.grad(), "dx"));
  EXPECT_TRUE(bitwise_equal(w_only.grad(), w.grad(), "dw"));
}

// Without an input that requires grad, or under NoGradGuard, nothing is recorded; the values are the
// same bits either way.
TEST(RMSNorm, RecordsNothingWithoutGrad) {
  Tensor x = random_tensor({4, 9}, 5), w = random_tensor({9}, 6);
  Tensor y = rms_norm(x, w, 1e-5f);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  Tensor wg = random_tensor({9}, 6).requires_grad_(true);
  Tensor y_tape = rms_norm(x, wg, 1e-5f);
  ASSERT_NE(y_tape.grad_fn(), nullptr);
  EXPECT_STREQ(y_tape.grad_fn()->name(), "rms_norm");
  EXPECT_TRUE(bitwise_equal(y, y_tape, "y"));
  NoGradGuard guard;
  EXPECT_EQ(rms_norm(x, wg, 1e-5f).grad_fn(), nullptr);
}

TEST(RMSNorm, ArgumentErrorsNameTheTensor) {
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no exception; expected one containing '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({8}, 2);
  expect_error([&] { rms_norm(x, random_tensor({7}, 3), 1e-5f); }, "rms_norm: input");
  EXPECT_NO_THROW(rms_norm(x, random_tensor({8}, 3), 1e-5f));  // the control: the same call, a matching weight
  expect_error([&] { rms_norm(x, random_tensor({2, 8}, 3), 1e-5f); }, "normalized shape (16,)");
  expect_error([&] { rms_norm(Tensor(), w, 1e-5f); }, "rms_norm: input is undefined");
  expect_error([&] { rms_norm(x, Tensor(), 1e-5f); }, "rms_norm: weight is undefined");
}

}  // namespace
}  // namespace tfm::ops
