// tests/kernels/elementwise_test.cc — the element-wise kernels (elementwise.cc, elementwise_avx512.cc,
// elementwise_avx2.cc) and the counter hashes behind dropout and initialisation (kernels.h, cpu.cc): the SIMD
// bodies of
// add, multiply, dropout, the bias gradient and Adam's update against their scalar twins on sizes that are not
// multiples of the 16-float vector, the fused residual add + dropout against its twin, the register transpose against
// its twin, the dropout rate, the statistics of the hashes, the exactness of the keep threshold, and the dispatchers'
// thread-count independence.
//
// Expected agreement: every SIMD body here performs the same float operations in the same order per
// element as its twin (the transpose only moves data) → bitwise equal.
// The SIMD comparisons run every body the CPU has (AVX-512, AVX2),
// skipped (with a message) when it has none.
// To add a kernel: a TEST comparing foo_avx512 and foo_avx2 with foo_scalar over kSizes, bitwise.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using test::kSizes;
using test::rnd;

// The SIMD bodies this CPU runs (AVX-512; AVX2, which AVX-512 CPUs have too).
struct SimdBody {
  const char* name;
  decltype(&add_forward_avx512) add;
  decltype(&mul_forward_avx512) mul;
  decltype(&dropout_forward_avx512) dropout;
  decltype(&add_dropout_forward_avx512) add_dropout;
  decltype(&bias_grad_avx512) bias_grad;
};
std::vector<SimdBody> simd_bodies() {
  std::vector<SimdBody> b;
  if (cpu_has_avx512())
    b.push_back({"avx512", add_forward_avx512, mul_forward_avx512, dropout_forward_avx512, add_dropout_forward_avx512,
                 bias_grad_avx512});
  if (cpu_has_avx2())
    b.push_back(
        {"avx2", add_forward_avx2, mul_forward_avx2, dropout_forward_avx2, add_dropout_forward_avx2, bias_grad_avx2});
  return b;
}

TEST(ElementwiseKernel, AddDropoutBiasGradBitwise) {
  if (simd_bodies().empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  for (const SimdBody& body : simd_bodies())
    for (int64_t n : kSizes) {
      SCOPED_TRACE(body.name);
      auto a = rnd(n, 40 + n), b = rnd(n, 41 + n);
      std::vector<float> y1(n), y2(n);
      body.add(a.data(), b.data(), y1.data(), n);
      add_forward_scalar(a.data(), b.data(), y2.data(), n);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "add n=" << n;
      body.mul(a.data(), b.data(), y1.data(), n);
      mul_forward_scalar(a.data(), b.data(), y2.data(), n);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "mul n=" << n;
      for (float p : {0.1f, 0.5f}) {
        // Offsets not a multiple of 16, the second one crossing 2³² (where the hash's key changes)
        // inside a vector of 16 counters.
        for (uint64_t offset : {uint64_t{1000} + uint64_t(n), (uint64_t{1} << 32) - 21}) {
          const uint64_t seed = 7;
          body.dropout(a.data(), y1.data(), n, p, seed, offset);
          dropout_forward_scalar(a.data(), y2.data(), n, p, seed, offset);
          EXPECT_TRUE(bitwise_equal(y1, y2)) << "dropout n=" << n << " p=" << p << " offset=" << offset;
          body.add_dropout(b.data(), a.data(), y1.data(), n, p, seed, offset);
          add_dropout_forward_scalar(b.data(), a.data(), y2.data(), n, p, seed, offset);
          EXPECT_TRUE(bitwise_equal(y1, y2)) << "add_dropout n=" << n << " p=" << p << " offset=" << offset;
        }
      }
      const int64_t N = 9;
      auto dy = rnd(N * n, 42 + n);
      std::vector<float> db1 = rnd(n, 43), db2 = db1;
      body.bias_grad(dy.data(), n, db1.data(), N, n);
      bias_grad_scalar(dy.data(), db2.data(), N, n);
      EXPECT_TRUE(bitwise_equal(db1, db2)) << "bias_grad F=" << n;
    }
}

// bias_grad_bf16 (the bias gradient and dy rounded to bfloat16 in one pass): the dispatcher, at 1 and 2 threads,
// and the AVX-512 body on rows at a longer stride, bitwise the twin, which is bias_grad_scalar and float_to_bf16;
// widths over several column chunks and off the vector width, dy with ±0, subnormals, infinities and NaN.
TEST(ElementwiseKernel, BiasGradBf16IsBiasGradAndTheRounding) {
  const int64_t N = 13;
  for (int64_t F : {int64_t(1), int64_t(17), int64_t(256), int64_t(515), int64_t(1100)}) {
    auto dy = rnd(N * F, 50 + F);
    const float edge[] = {0.0f, -0.0f, 1e-40f, -3e-39f, INFINITY, -INFINITY, NAN, 3.3895314e38f, 1.00390625f};
    for (size_t i = 0; i < std::size(edge) && i < dy.size(); ++i) dy[(i * 7) % dy.size()] = edge[i];
    const std::vector<float> db0 = rnd(F, 51);
    std::vector<float> db_twin = db0;
    std::vector<uint16_t> r_twin(N * F);
    bias_grad_bf16_scalar(dy.data(), db_twin.data(), r_twin.data(), N, F);
    std::vector<float> db_sep = db0;  // the twin is the two kernels it fuses
    bias_grad_scalar(dy.data(), db_sep.data(), N, F);
    EXPECT_TRUE(bitwise_equal(db_twin, db_sep)) << "F=" << F;
    for (int64_t i = 0; i < N * F; ++i) ASSERT_EQ(r_twin[i], float_to_bf16(dy[i])) << "F=" << F << " i=" << i;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> db = db0;
      std::vector<uint16_t> r(N * F);
      bias_grad_bf16(dy.data(), db.data(), r.data(), N, F);
      EXPECT_TRUE(bitwise_equal(db, db_twin)) << "F=" << F << " threads=" << threads;
      EXPECT_EQ(r, r_twin) << "F=" << F << " threads=" << threads;
    }
    if (cpu_has_avx512()) {  // rows at stride F + 5: what lies between them is left alone
      const int64_t ld = F + 5;
      std::vector<float> wide(N * ld, 7.0f);
      for (int64_t n = 0; n < N; ++n) std::copy(dy.begin() + n * F, dy.begin() + (n + 1) * F, wide.begin() + n * ld);
      std::vector<float> db = db0;
      std::vector<uint16_t> r(N * ld, 0xABCD);
      bias_grad_bf16_avx512(wide.data(), ld, db.data(), r.data(), N, F);
      EXPECT_TRUE(bitwise_equal(db, db_twin)) << "avx512 F=" << F;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < ld; ++f)
          ASSERT_EQ(r[n * ld + f], f < F ? r_twin[n * F + f] : uint16_t(0xABCD)) << "avx512 F=" << F;
    }
  }
}

// mul_bias_grad_bf16 (the same pass over a ⊙ b): the dispatcher at 1 and 2 threads, the twin and the AVX-512 body on
// rows at a longer stride, each bitwise mul_forward then bias_grad_bf16.
TEST(ElementwiseKernel, MulBiasGradBf16IsTheProductThenBiasGradBf16) {
  const int64_t N = 11;
  for (int64_t F : {int64_t(1), int64_t(17), int64_t(256), int64_t(515), int64_t(1100)}) {
    auto a = rnd(N * F, 60 + F), b = rnd(N * F, 61 + F);
    a[0] = INFINITY;
    const std::vector<float> db0 = rnd(F, 62);
    std::vector<float> prod(N * F), want_db = db0;
    std::vector<uint16_t> want(N * F);
    mul_forward(a.data(), b.data(), prod.data(), N * F);
    bias_grad_bf16(prod.data(), want_db.data(), want.data(), N, F);
    std::vector<float> db = db0;
    std::vector<uint16_t> got(N * F);
    mul_bias_grad_bf16_scalar(a.data(), b.data(), db.data(), got.data(), N, F);
    EXPECT_TRUE(bitwise_equal(db, want_db)) << "twin F=" << F;
    EXPECT_EQ(got, want) << "twin F=" << F;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      db = db0;
      mul_bias_grad_bf16(a.data(), b.data(), db.data(), got.data(), N, F);
      EXPECT_TRUE(bitwise_equal(db, want_db)) << "F=" << F << " threads=" << threads;
      EXPECT_EQ(got, want) << "F=" << F << " threads=" << threads;
    }
    if (cpu_has_avx512()) {
      const int64_t ld = F + 3;
      std::vector<float> aw(N * ld, 2.0f), bw(N * ld, 3.0f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) aw[n * ld + f] = a[n * F + f], bw[n * ld + f] = b[n * F + f];
      std::vector<uint16_t> out(N * ld, 0xABCD);
      db = db0;
      mul_bias_grad_bf16_avx512(aw.data(), bw.data(), ld, db.data(), out.data(), N, F);
      EXPECT_TRUE(bitwise_equal(db, want_db)) << "avx512 F=" << F;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < ld; ++f)
          ASSERT_EQ(out[n * ld + f], f < F ? want[n * F + f] : uint16_t(0xABCD)) << "avx512 F=" << F;
    }
  }
}

// Adam's update (kernels.h's adam_update): each SIMD body bitwise the twin, in every weight-decay mode, with a
// clipping scale, on sizes that are not multiples of the vector; m and v start from an earlier step's values.
TEST(ElementwiseKernel, AdamUpdateBitwiseTheTwin) {
  std::vector<std::pair<const char*, decltype(&adam_update_avx512)>> bodies;
  if (cpu_has_avx512()) bodies.push_back({"avx512", adam_update_avx512});
  if (cpu_has_avx2()) bodies.push_back({"avx2", adam_update_avx2});
  if (bodies.empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  AdamCoefficients c{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 0.01f, 1.0f - 1e-3f * 0.01f, -1e-3f / 0.19f, 0.0447f};
  for (const auto& [name, body] : bodies)
    for (AdamDecay mode : {AdamDecay::NONE, AdamDecay::L2, AdamDecay::DECOUPLED})
      for (int64_t n : kSizes) {
        SCOPED_TRACE(std::string(name) + " mode " + std::to_string(int(mode)) + " n=" + std::to_string(n));
        const auto g = rnd(n, 60 + n), p0 = rnd(n, 61 + n), m0 = rnd(n, 62 + n);
        auto v0 = rnd(n, 63 + n);
        for (float& x : v0) x = x * x;  // a second moment is ≥ 0
        std::vector<float> p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
        body(mode, p1.data(), g.data(), m1.data(), v1.data(), n, c, 0.75f, nullptr);
        adam_update_scalar(mode, p2.data(), g.data(), m2.data(), v2.data(), n, c, 0.75f);
        EXPECT_TRUE(bitwise_equal(p1, p2, "p"));
        EXPECT_TRUE(bitwise_equal(m1, m2, "m"));
        EXPECT_TRUE(bitwise_equal(v1, v2, "v"));
        EXPECT_FALSE(bitwise_equal(p1, p0, "moved")) << "the update left p as it was";
      }
}

// With p16, the same update and, in the same pass, p16 = float_to_bf16(new p): every body (the twin too) bitwise
// the update without p16 followed by the rounding, on values that round up, tie, carry into the exponent, overflow
// to inf and are NaN; the element past n keeps its sentinel.
TEST(ElementwiseKernel, AdamUpdateWithBf16CopyIsTheUpdateThenTheRounding) {
  std::vector<std::pair<const char*, decltype(&adam_update_avx512)>> bodies = {{"scalar", adam_update_scalar}};
  if (cpu_has_avx512()) bodies.push_back({"avx512", adam_update_avx512});
  if (cpu_has_avx2()) bodies.push_back({"avx2", adam_update_avx2});
  AdamCoefficients c{0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 0.01f, 1.0f - 1e-3f * 0.01f, -1e-3f / 0.19f, 0.0447f};
  const float specials[] = {1.0f + 0x1.0p-8f,
                            1.0f + 0x1.8p-8f,
                            0x1.ffffp127f,
                            -0x1.ff8p0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity()};
  for (const auto& [name, body] : bodies)
    for (AdamDecay mode : {AdamDecay::NONE, AdamDecay::L2, AdamDecay::DECOUPLED})
      for (int64_t n : kSizes) {
        SCOPED_TRACE(std::string(name) + " mode " + std::to_string(int(mode)) + " n=" + std::to_string(n));
        const auto g = rnd(n, 70 + n), m0 = rnd(n, 72 + n);
        auto p0 = rnd(n, 71 + n), v0 = rnd(n, 73 + n);
        for (float& x : v0) x = x * x;
        for (int64_t j = 0; j < n && j < 6; ++j) p0[static_cast<size_t>(j)] = specials[j];
        std::vector<float> p1 = p0, m1 = m0, v1 = v0, p2 = p0, m2 = m0, v2 = v0;
        std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xABCD);
        body(mode, p1.data(), g.data(), m1.data(), v1.data(), n, c, 0.75f, got.data());
        adam_update_scalar(mode, p2.data(), g.data(), m2.data(), v2.data(), n, c, 0.75f);
        EXPECT_TRUE(bitwise_equal(p1, p2, "p"));
        EXPECT_TRUE(bitwise_equal(m1, m2, "m"));
        EXPECT_TRUE(bitwise_equal(v1, v2, "v"));
        std::vector<uint16_t> want(static_cast<size_t>(n));
        convert_rows_to_bf16_scalar(p2.data(), n, 1, n, want.data());
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)]) << "j=" << j;
        EXPECT_EQ(got[static_cast<size_t>(n)], 0xABCD) << "wrote past n";
      }
}

TEST(ElementwiseKernel, AddDropoutMatchesScalarTwin) {
  for (int64_t n : {1, 15, 16, 17, 100, 40000}) {
    const auto a = testing::random_values(n, 70), x = testing::random_values(n, 71);
    std::vector<float> fast(static_cast<size_t>(n)), slow(static_cast<size_t>(n));
    kernels::add_dropout_forward(a.data(), x.data(), fast.data(), n, 0.3f, 11, 1000);
    kernels::add_dropout_forward_scalar(a.data(), x.data(), slow.data(), n, 0.3f, 11, 1000);
    ASSERT_TRUE(testing::close_abs(fast, slow, 0.0, "n " + std::to_string(n)));  // equal values
    int dropped = 0;
    for (int64_t i = 0; i < n; ++i) dropped += fast[i] == a[i];
    if (n == 40000) {
      EXPECT_NEAR(dropped / double(n), 0.3, 0.02);  // about p of the branch dropped
    }
  }
}

TEST(ElementwiseKernel, DropoutKeepsAboutOneMinusP) {
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
// (dropout_hash >> 8)·2⁻²⁴, over counters first + i·stride — stride 1 as dropout_forward visits
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

TEST(ElementwiseKernel, HashIsUniformAndUncorrelated) {
  expect_uniform_and_uncorrelated([](uint64_t s, uint64_t c) { return double(uniform01(s, c)); },
                                  "uniform01");
}

TEST(ElementwiseKernel, DropoutHashIsUniformAndUncorrelated) {
  expect_uniform_and_uncorrelated(
      [](uint64_t s, uint64_t c) { return double(dropout_hash(s, c) >> 8) / 16777216.0; },
      "dropout_hash");
}

// dropout_keep is exactly "24-bit uniform ≥ p": at p = k·2⁻²⁴ the boundary value k is kept and
// k − 1 dropped; p = 0 keeps everything and p = 1 nothing.
TEST(ElementwiseKernel, DropoutKeepThresholdIsExact) {
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

// The register transposes (the entry point, and every body the CPU has) against the scalar twin and the
// definition, at sizes around the 8×8 and 16×16 blocks, with strides wider than the block: dst elements outside the
// (cols, rows) block keep their sentinel.
TEST(ElementwiseKernel, TransposeMatchesScalarTwin) {
  std::vector<std::pair<const char*, decltype(&transpose_scalar)>> bodies = {{"entry", transpose}};
  if (cpu_has_avx512()) bodies.emplace_back("avx512", transpose_avx512);
  if (cpu_has_avx2()) bodies.emplace_back("avx2", transpose_avx2);
  for (const auto& [name, body] : bodies)
    for (int64_t rows : {1, 7, 8, 9, 15, 16, 17, 40})
      for (int64_t cols : {1, 3, 8, 11, 16, 33}) {
        const int64_t sl = cols + 5, ld = rows + 3;
        auto src = rnd(rows * sl, 300 + rows * 7 + cols);
        std::vector<float> fast(cols * ld, -7.0f), slow(cols * ld, -7.0f);
        body(src.data(), sl, rows, cols, fast.data(), ld);
        transpose_scalar(src.data(), sl, rows, cols, slow.data(), ld);
        EXPECT_TRUE(bitwise_equal(fast, slow)) << name << " " << rows << "x" << cols;
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < ld; ++r)
            ASSERT_EQ(fast[c * ld + r], r < rows ? src[r * sl + c] : -7.0f) << name << " " << rows << "x" << cols;
      }
}

TEST(ElementwiseKernel, DispatchersBitwiseAcrossThreadCounts) {
  const int64_t N = 300, D = 515, n = N * D;
  auto x = rnd(n, 60), r = rnd(n, 61), dy = rnd(n, 64);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out;
    std::vector<float> t(n);
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
  EXPECT_TRUE(bitwise_equal(one, two));
}

}  // namespace
}  // namespace tfm::kernels
