// tests/kernels/rms_norm_test.cc — RMSNorm's kernels (rms_norm.cc, rms_norm_avx512.cc, rms_norm_avx2.cc): the
// SIMD bodies against their scalar twins on sizes that are not multiples of the 16-float vector, the
// dispatchers' choice of body and their thread-count independence, and one hand-checked case. The
// finite-difference check of the backward is in gradcheck_test.cc, the op against float64 in
// tests/ops/rms_norm_test.cc.
//
// Expected agreement, derived:
//   * dw: x̂ = x·rstd uses the same float rstd in both, and the SIMD body performs the same float
//     operations in the same order per element as the twin → bitwise equal.
//   * y and rstd: both compute in double from the same inputs; only the order of Σx² differs. Its
//     terms are all positive, so the two sums differ by at most a relative D·2^-52, and so do r and
//     y = (x·r)·w in double. Rounding to float can then differ by one float ulp (≤ 2^-23·|ref|) plus
//     that double-level difference: tol = (2^-23 + 4·D·2^-52)·|ref|, purely relative — nothing in
//     the forward cancels.
//   * dx = r·(g − x̂·mean(g ⊙ x̂)): only the order of the mean's sum differs, which moves the double
//     result by a few units of 2^-52 relative to the row's largest term; where dx cancels, by that
//     difference itself: tol = 2^-23·|ref| + 64·2^-52·D·scale, scale = r·(|g| + |x̂|·|mean(g ⊙ x̂)|)
//     ≤ r_max·(4 + 4·√D) for inputs in [−2, 2) (|g| ≤ 4, |x̂| ≤ √D, |mean(g ⊙ x̂)| ≤ 4·rms(x̂) ≤ 4).
// The SIMD comparisons run every body the CPU has (AVX-512, AVX2), skipped (with a message) when it has none or
// TFM_FORCE_SCALAR is set; DispatchRunsTheChosenBody then checks that the dispatchers run the twins.
// To add an RMSNorm kernel: a TEST comparing foo_avx512 and foo_avx2 with foo_scalar over kSizes, and its
// tolerance above.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/kernels.h"
#include "kernels/rms_norm_scalar.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using test::kSizes;
using test::rnd;

constexpr float kEps = 1e-5f;

// One float ulp of the reference, 2^-23·|ref_i|, plus `abs_tol` (the derivation above).
::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& ref, double abs_tol,
                                const std::string& what) {
  return testing::close_abs(
      a, ref, [&](int64_t i) { return std::ldexp(std::fabs(double(ref[size_t(i)])), -23) + abs_tol; }, what);
}

// (2^-23 + 4·D·2^-52)·|ref_i|: the forward's relative bound.
::testing::AssertionResult near_rel(const std::vector<float>& a, const std::vector<float>& ref, int64_t D,
                                    const std::string& what) {
  const double rel = std::ldexp(1.0, -23) + 4.0 * double(D) * std::ldexp(1.0, -52);
  return testing::close_abs(a, ref, [&](int64_t i) { return rel * std::fabs(double(ref[size_t(i)])); }, what);
}

TEST(RMSNormKernel, HandChecked) {
  // x = [2, −2, 2, −2], eps 0: mean(x²) = 16/4 = 4, rstd = 1/√4 = 0.5, x̂ = x·rstd = [1, −1, 1, −1];
  // w = [1, 2, 3, 4]: y = x̂ ⊙ w = [1, −2, 3, −4].
  // Backward, dy = [1, 0, 0, 1]: g = dy ⊙ w = [1, 0, 0, 4], g ⊙ x̂ = [1, 0, 0, −4], mean = −3/4;
  // dx = 0.5·(g − x̂·(−3/4)) = 0.5·([1, 0, 0, 4] + [0.75, −0.75, 0.75, −0.75])
  //    = 0.5·[1.75, −0.75, 0.75, 3.25] = [0.875, −0.375, 0.375, 1.625];
  // dw = dy ⊙ x̂ = [1, 0, 0, −1]. Every step is exact in binary, so the results are too.
  const float x[4] = {2, -2, 2, -2}, w[4] = {1, 2, 3, 4}, dy[4] = {1, 0, 0, 1};
  float y[4], rstd, dx[4], dw[4] = {0, 0, 0, 0};
  rms_norm_forward(x, w, y, &rstd, 1, 4, 0.0f);
  EXPECT_EQ(rstd, 0.5f);
  const float y_ref[4] = {1, -2, 3, -4};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], y_ref[i]) << i;
  rms_norm_backward(dy, x, w, &rstd, dx, dw, 1, 4);
  const float dx_ref[4] = {0.875f, -0.375f, 0.375f, 1.625f}, dw_ref[4] = {1, 0, 0, -1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(dx[i], dx_ref[i]) << i;
    EXPECT_EQ(dw[i], dw_ref[i]) << i;
  }
  // dw accumulates, dx is overwritten: a second backward doubles dw and leaves dx as it was.
  rms_norm_backward(dy, x, w, &rstd, dx, dw, 1, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(dx[i], dx_ref[i]) << i;
    EXPECT_EQ(dw[i], 2 * dw_ref[i]) << i;
  }
}

// The SIMD bodies this CPU runs, each with its name.
template <class Body>
std::vector<std::pair<std::string, Body>> simd_bodies(Body avx512, Body avx2) {
  std::vector<std::pair<std::string, Body>> b;
  if (cpu_has_avx512()) b.push_back({"avx512", avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", avx2});
  return b;
}
using ForwardBody = void (*)(const float*, const float*, float*, float*, int64_t, int64_t, float);
using BackwardBody = void (*)(const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t);

TEST(RMSNormKernel, ForwardMatchesScalar) {
  const auto bodies = simd_bodies<ForwardBody>(rms_norm_forward_avx512, rms_norm_forward_avx2);
  if (bodies.empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  const int64_t N = 5;
  for (const auto& [name, body] : bodies)
    for (int64_t D : kSizes) {
      auto x = rnd(N * D, 1 + D), w = rnd(D, 2 + D);
      std::vector<float> y1(N * D), y2(N * D), r1(N), r2(N);
      body(x.data(), w.data(), y1.data(), r1.data(), N, D, kEps);
      rms_norm_forward_scalar(x.data(), w.data(), y2.data(), r2.data(), N, D, kEps);
      EXPECT_TRUE(near_rel(y1, y2, D, name + " y D=" + std::to_string(D)));
      EXPECT_TRUE(near_rel(r1, r2, D, name + " rstd D=" + std::to_string(D)));
      // In place (y aliases x), without rstd: the same bits as out of place.
      std::vector<float> xi(x);
      body(xi.data(), w.data(), xi.data(), nullptr, N, D, kEps);
      EXPECT_TRUE(bitwise_equal(xi, y1, name + " in place D=" + std::to_string(D)));
    }
}

TEST(RMSNormKernel, BackwardMatchesScalar) {
  const auto bodies = simd_bodies<BackwardBody>(rms_norm_backward_avx512, rms_norm_backward_avx2);
  if (bodies.empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  const int64_t N = 4;
  for (const auto& [name, body] : bodies)
    for (int64_t D : kSizes) {
      auto x = rnd(N * D, 10 + D), w = rnd(D, 11 + D), dy = rnd(N * D, 12 + D);
      std::vector<float> rstd(N), y(N * D);
      rms_norm_forward_scalar(x.data(), w.data(), y.data(), rstd.data(), N, D, kEps);
      std::vector<float> dx1(N * D), dx2(N * D), dw1 = rnd(D, 13), dw2 = dw1;  // dw accumulates onto these
      body(dy.data(), x.data(), w.data(), rstd.data(), dx1.data(), dw1.data(), N, D);
      rms_norm_backward_scalar(dy.data(), x.data(), w.data(), rstd.data(), dx2.data(), dw2.data(), N, D);
      double rmax = 0;
      for (float r : rstd) rmax = std::max(rmax, double(r));
      const double scale = rmax * (4.0 + 4.0 * std::sqrt(double(D)));
      EXPECT_TRUE(near(dx1, dx2, 64.0 * std::ldexp(1.0, -52) * double(D) * scale, name + " dx D=" + std::to_string(D)));
      EXPECT_TRUE(bitwise_equal(dw1, dw2, name + " dw D=" + std::to_string(D)));
      // dx may alias dy: the same bits.
      std::vector<float> dyi(dy), dwi = rnd(D, 13);
      body(dyi.data(), x.data(), w.data(), rstd.data(), dyi.data(), dwi.data(), N, D);
      EXPECT_TRUE(bitwise_equal(dyi, dx1, name + " dx in place D=" + std::to_string(D)));
    }
}

// The dispatchers run the AVX-512 bodies when cpu_has_avx512(), else the AVX2 ones when cpu_has_avx2(), and the
// scalar twins otherwise (TFM_FORCE_SCALAR=1, or neither): bitwise the body they chose. N ≤ 64 keeps the backward in
// one chunk, where it accumulates into dw directly as the body does.
TEST(RMSNormKernel, DispatchRunsTheChosenBody) {
  const int64_t N = 50, D = 37;
  auto x = rnd(N * D, 20), w = rnd(D, 21), dy = rnd(N * D, 22);
  std::vector<float> y1(N * D), y2(N * D), r1(N), r2(N), dx1(N * D), dx2(N * D), dw1(D, 0.f), dw2(D, 0.f);
  rms_norm_forward(x.data(), w.data(), y1.data(), r1.data(), N, D, kEps);
  rms_norm_backward(dy.data(), x.data(), w.data(), r1.data(), dx1.data(), dw1.data(), N, D);
  if (cpu_has_avx512()) {
    rms_norm_forward_avx512(x.data(), w.data(), y2.data(), r2.data(), N, D, kEps);
    rms_norm_backward_avx512(dy.data(), x.data(), w.data(), r1.data(), dx2.data(), dw2.data(), N, D);
  } else if (cpu_has_avx2()) {
    rms_norm_forward_avx2(x.data(), w.data(), y2.data(), r2.data(), N, D, kEps);
    rms_norm_backward_avx2(dy.data(), x.data(), w.data(), r1.data(), dx2.data(), dw2.data(), N, D);
  } else {
    rms_norm_forward_scalar(x.data(), w.data(), y2.data(), r2.data(), N, D, kEps);
    rms_norm_backward_scalar(dy.data(), x.data(), w.data(), r1.data(), dx2.data(), dw2.data(), N, D);
  }
  EXPECT_TRUE(bitwise_equal(y1, y2, "y"));
  EXPECT_TRUE(bitwise_equal(r1, r2, "rstd"));
  EXPECT_TRUE(bitwise_equal(dx1, dx2, "dx"));
  EXPECT_TRUE(bitwise_equal(dw1, dw2, "dw"));
}

TEST(RMSNormKernel, DispatchersBitwiseAcrossThreadCounts) {
  const int64_t N = 300, D = 515, n = N * D;  // 5 chunks of rows, parallel above 32768 elements
  auto x = rnd(n, 60), w = rnd(D, 62), dy = rnd(n, 64);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> y(n), rstd(N), dx(n), dw(D, 0.f);
    rms_norm_forward(x.data(), w.data(), y.data(), rstd.data(), N, D, kEps);
    rms_norm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, D);
    std::vector<float> out;
    for (const auto* v : {&y, &rstd, &dx, &dw}) out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  const int saved = omp_get_max_threads();
  auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(one, two, "1 vs 2 threads"));
  EXPECT_TRUE(bitwise_equal(one, three, "1 vs 3 threads"));
}

}  // namespace
}  // namespace tfm::kernels
