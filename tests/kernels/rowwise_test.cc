// tests/kernels/rowwise_test.cc — the AVX-512 row-wise / element-wise kernels (rowwise_avx512.cc)
// against their scalar twins, on sizes that are not multiples of the 16-float vector, plus the
// dispatching entry points' thread-count independence and one hand-checked LayerNorm.
//
// Expected agreement, derived per kernel:
//   * add, dropout, relu forward/backward, bias_grad, LayerNorm dw/db: the SIMD body performs the same
//     float operations in the same order per element as the twin → bitwise equal.
//   * LayerNorm y and dx: both compute in double from the same inputs; only the order of the moment
//     sums (μ, var, mean(g), mean(g·x̂)) differs, which moves the double results by a few units of
//     2^-52 relative to the row's magnitudes. Rounding to float can then differ by one float ulp of the
//     result (≤ 2^-23·|ref|), and where the result cancels (y ≈ 0, dx ≈ 0) by the double-level
//     difference itself: tol = 2^-23·|ref| + 64·2^-52·D·scale, scale = the row's largest term.
// Skipped (with a message) when the CPU has no AVX-512.
// To add a kernel: a TEST comparing avx512::foo with foo_scalar over kSizes, and its tolerance above.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/rowwise.h"
#include "kernels/rowwise_scalar.h"

namespace tfm::kernels {
namespace {

// Widths around the vector size: below, equal, above, and a transformer width plus a remainder.
const int64_t kSizes[] = {1, 7, 15, 16, 17, 33, 100, 515};

std::vector<float> rnd(int64_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (auto& x : v) x = u(g);
  return v;
}

#define SKIP_WITHOUT_AVX512() \
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or TFM_FORCE_SCALAR set)"

::testing::AssertionResult bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "index " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& ref, double abs_tol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = std::ldexp(std::fabs(double(ref[i])), -23) + abs_tol;
    const double err = std::fabs(double(a[i]) - double(ref[i]));
    worst = std::max(worst, err);
    if (!(err <= tol))
      return ::testing::AssertionFailure()
             << "index " << i << ": " << a[i] << " vs " << ref[i] << " (err " << err << ", tol " << tol << ")";
  }
  return ::testing::AssertionSuccess() << "max err " << worst;
}

TEST(Rowwise, LayerNormHandChecked) {
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

TEST(Rowwise, LayerNormForwardMatchesScalar) {
  SKIP_WITHOUT_AVX512();
  const int64_t N = 5;
  for (int64_t D : kSizes) {
    auto x = rnd(N * D, 1 + D), w = rnd(D, 2 + D), b = rnd(D, 3 + D);
    for (int64_t i = 0; i < N * D; ++i) x[i] += 3.0f;  // a mean far from 0 exercises the two-pass variance
    std::vector<float> y1(N * D), y2(N * D), m1(N), m2(N), r1(N), r2(N);
    avx512::layer_norm_forward(x.data(), w.data(), b.data(), y1.data(), m1.data(), r1.data(), N, D, 1e-5f);
    layer_norm_forward_scalar(x.data(), w.data(), b.data(), y2.data(), m2.data(), r2.data(), N, D, 1e-5f);
    // scale: |x̂|·|w| + |b| ≤ √D·2 + 2 for these inputs (|x̂| ≤ √D).
    const double abs_tol = 64.0 * std::ldexp(1.0, -52) * double(D) * (2.0 * std::sqrt(double(D)) + 2.0);
    EXPECT_TRUE(near(y1, y2, abs_tol)) << "D=" << D;
    EXPECT_TRUE(near(m1, m2, 8.0 * std::ldexp(1.0, -52) * double(D) * 5.0)) << "mean D=" << D;
    EXPECT_TRUE(near(r1, r2, 0.0)) << "rstd D=" << D;
    // No bias: same formula with b = 0.
    avx512::layer_norm_forward(x.data(), w.data(), nullptr, y1.data(), nullptr, nullptr, N, D, 1e-5f);
    layer_norm_forward_scalar(x.data(), w.data(), nullptr, y2.data(), nullptr, nullptr, N, D, 1e-5f);
    EXPECT_TRUE(near(y1, y2, abs_tol)) << "no bias, D=" << D;
  }
}

TEST(Rowwise, LayerNormBackwardMatchesScalar) {
  SKIP_WITHOUT_AVX512();
  const int64_t N = 4;
  for (int64_t D : kSizes) {
    auto x = rnd(N * D, 10 + D), w = rnd(D, 11 + D), dy = rnd(N * D, 12 + D);
    std::vector<float> mean(N), rstd(N), y(N * D);
    layer_norm_forward_scalar(x.data(), w.data(), nullptr, y.data(), mean.data(), rstd.data(), N, D, 1e-5f);
    std::vector<float> dx1(N * D), dx2(N * D), dw1 = rnd(D, 13), dw2 = dw1, db1 = rnd(D, 14), db2 = db1;
    avx512::layer_norm_backward(dy.data(), x.data(), w.data(), dx1.data(), dw1.data(), db1.data(), N, D, 1e-5f);
    layer_norm_backward_scalar(dy.data(), x.data(), w.data(), dx2.data(), dw2.data(), db2.data(), N, D, 1e-5f);
    double rmax = 0;
    for (float r : rstd) rmax = std::max(rmax, double(r));
    // scale: rstd·(|g| + |mean g| + |x̂|·|mean g x̂|) with |g| ≤ 4, |x̂| ≤ √D.
    const double scale = rmax * (8.0 + 4.0 * double(D));
    EXPECT_TRUE(near(dx1, dx2, 64.0 * std::ldexp(1.0, -52) * double(D) * scale)) << "dx D=" << D;
    EXPECT_TRUE(bitwise(dw1, dw2)) << "dw D=" << D;
    EXPECT_TRUE(bitwise(db1, db2)) << "db D=" << D;
  }
}

// When eps is not negligible against the variance the backward cancels: for D = 2,
// dx = rstd·(g₁ − g₂)/2 · eps·rstd² per element, a thousandth of its terms at var 1, eps 1e-3. The
// kernels recompute μ and rstd in double, so dx (both the dispatcher and the scalar twin) stays within
// float rounding of the double reference; with rstd taken from the forward's float output it was off
// by up to (var + eps)/eps float roundings (a live parity sample caught it at D = 2, eps 1e-3).
TEST(Rowwise, LayerNormBackwardAccurateWhenEpsDominates) {
  const int64_t N = 64;
  for (int64_t D : {2, 3, 64}) {
    for (float eps : {1e-3f, 1e-5f}) {
      auto x = rnd(N * D, 70 + D), w = rnd(D, 71 + D), dy = rnd(N * D, 72 + D);
      std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
      std::vector<double> dxd(N * D), dwd(D, 0.0);
      ref::layer_norm_backward<double>(dyd.data(), xd.data(), wd.data(), dxd.data(), dwd.data(), nullptr, N, D,
                                       double(eps));
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

TEST(Rowwise, ReluBiasForwardAndBackwardBitwise) {
  SKIP_WITHOUT_AVX512();
  const int64_t N = 3;
  for (int64_t F : kSizes) {
    auto x = rnd(N * F, 20 + F), b = rnd(F, 21 + F), dy = rnd(N * F, 22 + F);
    x[0] = -0.0f;  // relu(−0) = +0 in both
    std::vector<float> y1(N * F), y2(N * F);
    ASSERT_TRUE(avx512::bias_activation_forward(ActivationKind::ACT_RELU, x.data(), b.data(), y1.data(), N, F));
    bias_activation_forward_scalar(ActivationKind::ACT_RELU, x.data(), b.data(), y2.data(), N, F);
    EXPECT_TRUE(bitwise(y1, y2)) << "bias+relu F=" << F;
    ASSERT_TRUE(avx512::bias_activation_forward(ActivationKind::ACT_RELU, x.data(), nullptr, y1.data(), N, F));
    activation_forward_scalar(ActivationKind::ACT_RELU, x.data(), y2.data(), N, F);
    EXPECT_TRUE(bitwise(y1, y2)) << "relu F=" << F;
    std::vector<float> d1(N * F), d2(N * F);
    ASSERT_TRUE(avx512::activation_backward(ActivationKind::ACT_RELU, dy.data(), x.data(), d1.data(), N, F));
    activation_backward_scalar(ActivationKind::ACT_RELU, dy.data(), x.data(), d2.data(), N, F);
    EXPECT_TRUE(bitwise(d1, d2)) << "relu backward F=" << F;
  }
}

TEST(Rowwise, BiasActivationDispatchMatchesScalarForEveryKind) {
  // Kinds without a SIMD body fall back to the twin: the dispatcher must equal it bitwise.
  const int64_t N = 70;  // more than one row chunk
  for (auto k : {ActivationKind::ACT_RELU, ActivationKind::ACT_GELU, ActivationKind::ACT_GELU_TANH,
                 ActivationKind::ACT_GLU, ActivationKind::ACT_GEGLU, ActivationKind::ACT_SWIGLU}) {
    for (int64_t F : {int64_t(17), int64_t(33)}) {
      const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
      auto x = rnd(N * in_row, 30 + F), b = rnd(in_row, 31 + F);
      std::vector<float> y1(N * F), y2(N * F);
      bias_activation_forward(k, x.data(), b.data(), y1.data(), N, F);
      bias_activation_forward_scalar(k, x.data(), b.data(), y2.data(), N, F);
      EXPECT_TRUE(bitwise(y1, y2)) << "kind " << int(k) << " F=" << F;
      // bias_activation with the bias pre-added equals activation_forward on the sum.
      std::vector<float> xb(x);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < in_row; ++f) xb[n * in_row + f] += b[f];
      activation_forward(k, xb.data(), y1.data(), N, F);
      EXPECT_TRUE(bitwise(y1, y2)) << "pre-added bias, kind " << int(k) << " F=" << F;
    }
  }
}

TEST(Rowwise, AddDropoutBiasGradBitwise) {
  SKIP_WITHOUT_AVX512();
  for (int64_t n : kSizes) {
    auto a = rnd(n, 40 + n), b = rnd(n, 41 + n);
    std::vector<float> y1(n), y2(n);
    avx512::add_forward(a.data(), b.data(), y1.data(), n);
    add_forward_scalar(a.data(), b.data(), y2.data(), n);
    EXPECT_TRUE(bitwise(y1, y2)) << "add n=" << n;
    for (float p : {0.1f, 0.5f}) {
      // Offsets not a multiple of 16, the second one crossing 2³² (where the hash's key changes)
      // inside a vector of 16 counters.
      for (uint64_t offset : {uint64_t{1000} + uint64_t(n), (uint64_t{1} << 32) - 21}) {
        const uint64_t seed = 7;
        avx512::dropout_forward(a.data(), y1.data(), n, p, seed, offset);
        dropout_forward_scalar(a.data(), y2.data(), n, p, seed, offset);
        EXPECT_TRUE(bitwise(y1, y2)) << "dropout n=" << n << " p=" << p << " offset=" << offset;
      }
    }
    const int64_t N = 9;
    auto dy = rnd(N * n, 42 + n);
    std::vector<float> db1 = rnd(n, 43), db2 = db1;
    avx512::bias_grad(dy.data(), n, db1.data(), N, n);
    bias_grad_scalar(dy.data(), db2.data(), N, n);
    EXPECT_TRUE(bitwise(db1, db2)) << "bias_grad F=" << n;
  }
}

TEST(Rowwise, DropoutKeepsAboutOneMinusP) {
  // 100000 Bernoulli(0.9) draws: mean 0.9, std √(0.09/1e5) ≈ 9.5e-4; 5 std ≈ 0.005.
  const int64_t n = 100000;
  std::vector<float> x(n, 1.0f), y(n);
  dropout_forward(x.data(), y.data(), n, 0.1f, 3, 0);
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(v, 1.0f / 0.9f);
    }
  }
  EXPECT_NEAR(double(kept) / double(n), 0.9, 0.005);
}

// The counter hashes: kernels::uniform01 (initialisation) and dropout's 24-bit uniform
// (dropout_hash >> 8)·2⁻²⁴, over counters first + i·stride — stride 1 as rowwise dropout visits
// them, stride 2048 as attention's forward puts 16 queries of one key in a vector — from 0 and from
// just below 2³² (dropout's key changes there). n = 2²⁰ draws per seed; the bounds are the 99.99th
// percentiles of the statistics for truly independent uniforms, so a correct hash fails with
// probability ~1e-4 per check — and fixed seeds make the test deterministic:
//   χ² of 256 equal bins (255 dof): mean 255, sd 22.6 → bound 350
//   χ² of consecutive pairs on a 16×16 grid (255 dof): bound 350
//   lag-1 correlation, and correlation between the streams of seeds s and s + 1: |r| < 4/√n
void expect_uniform_and_uncorrelated(const std::function<double(uint64_t, uint64_t)>& uniform,
                                     const char* name) {
  const int64_t n = int64_t{1} << 20;
  for (uint64_t seed : {0ull, 1ull, 12345ull})
    for (uint64_t stride : {uint64_t{1}, uint64_t{2048}})
      for (uint64_t first : {uint64_t{0}, (uint64_t{1} << 32) - (uint64_t{1} << 19) * stride}) {
        std::vector<double> u(n), v(n);
        for (int64_t i = 0; i < n; ++i) {
          u[i] = uniform(seed, first + static_cast<uint64_t>(i) * stride);
          v[i] = uniform(seed + 1, first + static_cast<uint64_t>(i) * stride);
        }
        std::vector<double> bins(256, 0.0), pairs(256, 0.0);
        for (int64_t i = 0; i < n; ++i) bins[static_cast<size_t>(u[i] * 256)] += 1;
        for (int64_t i = 0; i + 1 < n; i += 2)
          pairs[static_cast<size_t>(u[i] * 16) * 16 + static_cast<size_t>(u[i + 1] * 16)] += 1;
        auto chi2 = [](const std::vector<double>& h, double expected) {
          double c = 0;
          for (double o : h) c += (o - expected) * (o - expected) / expected;
          return c;
        };
        auto corr = [](const double* a, const double* b, int64_t m) {
          double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
          for (int64_t i = 0; i < m; ++i) {
            sa += a[i], sb += b[i], sab += a[i] * b[i], saa += a[i] * a[i], sbb += b[i] * b[i];
          }
          const double ma = sa / m, mb = sb / m;
          return (sab / m - ma * mb) / std::sqrt((saa / m - ma * ma) * (sbb / m - mb * mb));
        };
        const std::string at = std::string(name) + " seed " + std::to_string(seed) + " stride " +
                               std::to_string(stride) + " first " + std::to_string(first);
        EXPECT_LT(chi2(bins, n / 256.0), 350.0) << at;
        EXPECT_LT(chi2(pairs, n / 2 / 256.0), 350.0) << at;
        EXPECT_LT(std::fabs(corr(u.data(), u.data() + 1, n - 1)), 4.0 / std::sqrt(double(n))) << at;
        EXPECT_LT(std::fabs(corr(u.data(), v.data(), n)), 4.0 / std::sqrt(double(n))) << at;
      }
}

TEST(Rowwise, HashIsUniformAndUncorrelated) {
  expect_uniform_and_uncorrelated([](uint64_t s, uint64_t c) { return double(uniform01(s, c)); },
                                  "uniform01");
}

TEST(Rowwise, DropoutHashIsUniformAndUncorrelated) {
  expect_uniform_and_uncorrelated(
      [](uint64_t s, uint64_t c) { return double(dropout_hash(s, c) >> 8) / 16777216.0; },
      "dropout_hash");
}

// dropout_keep is exactly "24-bit uniform ≥ p": at p = k·2⁻²⁴ the boundary value k is kept and
// k − 1 dropped; p = 0 keeps everything and p = 1 nothing.
TEST(Rowwise, DropoutKeepThresholdIsExact) {
  EXPECT_EQ(dropout_threshold(0.0f), 0u);
  EXPECT_EQ(dropout_threshold(1.0f), 1u << 24);
  EXPECT_EQ(dropout_threshold(0.5f), 1u << 23);
  EXPECT_EQ(dropout_threshold(0.1f), 1677722u);  // ceil(0.100000001490116·2²⁴) = ceil(1677721.6)
  for (uint64_t c = 0; c < 1000; ++c) {
    const uint32_t k = dropout_hash(5, c) >> 8;
    const float p_at = static_cast<float>(k) / 16777216.0f;  // exact
    EXPECT_TRUE(dropout_keep(5, c, p_at)) << c;
    if (k + 1 < (1u << 24)) {
      EXPECT_FALSE(dropout_keep(5, c, static_cast<float>(k + 1) / 16777216.0f)) << c;
    }
    EXPECT_TRUE(dropout_keep(5, c, 0.0f));
    EXPECT_FALSE(dropout_keep(5, c, 1.0f));
  }
}

// The register transpose against the scalar twin and the definition, at sizes around the 16×16
// block, with strides wider than the block: dst elements outside the (cols, rows) block keep their
// sentinel.
TEST(Rowwise, TransposeMatchesScalarTwin) {
  for (int64_t rows : {1, 15, 16, 17, 40})
    for (int64_t cols : {1, 3, 16, 33}) {
      const int64_t sl = cols + 5, ld = rows + 3;
      auto src = rnd(rows * sl, 300 + rows * 7 + cols);
      std::vector<float> fast(cols * ld, -7.0f), slow(cols * ld, -7.0f);
      transpose(src.data(), sl, rows, cols, fast.data(), ld);
      transpose_scalar(src.data(), sl, rows, cols, slow.data(), ld);
      EXPECT_TRUE(bitwise(fast, slow)) << rows << "x" << cols;
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < ld; ++r)
          ASSERT_EQ(fast[c * ld + r], r < rows ? src[r * sl + c] : -7.0f) << rows << "x" << cols;
    }
}

TEST(Rowwise, AddLayerNormEqualsAddThenLayerNorm) {
  const int64_t N = 130, D = 37;
  auto x = rnd(N * D, 50), r = rnd(N * D, 51), w = rnd(D, 52), b = rnd(D, 53);
  std::vector<float> z(N * D), y1(N * D), y2(N * D), sum(N * D), m1(N), m2(N), s1(N), s2(N);
  add_layer_norm_forward(x.data(), r.data(), w.data(), b.data(), z.data(), y1.data(), m1.data(), s1.data(), N, D,
                         1e-5f);
  add_forward(x.data(), r.data(), sum.data(), N * D);
  layer_norm_forward(sum.data(), w.data(), b.data(), y2.data(), m2.data(), s2.data(), N, D, 1e-5f);
  EXPECT_TRUE(bitwise(z, sum));
  EXPECT_TRUE(bitwise(y1, y2));
  EXPECT_TRUE(bitwise(m1, m2));
  // In place (y aliases x, no z): same bits.
  std::vector<float> xi(x);
  add_layer_norm_forward(xi.data(), r.data(), w.data(), b.data(), nullptr, xi.data(), nullptr, nullptr, N, D, 1e-5f);
  EXPECT_TRUE(bitwise(xi, y2));
  // The scalar twin agrees within the LayerNorm tolerance derived above.
  std::vector<float> y3(N * D);
  add_layer_norm_forward_scalar(x.data(), r.data(), w.data(), b.data(), nullptr, y3.data(), nullptr, nullptr, N, D,
                                1e-5f);
  EXPECT_TRUE(near(y1, y3, 64.0 * std::ldexp(1.0, -52) * double(D) * (2.0 * std::sqrt(double(D)) + 2.0)));
}

TEST(Rowwise, DispatchersBitwiseAcrossThreadCounts) {
  const int64_t N = 300, D = 515, n = N * D;
  auto x = rnd(n, 60), r = rnd(n, 61), w = rnd(D, 62), b = rnd(D, 63), dy = rnd(n, 64);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out;
    std::vector<float> y(n), mean(N), rstd(N), dx(n), dw(D, 0.f), db(D, 0.f), t(n);
    layer_norm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, D, 1e-5f);
    layer_norm_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), N, D, 1e-5f);
    out.insert(out.end(), y.begin(), y.end());
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), dw.begin(), dw.end());
    out.insert(out.end(), db.begin(), db.end());
    dropout_forward(x.data(), t.data(), n, 0.2f, 5, 17);
    out.insert(out.end(), t.begin(), t.end());
    add_forward(x.data(), r.data(), t.data(), n);
    out.insert(out.end(), t.begin(), t.end());
    std::vector<float> g(D, 0.f);
    bias_grad(dy.data(), g.data(), N, D);
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  const int saved = omp_get_max_threads();
  auto one = run(1), two = run(2);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise(one, two));
}

}  // namespace
}  // namespace tfm::kernels
