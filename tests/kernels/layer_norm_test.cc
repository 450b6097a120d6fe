// tests/kernels/layer_norm_test.cc — LayerNorm's kernels (layer_norm.cc, layer_norm_avx512.cc,
// layer_norm_avx2.cc): the SIMD bodies against their scalar twins on sizes that are not multiples of the 16-float
// vector, the backward's accuracy when eps dominates the variance, the fused residual add + LayerNorm, the dispatchers'
// thread-count independence, the backward's accumulate_dx mode (bitwise the overwrite followed by a float add, in every
// body and in the dispatcher at 1 and 2 threads) and one hand-checked case. The finite-difference check of the backward
// is in gradcheck_test.cc.
//
// Expected agreement, derived:
//   * db: the SIMD body performs the same float adds of dy in the same order per element as the
//     twin → bitwise equal.
//   * dw: the same float operation, dw += float(dy·x̂), but each body's x̂ comes from its own μ and
//     rstd (recomputed from x, the sums in a different order), which can differ in the last bits of a
//     double. float(dy·x̂) then differs only where the double product lies within that difference of
//     a rounding boundary between two floats — rare, not impossible. BackwardMatchesScalar asserts
//     equal bits on its fixed inputs; other inputs may move dw by an ulp of one row's term.
//   * y and dx: both compute in double from the same inputs; only the order of the moment sums
//     (μ, var, mean(g), mean(g·x̂)) differs, which moves the double results by a few units of 2^-52
//     relative to the row's magnitudes. Rounding to float can then differ by one float ulp of the
//     result (≤ 2^-23·|ref|), and where the result cancels (y ≈ 0, dx ≈ 0) by the double-level
//     difference itself: tol = 2^-23·|ref| + 64·2^-52·D·scale, scale = the row's largest term.
// The SIMD comparisons run every body the CPU has (AVX-512, AVX2), skipped (with a message) when it has none.
// To add a LayerNorm kernel: a TEST comparing foo_avx512 and foo_avx2 with foo_scalar over kSizes, and its
// tolerance above.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm_scalar.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using test::kSizes;
using test::rnd;

// The tolerance derived above, element by element: one float ulp of the reference, 2^-23·|ref_i|,
// plus the absolute term `abs_tol`.
::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& ref, double abs_tol) {
  return testing::close_abs(a, ref,
                            [&](int64_t i) { return std::ldexp(std::fabs(double(ref[size_t(i)])), -23) + abs_tol; });
}

TEST(LayerNormKernel, HandChecked) {
  // x = [1, 2, 3, 4]: μ = 2.5, var = (2.25 + 0.25 + 0.25 + 2.25)/4 = 1.25, rstd = 1/√(1.25 + 0) (eps 0)
  // y = (x − 2.5)/√1.25 = [−1.341641, −0.447214, 0.447214, 1.341641], w = 1, b = 0.
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1};
  float y[4], mean, rstd;
  layer_norm_forward(x, w, nullptr, y, &mean, &rstd, 1, 4, 0.0f);
  EXPECT_FLOAT_EQ(mean, 2.5f);
  EXPECT_FLOAT_EQ(rstd, static_cast<float>(1.0 / std::sqrt(1.25)));
  EXPECT_NEAR(y[0], -1.3416408f, 1e-6f);
  EXPECT_NEAR(y[3], 1.3416408f, 1e-6f);
}

using ForwardBody = void (*)(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t, float);
using BackwardBody = void (*)(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t, float,
                              bool);
// The SIMD bodies this CPU runs, each with its name.
template <class Body>
std::vector<std::pair<const char*, Body>> simd_bodies(Body avx512, Body avx2) {
  std::vector<std::pair<const char*, Body>> b;
  if (cpu_has_avx512()) b.push_back({"avx512", avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", avx2});
  return b;
}

TEST(LayerNormKernel, ForwardMatchesScalar) {
  const auto bodies = simd_bodies<ForwardBody>(layer_norm_forward_avx512, layer_norm_forward_avx2);
  if (bodies.empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  const int64_t N = 5;
  for (const auto& [name, body] : bodies)
    for (int64_t D : kSizes) {
      auto x = rnd(N * D, 1 + D), w = rnd(D, 2 + D), b = rnd(D, 3 + D);
      for (int64_t i = 0; i < N * D; ++i) x[i] += 3.0f;  // a mean far from 0 exercises the two-pass variance
      std::vector<float> y1(N * D), y2(N * D), m1(N), m2(N), r1(N), r2(N);
      body(x.data(), w.data(), b.data(), y1.data(), m1.data(), r1.data(), N, D, 1e-5f);
      layer_norm_forward_scalar(x.data(), w.data(), b.data(), y2.data(), m2.data(), r2.data(), N, D, 1e-5f);
      // scale: |x̂|·|w| + |b| ≤ √D·2 + 2 for these inputs (|x̂| ≤ √D).
      const double abs_tol = 64.0 * std::ldexp(1.0, -52) * double(D) * (2.0 * std::sqrt(double(D)) + 2.0);
      EXPECT_TRUE(near(y1, y2, abs_tol)) << name << " D=" << D;
      EXPECT_TRUE(near(m1, m2, 8.0 * std::ldexp(1.0, -52) * double(D) * 5.0)) << name << " mean D=" << D;
      EXPECT_TRUE(near(r1, r2, 0.0)) << name << " rstd D=" << D;
      // No bias: same formula with b = 0.
      body(x.data(), w.data(), nullptr, y1.data(), nullptr, nullptr, N, D, 1e-5f);
      layer_norm_forward_scalar(x.data(), w.data(), nullptr, y2.data(), nullptr, nullptr, N, D, 1e-5f);
      EXPECT_TRUE(near(y1, y2, abs_tol)) << name << " no bias, D=" << D;
    }
}

TEST(LayerNormKernel, BackwardMatchesScalar) {
  const auto bodies = simd_bodies<BackwardBody>(layer_norm_backward_avx512, layer_norm_backward_avx2);
  if (bodies.empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  const int64_t N = 4;
  for (const auto& [name, body] : bodies)
    for (int64_t D : kSizes) {
      auto x = rnd(N * D, 10 + D), w = rnd(D, 11 + D), dy = rnd(N * D, 12 + D);
      std::vector<float> mean(N), rstd(N), y(N * D);
      layer_norm_forward_scalar(x.data(), w.data(), nullptr, y.data(), mean.data(), rstd.data(), N, D, 1e-5f);
      std::vector<float> dx1(N * D), dx2(N * D), dw1 = rnd(D, 13), dw2 = dw1, db1 = rnd(D, 14), db2 = db1;
      body(dy.data(), x.data(), w.data(), dx1.data(), dw1.data(), db1.data(), N, D, 1e-5f, false);
      layer_norm_backward_scalar(dy.data(), x.data(), w.data(), dx2.data(), dw2.data(), db2.data(), N, D, 1e-5f);
      double rmax = 0;
      for (float r : rstd) rmax = std::max(rmax, double(r));
      // scale: rstd·(|g| + |mean g| + |x̂|·|mean g x̂|) with |g| ≤ 4, |x̂| ≤ √D.
      const double scale = rmax * (8.0 + 4.0 * double(D));
      EXPECT_TRUE(near(dx1, dx2, 64.0 * std::ldexp(1.0, -52) * double(D) * scale)) << name << " dx D=" << D;
      EXPECT_TRUE(bitwise_equal(dw1, dw2)) << name << " dw D=" << D;
      EXPECT_TRUE(bitwise_equal(db1, db2)) << name << " db D=" << D;
    }
}

// When eps is not negligible against the variance the backward cancels: for D = 2,
// dx = rstd·(g₁ − g₂)/2 · eps·rstd² per element, a thousandth of its terms at var 1, eps 1e-3. The
// kernels recompute μ and rstd in double, so dx (both the dispatcher and the scalar twin) stays within
// float rounding of the double reference; with rstd taken from the forward's float output it would be
// off by up to (var + eps)/eps float roundings, enough to fail parity at D = 2, eps 1e-3.
TEST(LayerNormKernel, BackwardAccurateWhenEpsDominates) {
  const int64_t N = 64;
  for (int64_t D : {2, 3, 64}) {
    for (float eps : {1e-3f, 1e-5f}) {
      auto x = rnd(N * D, 70 + D), w = rnd(D, 71 + D), dy = rnd(N * D, 72 + D);
      std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
      std::vector<double> dxd(N * D), dwd(D, 0.0);
      layer_norm_backward_scalar<double>(dyd.data(), xd.data(), wd.data(), dxd.data(), dwd.data(), nullptr, N,
                                         D, double(eps));
      std::vector<float> ref_f(dxd.begin(), dxd.end());  // the double result rounded once
      double scale = 0;  // the largest term of the formula, for the double evaluation's own error
      for (int64_t i = 0; i < N * D; ++i) scale = std::max(scale, 4.0 * std::fabs(double(dy[i])) / std::sqrt(eps));
      for (int forced : {0, 1}) {
        std::vector<float> dx(N * D), dw(D, 0.f);
        if (forced)
          layer_norm_backward_scalar(dy.data(), x.data(), w.data(), dx.data(), dw.data(), nullptr, N, D, eps);
        else
          layer_norm_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), nullptr, N, D, eps);
        EXPECT_TRUE(near(dx, ref_f, 1e-12 * double(D) * scale)) << "D=" << D << " eps=" << eps << " scalar=" << forced;
      }
    }
  }
}

TEST(LayerNormKernel, AddLayerNormEqualsAddThenLayerNorm) {
  const int64_t N = 130, D = 37;
  auto x = rnd(N * D, 50), r = rnd(N * D, 51), w = rnd(D, 52), b = rnd(D, 53);
  std::vector<float> z(N * D), y1(N * D), y2(N * D), sum(N * D), m1(N), m2(N), s1(N), s2(N);
  add_layer_norm_forward(x.data(), r.data(), w.data(), b.data(), z.data(), y1.data(), m1.data(), s1.data(), N, D,
                         1e-5f);
  add_forward(x.data(), r.data(), sum.data(), N * D);
  layer_norm_forward(sum.data(), w.data(), b.data(), y2.data(), m2.data(), s2.data(), N, D, 1e-5f);
  EXPECT_TRUE(bitwise_equal(z, sum));
  EXPECT_TRUE(bitwise_equal(y1, y2));
  EXPECT_TRUE(bitwise_equal(m1, m2));
  // In place (y aliases x, no z): same bits.
  std::vector<float> xi(x);
  add_layer_norm_forward(xi.data(), r.data(), w.data(), b.data(), nullptr, xi.data(), nullptr, nullptr, N, D, 1e-5f);
  EXPECT_TRUE(bitwise_equal(xi, y2));
  // The scalar twin agrees within the LayerNorm tolerance derived above.
  std::vector<float> y3(N * D);
  add_layer_norm_forward_scalar(x.data(), r.data(), w.data(), b.data(), nullptr, y3.data(), nullptr, nullptr, N, D,
                                1e-5f);
  EXPECT_TRUE(near(y1, y3, 64.0 * std::ldexp(1.0, -52) * double(D) * (2.0 * std::sqrt(double(D)) + 2.0)));
}

// accumulate_dx: dx += the value the overwrite would store, one float add per element — bitwise
// add_forward(dx, overwritten dx), whichever body runs (the AVX-512 body, the scalar twin, the
// dispatcher over row chunks at 1 and 2 threads), on D not a multiple of 16 and N over several chunks.
TEST(LayerNormKernel, BackwardAccumulateIsOverwriteThenAdd) {
  std::vector<std::pair<const char*, BackwardBody>> bodies = {{"scalar", layer_norm_backward_scalar},
                                                              {"dispatcher", layer_norm_backward}};
  for (const auto& b : simd_bodies<BackwardBody>(layer_norm_backward_avx512, layer_norm_backward_avx2))
    bodies.push_back(b);
  const int saved = omp_get_max_threads();
  for (const int64_t N : {int64_t{3}, int64_t{200}})
    for (const int64_t D : {int64_t{7}, int64_t{130}})
      for (const auto& [name, body] : bodies)
        for (const int threads : {1, 2}) {
          omp_set_num_threads(threads);
          auto x = rnd(N * D, 70 + D), w = rnd(D, 71 + D), dy = rnd(N * D, 72 + D), slot = rnd(N * D, 73 + D);
          std::vector<float> dz(N * D), dw1(D, 0.f), db1(D, 0.f), dw2(D, 0.f), db2(D, 0.f);
          body(dy.data(), x.data(), w.data(), dz.data(), dw1.data(), db1.data(), N, D, 1e-5f, false);
          std::vector<float> expected(N * D), acc = slot;
          for (int64_t i = 0; i < N * D; ++i) expected[i] = slot[i] + dz[i];
          body(dy.data(), x.data(), w.data(), acc.data(), dw2.data(), db2.data(), N, D, 1e-5f, true);
          EXPECT_TRUE(bitwise_equal(acc, expected)) << name << " N=" << N << " D=" << D << " threads=" << threads;
          EXPECT_TRUE(bitwise_equal(dw1, dw2)) << name << " dw N=" << N << " D=" << D;
          EXPECT_TRUE(bitwise_equal(db1, db2)) << name << " db N=" << N << " D=" << D;
        }
  omp_set_num_threads(saved);
}

TEST(LayerNormKernel, DispatchersBitwiseAcrossThreadCounts) {
  const int64_t N = 300, D = 515, n = N * D;
  auto x = rnd(n, 60), w = rnd(D, 62), b = rnd(D, 63), dy = rnd(n, 64);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out;
    std::vector<float> y(n), mean(N), rstd(N), dx(n), dw(D, 0.f), db(D, 0.f);
    layer_norm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, D, 1e-5f);
    layer_norm_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), N, D, 1e-5f);
    out.insert(out.end(), y.begin(), y.end());
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), dw.begin(), dw.end());
    out.insert(out.end(), db.begin(), db.end());
    return out;
  };
  const int saved = omp_get_max_threads();
  auto one = run(1), two = run(2);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(one, two));
}

}  // namespace
}  // namespace tfm::kernels
