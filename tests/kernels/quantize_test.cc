// tests/kernels/quantize_test.cc — the int8 quantization kernels (kernels.h, "int8 quantization"):
// hand-checked cases of each rule, the AVX-512 bodies bitwise against their scalar twins (random rows,
// special values, widths that are not multiples of 16, strided rows), and the round trip's error
// within half a step. No tolerance besides that half step: both rules are exact up to the float
// quotient, so the twins must agree bit for bit.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using testing::Rng;

TEST(QuantizeRowsS8, HandChecked) {
  // Row 0: max |w| = 2.54 → scale 0.02; 1.0/0.02 = 50, −2.54/0.02 = −127, 0.01/0.02 = 0.5 → 0 (ties to even),
  // 0.03/0.02 = 1.5 → 2. Row 1: zeros → scale 0, q 0.
  const std::vector<float> W = {1.0f, -2.54f, 0.01f, 0.03f, 0.f, 0.f, 0.f, 0.f};
  std::vector<int8_t> q(8, 99);
  std::vector<float> s(2, -1.f);
  quantize_rows_s8(W.data(), 2, 4, 4, q.data(), s.data());
  EXPECT_FLOAT_EQ(s[0], 2.54f / 127.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ((std::vector<int>{q[0], q[1], q[2], q[3]}), (std::vector<int>{50, -127, 0, 2}));
  EXPECT_EQ((std::vector<int>{q[4], q[5], q[6], q[7]}), (std::vector<int>{0, 0, 0, 0}));
}

// The rule as kernels.h states it, written plainly: q = clamp(nearbyint(w / s), −127, 127), NaN → −127.
void quantize_rows_s8_rule(const float* W, int64_t N, int64_t K, int8_t* q, float* scale) {
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::fabs(W[n * K + k]) > amax ? std::fabs(W[n * K + k]) : amax;
    scale[n] = amax / 127.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float v = scale[n] > 0.0f ? std::nearbyint(W[n * K + k] / scale[n]) : 0.0f;
      q[n * K + k] = static_cast<int8_t>(std::isnan(v) ? -127.0f : v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v);
    }
  }
}

TEST(QuantizeRowsS8, EqualsTheRuleBitwiseForAnyThreadCount) {
  // Random rows, rows whose scale is exactly 1 (max |w| = 127) holding every tie k + 1/2 in [−127, 127] and
  // values just off the ties, −0, NaN and ±inf, a row of zeros; large enough that the threads share the rows.
  Rng rng(21);
  const int64_t N = 600, K = 520;
  std::vector<float> W(static_cast<size_t>(N * K));
  for (float& w : W) w = rng.uniform(-3.f, 3.f);
  for (int64_t n = 0; n < 20; ++n) {
    float* row = W.data() + n * K;
    row[0] = n % 2 ? 127.0f : -127.0f;
    for (int64_t k = 1; k < K; ++k) {
      const float tie = static_cast<float>(k % 255 - 127) + 0.5f;
      row[k] = n % 3 == 0 ? tie : n % 3 == 1 ? std::nextafter(tie, 200.0f) : std::nextafter(tie, -200.0f);
    }
  }
  W[static_cast<size_t>(25 * K + 3)] = -0.0f;
  W[static_cast<size_t>(26 * K + 4)] = std::numeric_limits<float>::quiet_NaN();
  W[static_cast<size_t>(27 * K + 5)] = std::numeric_limits<float>::infinity();
  W[static_cast<size_t>(28 * K + 6)] = -std::numeric_limits<float>::infinity();
  std::fill(W.begin() + 29 * K, W.begin() + 30 * K, 0.0f);
  std::vector<int8_t> want(W.size()), got(W.size());
  std::vector<float> s_want(N), s_got(N);
  quantize_rows_s8_rule(W.data(), N, K, want.data(), s_want.data());
  for (const int threads : {1, 2}) {
    std::fill(got.begin(), got.end(), int8_t{99});
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    quantize_rows_s8(W.data(), N, K, K, got.data(), s_got.data());
    omp_set_num_threads(saved);
    EXPECT_TRUE(bitwise_equal(s_got, s_want, std::to_string(threads) + " threads: scales"));
    EXPECT_EQ(got, want) << threads << " threads";
  }
  EXPECT_EQ(want[static_cast<size_t>(27 * K + 5)], -127);  // +inf: inf/inf = NaN → −127 (kernels.h)
}

// The inverse of quantize_rows_s8: one product a value, q read at its stride, W dense; and what it gives
// quantize_rows_s8 takes back to the same rows when they are a quantization's (127 in every nonzero row).
TEST(DequantizeRowsS8, OneProductAValueAtTheStride) {
  const std::vector<int8_t> q = {1, -127, 5, 99, /*row 1*/ 0, 0, 0, 77, /*row 2*/ 127, -3, 0, -128};
  const std::vector<float> scale = {0.5f, 3.0f, 1e-3f};
  std::vector<float> w(9, -1.0f);
  dequantize_rows_s8(q.data(), 3, 3, 4, scale.data(), w.data());  // the 4th column of each row is skipped
  EXPECT_EQ(w, (std::vector<float>{0.5f, -63.5f, 2.5f, 0.0f, 0.0f, 0.0f, 127 * 1e-3f, -3 * 1e-3f, 0.0f}));
  std::vector<int8_t> q2(9);
  std::vector<float> s2(3);
  const std::vector<int8_t> dense = {1, -127, 5, 0, 0, 0, 127, -3, 0};
  std::vector<float> back(9);
  dequantize_rows_s8(dense.data(), 3, 3, 3, scale.data(), back.data());
  quantize_rows_s8(back.data(), 3, 3, 3, q2.data(), s2.data());
  EXPECT_EQ(q2, dense);
  EXPECT_EQ(s2[0], scale[0]);
  EXPECT_EQ(s2[1], 0.0f);  // a row of zeros: scale 0
}

TEST(QuantizeRowsU8, HandChecked) {
  // lo = −1, hi = 1.55 → scale 2.55/255 = 0.01, zero = round(1/0.01) = 100;
  // −1 → −100 + 100 = 0, 1.55 → 155 + 100 = 255, 0 → 100, 0.004 → round(0.4) + 100 = 100.
  const std::vector<float> x = {-1.0f, 1.55f, 0.0f, 0.004f};
  std::vector<uint8_t> q(4);
  float s;
  int32_t z;
  quantize_rows_u8_scalar(x.data(), 1, 4, 4, q.data(), &s, &z);
  EXPECT_FLOAT_EQ(s, 0.01f);
  EXPECT_EQ(z, 100);
  EXPECT_EQ((std::vector<int>{q[0], q[1], q[2], q[3]}), (std::vector<int>{0, 255, 100, 100}));
  // All positive: lo is 0, so the zero point is 0 and the row uses the whole range [0, 255].
  const std::vector<float> p = {0.5f, 2.55f};
  quantize_rows_u8_scalar(p.data(), 1, 2, 2, q.data(), &s, &z);
  EXPECT_EQ(z, 0);
  EXPECT_EQ(q[1], 255);
}

// The SIMD bodies this CPU runs (AVX-512, AVX2), each with its name.
struct QuantizeBodies {
  const char* name;
  decltype(&quantize_rows_u8_scalar) quantize;
  decltype(&dequantize_rows_scalar) dequantize;
};
std::vector<QuantizeBodies> simd_bodies() {
  std::vector<QuantizeBodies> b;
  if (cpu_has_avx512()) b.push_back({"avx512", quantize_rows_u8_avx512, dequantize_rows_avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", quantize_rows_u8_avx2, dequantize_rows_avx2});
  return b;
}

TEST(QuantizeRowsU8, SimdMatchesScalarTwinBitwiseAndWithinHalfAStep) {
  if (simd_bodies().empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  Rng rng(2029);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const QuantizeBodies& body : simd_bodies())
    for (int64_t K : {1, 15, 16, 17, 100, 513}) {
      for (int64_t pad : {0, 3}) {
        const int64_t M = 9, ld = K + pad;
        std::vector<float> x(static_cast<size_t>(M * ld), nan);  // padding NaN: never read
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k) {
            float v = rng.uniform(-3.f, 5.f);
            if (m == 1) v = std::fabs(v);            // all positive
            if (m == 2) v = -std::fabs(v) * 1e-30f;  // all negative, tiny
            if (m == 3) v = 0.0f;                    // zeros
            if (m == 4 && k % 7 == 3) v = nan;       // NaN skipped by min/max, quantized to 0
            x[m * ld + k] = v;
          }
        std::vector<uint8_t> qf(static_cast<size_t>(M * K), 7), qs(qf.size(), 9);
        std::vector<float> sf(M), ss(M);
        std::vector<int32_t> zf(M), zs(M);
        body.quantize(x.data(), M, K, ld, qf.data(), sf.data(), zf.data());
        quantize_rows_u8_scalar(x.data(), M, K, ld, qs.data(), ss.data(), zs.data());
        const std::string what = std::string(body.name) + " K " + std::to_string(K) + " pad " + std::to_string(pad);
        ASSERT_TRUE(bitwise_equal(qf, qs, what + " q"));
        ASSERT_TRUE(bitwise_equal(sf, ss, what + " scale"));
        ASSERT_EQ(zf, zs) << what;
        // |x − s·(q − z)| ≤ s·(1/2 + 512u): half a step, plus the rounding of x·fl(1/s) (< 511u steps).
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k) {
            const float v = x[m * ld + k];
            if (std::isnan(v)) continue;
            const double back = double(ss[m]) * (int(qs[m * K + k]) - zs[m]);
            ASSERT_LE(std::fabs(back - v), ss[m] * (0.5 + 512 * 0x1p-24)) << what << " row " << m << " col " << k;
          }
      }
    }
}

TEST(DequantizeRows, SimdMatchesScalarTwinBitwise) {
  if (simd_bodies().empty()) GTEST_SKIP() << "no SIMD body on this CPU";
  Rng rng(7);
  for (const QuantizeBodies& body : simd_bodies())
    for (int64_t N : {1, 15, 16, 17, 100}) {
      for (bool bias : {false, true}) {
        const int64_t M = 5, ldacc = N + 2, ldy = N + 1;
        std::vector<int32_t> acc(static_cast<size_t>(M * ldacc)), zx(M), cs(N);
        std::vector<float> sx(M), sw(N), b(N);
        for (auto& a : acc) a = rng.uniform_int(-40000000, 40000000);  // beyond 2^24: the float conversion rounds
        for (auto& z : zx) z = rng.uniform_int(0, 255);
        for (auto& c : cs) c = rng.uniform_int(-60000, 60000);
        for (auto& s : sx) s = rng.uniform(0.f, 0.1f);
        for (auto& s : sw) s = rng.uniform(0.f, 0.01f);
        for (auto& v : b) v = rng.uniform();
        std::vector<float> yf(static_cast<size_t>(M * ldy), -3.f), ys = yf;
        body.dequantize(acc.data(), ldacc, M, N, sx.data(), zx.data(), sw.data(), cs.data(), bias ? b.data() : nullptr,
                        yf.data(), ldy);
        dequantize_rows_scalar(acc.data(), ldacc, M, N, sx.data(), zx.data(), sw.data(), cs.data(),
                               bias ? b.data() : nullptr, ys.data(), ldy);
        ASSERT_TRUE(bitwise_equal(yf, ys, std::string(body.name) + " N " + std::to_string(N) + (bias ? " bias" : "")));
        EXPECT_EQ(yf[ldy - 1], -3.f) << "padding of y is left alone";
      }
    }
}

}  // namespace
}  // namespace tfm::kernels
