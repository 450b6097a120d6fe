// tests/kernels/log_softmax_row_test.cc — log_softmax_row_scalar (src/kernels/cross_entropy_scalar.h),
// the one log-softmax of a row in double used by the cross-entropy twin, the teacher-forced scorer
// and decoding: a hand-checked row, random rows against a long double reference, skipped entries,
// ties and edge rows; and kernels::log_softmax_rows (the scorer's rows), its AVX-512 body against the
// twin.
//
// Tolerance against the reference: the sum s of V terms exp(z_v − m) ≤ 1, each exp within 1 ulp and
// each addition rounding by u = 2^-53 relative, is within (V + 1)·u relative of the exact sum, so
// log s within (V + 1)·u absolute, plus the roundings of log s and m + log s (u·|lse| each): bound
// (V + 3)·u·(1 + |lse|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cross_entropy_scalar.h"
#include "kernels/kernels.h"
#include "kernel_test_util.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// lse with every step in long double (64-bit mantissa on x86: 2^11 times finer than double).
long double reference_lse(const std::vector<float>& z, int64_t skip_a = -1, int64_t skip_b = -1) {
  long double m = -kInf;
  for (size_t v = 0; v < z.size(); ++v)
    if (static_cast<int64_t>(v) != skip_a && static_cast<int64_t>(v) != skip_b) m = std::max(m, static_cast<long double>(z[v]));
  long double s = 0;
  for (size_t v = 0; v < z.size(); ++v)
    if (static_cast<int64_t>(v) != skip_a && static_cast<int64_t>(v) != skip_b) s += std::exp(static_cast<long double>(z[v]) - m);
  return m + std::log(s);
}

TEST(LogSoftmaxRow, HandChecked) {
  // z = (2, 0, 2): m = 2, s = e⁰ + e⁻² + e⁰ = 2.1353352832366127, lse = 2 + ln 2.1353352832366127
  // = 2.7586236756795133; the first maximum is at 0.
  const float z[] = {2.0f, 0.0f, 2.0f};
  const LogSoftmaxRow r = log_softmax_row_scalar(z, 3);
  EXPECT_NEAR(r.lse, 2.7586236756795133, 4e-16);
  EXPECT_EQ(r.argmax, 0);
  // Without entry 0 (as decoding leaves out pad): s = e⁻² + 1, lse = 2 + ln 1.1353352832366127
  // = 2.1269280110429727, argmax 2.
  const LogSoftmaxRow skip = log_softmax_row_scalar(z, 3, 0);
  EXPECT_NEAR(skip.lse, 2.1269280110429727, 4e-16);
  EXPECT_EQ(skip.argmax, 2);
  // Four equal logits 1: lse = 1 + ln 4 = 2.386294361119891, exactly what the formula rounds to.
  const float flat[] = {1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(log_softmax_row_scalar(flat, 4).lse, 1.0 + std::log(4.0));
  EXPECT_EQ(log_softmax_row_scalar(flat, 4).argmax, 0);
}

TEST(LogSoftmaxRow, MatchesLongDoubleReference) {
  constexpr double u = std::numeric_limits<double>::epsilon() / 2;
  uint64_t seed = 1;
  for (int64_t V : {1, 2, 7, 16, 17, 100, 5000}) {
    for (float offset : {0.0f, -300.0f, 1000.0f}) {  // around 1000, exp without the max would overflow
      std::vector<float> z = testing::random_values(V, ++seed, -30.0f, 30.0f);
      for (float& x : z) x += offset;
      const LogSoftmaxRow r = log_softmax_row_scalar(z.data(), V);
      const long double ref = reference_lse(z);
      EXPECT_NEAR(r.lse, static_cast<double>(ref), (V + 3) * u * (1 + std::fabs(r.lse))) << "V " << V << " offset " << offset;
      int64_t first_max = 0;
      for (int64_t v = 1; v < V; ++v)
        if (z[v] > z[first_max]) first_max = v;
      EXPECT_EQ(r.argmax, first_max) << "V " << V;
      // The probabilities exp(z_v − lse) sum to 1: lse's error above, and each z_v − lse's rounding
      // (u·|z_v − lse|), become relative errors of the terms; bound 2·(V + 3)·u·(1 + |lse|).
      double p = 0;
      for (float x : z) p += std::exp(static_cast<double>(x) - r.lse);
      EXPECT_NEAR(p, 1.0, 2 * (V + 3) * u * (1 + std::fabs(r.lse))) << "V " << V;
      if (V > 2) {  // the skipped entries as decoding leaves out pad and bos
        const LogSoftmaxRow s = log_softmax_row_scalar(z.data(), V, first_max, (first_max + 1) % V);
        const long double sref = reference_lse(z, first_max, (first_max + 1) % V);
        EXPECT_NEAR(s.lse, static_cast<double>(sref), (V + 3) * u * (1 + std::fabs(s.lse))) << "V " << V;
        EXPECT_NE(s.argmax, first_max);
      }
      // The double instantiation (the gradient checks' cross-entropy twin) gives the same lse.
      const std::vector<double> zd(z.begin(), z.end());
      EXPECT_EQ(log_softmax_row_scalar(zd.data(), V).lse, r.lse);
    }
  }
}

TEST(LogSoftmaxRow, EdgeRows) {
  const float inf = std::numeric_limits<float>::infinity();
  const float some_inf[] = {-inf, 0.0f, -inf};  // −inf entries add exp(−inf) = 0
  EXPECT_EQ(log_softmax_row_scalar(some_inf, 3).lse, 0.0);
  EXPECT_EQ(log_softmax_row_scalar(some_inf, 3).argmax, 1);
  const float all_inf[] = {-inf, -inf};
  EXPECT_TRUE(std::isnan(log_softmax_row_scalar(all_inf, 2).lse));
  EXPECT_EQ(log_softmax_row_scalar(all_inf, 2).argmax, 0);
  const float with_nan[] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
  EXPECT_TRUE(std::isnan(log_softmax_row_scalar(with_nan, 3).lse));
  const float two[] = {5.0f, 6.0f};
  EXPECT_EQ(log_softmax_row_scalar(two, 2, 0, 1).lse, -kInf);  // nothing kept
  EXPECT_EQ(log_softmax_row_scalar(two, 2, 0, 1).argmax, -1);
  EXPECT_EQ(log_softmax_row_scalar(two, 2, 1).lse, 5.0);  // one kept entry: its own logit
}

// The SIMD bodies of a row this CPU runs: AVX-512 and AVX2 (AVX-512 CPUs have both).
struct RowBody {
  const char* name;
  bool (*row)(const float*, int64_t, double*, int64_t*);
};
std::vector<RowBody> row_bodies() {
  std::vector<RowBody> b;
  if (cpu_has_avx512()) b.push_back({"avx512", log_softmax_row_avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", log_softmax_row_avx2});
  return b;
}

// kernels::log_softmax_rows, the scorer's rows: its AVX-512 body sums the vector exp's terms (within
// 2 ulp of exp, +2.2e-8 from rounding z − m in float) in double, so s is within 2.6e-7 relative of the
// twin's and lse within 2.6e-7 absolute (m is exact in both); bound 3·eps_f plus the twin's own
// (V + 3)·u·(1 + |lse|). The argmax is the same index.
TEST(LogSoftmaxRows, SimdBodiesWithinFloatRoundingOfTheTwin) {
  if (row_bodies().empty()) GTEST_SKIP() << "no AVX-512 or AVX2 (or TFM_FORCE_SCALAR)";
  for (const RowBody& body : row_bodies()) {
    SCOPED_TRACE(body.name);
    constexpr double u = std::numeric_limits<double>::epsilon() / 2;
    constexpr double eps_f = std::numeric_limits<float>::epsilon();
    uint64_t seed = 100;
    double worst = 0;
    for (int64_t V : {1, 2, 7, 16, 17, 100, 5000}) {
      for (float offset : {0.0f, -300.0f, 1000.0f}) {
        std::vector<float> z = testing::random_values(V, ++seed, -30.0f, 30.0f);
        for (float& x : z) x += offset;
        const LogSoftmaxRow r = log_softmax_row_scalar(z.data(), V);
        double lse = 0;
        int64_t argmax = -7;
        ASSERT_TRUE(body.row(z.data(), V, &lse, &argmax)) << "V " << V;
        const double bound = 3 * eps_f + (V + 3) * u * (1 + std::fabs(r.lse));
        worst = std::max(worst, std::fabs(lse - r.lse) / bound);
        EXPECT_EQ(argmax, r.argmax) << "V " << V;
      }
    }
    EXPECT_LE(worst, 1.0);
    std::printf("log_softmax_row_%s: worst |lse − twin| = %.2f of the bound\n", body.name, worst);
  }
}

// Ties resolve to the first maximum, across vector boundaries too.
TEST(LogSoftmaxRows, TiesTakeTheFirstMaximum) {
  if (row_bodies().empty()) GTEST_SKIP() << "no AVX-512 or AVX2 (or TFM_FORCE_SCALAR)";
  for (const RowBody& body : row_bodies()) {
    SCOPED_TRACE(body.name);
    std::vector<float> z(40, -1.0f);
    z[21] = 2.0f, z[5] = 2.0f, z[37] = 2.0f;
    double lse = 0;
    int64_t argmax = -1;
    ASSERT_TRUE(body.row(z.data(), 40, &lse, &argmax));
    EXPECT_EQ(argmax, 5);
    z[5] = 1.0f;
    ASSERT_TRUE(body.row(z.data(), 40, &lse, &argmax));
    EXPECT_EQ(argmax, 21);
    z.resize(39);  // a tie in the last, partial vector: 37 and 38 (the lanes past the row read nothing)
    z[21] = 1.0f;
    z[38] = 2.0f;
    ASSERT_TRUE(body.row(z.data(), 39, &lse, &argmax));
    EXPECT_EQ(argmax, 37);
  }
}

// The dispatcher: edge rows (a NaN, a +inf, a row of −inf) are the twin's bit for bit; a row with some
// −inf entries is finite (they add 0); with many rows (parallel), every row is what the body or the twin
// gives it alone.
TEST(LogSoftmaxRows, DispatcherRowsAndEdgeRows) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t V = 19, N = 4000;  // N·V above the parallel threshold
  std::vector<float> z = testing::random_values(N * V, 77, -6.0f, 6.0f);
  z[1 * V + 3] = std::numeric_limits<float>::quiet_NaN();
  z[2 * V + 18] = inf;
  for (int64_t v = 0; v < V; ++v) z[3 * V + v] = -inf;
  z[4 * V + 0] = -inf, z[4 * V + 17] = -inf;
  std::vector<double> lse(N);
  std::vector<int64_t> argmax(N);
  log_softmax_rows(z.data(), N, V, lse.data(), argmax.data());
  for (int64_t n = 0; n < N; ++n) {
    const float* row = z.data() + n * V;
    const LogSoftmaxRow t = log_softmax_row_scalar(row, V);
    double l = t.lse;
    int64_t a = t.argmax;
    const bool edge = n >= 1 && n <= 3;
    if (!edge && cpu_has_avx512()) {
      ASSERT_TRUE(log_softmax_row_avx512(row, V, &l, &a)) << n;
    } else if (!edge && cpu_has_avx2()) {
      ASSERT_TRUE(log_softmax_row_avx2(row, V, &l, &a)) << n;
    }
    if (std::isnan(l)) {
      EXPECT_TRUE(std::isnan(lse[n])) << "row " << n;
    } else {
      EXPECT_EQ(lse[n], l) << "row " << n;
    }
    EXPECT_EQ(argmax[n], a) << "row " << n;
  }
  EXPECT_TRUE(std::isnan(lse[1]) && std::isnan(lse[2]) && std::isnan(lse[3]));
  EXPECT_EQ(argmax[3], 0);
  EXPECT_TRUE(std::isfinite(lse[4]));
}

}  // namespace
}  // namespace tfm::kernels
