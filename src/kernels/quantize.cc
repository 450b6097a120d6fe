// src/kernels/quantize.cc — int8 quantization kernels (contract in kernels.h, "int8 quantization"):
// per-row symmetric int8 weights, per-row asymmetric uint8 activations, and the dequantization of the
// int32 sums. The AVX-512 bodies (quantize_avx512.cc) and the AVX2 ones (quantize_avx2.cc) of the activations'
// quantization and the dequantization are bitwise equal to the twins here: both
// multiply by the same float reciprocal of the scale (activations; a division per element would cost
// more than the rest of the quantization) or divide (weights, once), round to nearest even, and skip NaN in min/max the
// way vminps/vmaxps do
// (`a < b ? a : b` keeps b when a is NaN).
#include <cmath>

#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

inline float min_keep(float x, float acc) { return x < acc ? x : acc; }  // vminps(x, acc)
inline float max_keep(float x, float acc) { return x > acc ? x : acc; }  // vmaxps(x, acc)

// v rounded to the nearest integer, ties to even, for |v| ≤ 2^22: adding 1.5·2^23 leaves no bits for a
// fraction, so the addition itself rounds (to nearest even, the default mode), and subtracting it back is
// exact — std::nearbyint's result, without a library call per element.
inline float round_small(float v) { return (v + 12582912.0f) - 12582912.0f; }

}  // namespace

void dequantize_rows_s8(const int8_t* q, int64_t N, int64_t K, int64_t ldq, const float* scale, float* W) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) W[n * K + k] = float(q[n * ldq + k]) * scale[n];
}

void quantize_rows_s8(const float* W, int64_t N, int64_t K, int64_t ldw, int8_t* q, float* scale) {
  // Rows are independent: the threads share them (a large weight at pack time), with the same bits.
#pragma omp parallel for schedule(static) if (N * K >= (int64_t(1) << 18))
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + n * ldw;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = max_keep(std::fabs(w[k]), amax);
    const float s = amax / 127.0f;
    scale[n] = s;
    int8_t* qn = q + n * K;
    if (!(s > 0.0f)) {  // a row of zeros (or of zeros and NaN: the max skips NaN, so amax = 0)
      for (int64_t k = 0; k < K; ++k) qn[k] = 0;
      continue;
    }
    for (int64_t k = 0; k < K; ++k) {
      float v = w[k] / s;
      // NaN → −127 (max_keep keeps −127 when v is NaN). w/s is NaN for a NaN weight (the max skipped it,
      // so s is the rest's) and for an infinite one: amax = inf makes s = inf, and ±inf/inf = NaN, so
      // +inf and −inf both come out −127 while the row's finite weights become 0 (w/inf = ±0).
      // Clamping before rounding gives what rounding first would: |v| ≤ |w|/s ≤ 127 but for rounding error.
      v = max_keep(v, -127.0f);
      v = min_keep(v, 127.0f);
      qn[k] = static_cast<int8_t>(round_small(v));
    }
  }
}

void quantize_rows_u8_scalar(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                             int32_t* zero) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      lo = min_keep(xm[k], lo);
      hi = max_keep(xm[k], hi);
    }
    float s = (hi - lo) / 255.0f;
    if (!(s > 0.0f)) s = 1.0f;  // a row of zeros
    const float z = std::nearbyint(-lo / s), inv = 1.0f / s;
    scale[m] = s;
    zero[m] = static_cast<int32_t>(z);
    uint8_t* qm = q + m * K;
    for (int64_t k = 0; k < K; ++k) {
      float v = std::nearbyint(xm[k] * inv) + z;
      v = max_keep(v, 0.0f);  // NaN → 0
      v = min_keep(v, 255.0f);
      qm[k] = static_cast<uint8_t>(v);
    }
  }
}

void quantize_rows_u8(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                      int32_t* zero) {
  if (cpu_has_avx512()) return quantize_rows_u8_avx512(x, M, K, ldx, q, scale, zero);
  if (cpu_has_avx2()) return quantize_rows_u8_avx2(x, M, K, ldx, q, scale, zero);
  quantize_rows_u8_scalar(x, M, K, ldx, q, scale, zero);
}

void dequantize_rows_scalar(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                            const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w,
                            const float* bias, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* a = acc + m * ldacc;
    float* ym = y + m * ldy;
    for (int64_t n = 0; n < N; ++n) {
      const float v = static_cast<float>(a[n] - zero_x[m] * colsum_w[n]);
      ym[n] = std::fma(v, scale_x[m] * scale_w[n], bias ? bias[n] : 0.0f);
    }
  }
}

void dequantize_rows(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                     const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w, const float* bias,
                     float* y, int64_t ldy) {
  if (cpu_has_avx512())
    return dequantize_rows_avx512(acc, ldacc, M, N, scale_x, zero_x, scale_w, colsum_w, bias, y, ldy);
  if (cpu_has_avx2()) return dequantize_rows_avx2(acc, ldacc, M, N, scale_x, zero_x, scale_w, colsum_w, bias, y, ldy);
  dequantize_rows_scalar(acc, ldacc, M, N, scale_x, zero_x, scale_w, colsum_w, bias, y, ldy);
}

}  // namespace tfm::kernels
