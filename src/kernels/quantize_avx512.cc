// src/kernels/quantize_avx512.cc — AVX-512 bodies of the int8 quantization kernels (contract in
// kernels.h; twins in quantize.cc, to which they are bitwise equal: the same reciprocal, the same
// round-to-nearest-even, NaN skipped by vminps/vmaxps exactly as the twins' `a < b ? a : b`; min and
// max are exact, so reducing the lanes in another order changes nothing).
// GCC 12's intrinsic headers seed pass-through operands (_mm512_reduce_min_ps, _mm512_cvtepi32_epi8) with
// an "undefined" vector that -Wmaybe-uninitialized reports from inside the header; it is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "kernels/common_avx512.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

void quantize_rows_u8_avx512(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                             int32_t* zero) {
  const __m512 zero_ps = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    __m512 lo = zero_ps, hi = zero_ps;
    for (int64_t k = 0; k < K; k += 16) {
      const __mmask16 mk = first_n(K - k);
      const __m512 v = _mm512_maskz_loadu_ps(mk, xm + k);  // masked-off lanes read 0: lo ≤ 0 ≤ hi anyway
      lo = _mm512_min_ps(v, lo);
      hi = _mm512_max_ps(v, hi);
    }
    const float lo_s = _mm512_reduce_min_ps(lo), hi_s = _mm512_reduce_max_ps(hi);
    float s = (hi_s - lo_s) / 255.0f;
    if (!(s > 0.0f)) s = 1.0f;
    const __m128 zq = _mm_roundscale_ss(_mm_setzero_ps(), _mm_set_ss(-lo_s / s),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const float z = _mm_cvtss_f32(zq);
    scale[m] = s;
    zero[m] = static_cast<int32_t>(z);
    const __m512 inv = _mm512_set1_ps(1.0f / s), zv = _mm512_set1_ps(z);
    uint8_t* qm = q + m * K;
    for (int64_t k = 0; k < K; k += 16) {
      const __mmask16 mk = first_n(K - k);
      const __m512 v = _mm512_maskz_loadu_ps(mk, xm + k);
      __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm512_add_ps(r, zv);
      r = _mm512_max_ps(r, zero_ps);  // NaN → 0, as the twin
      r = _mm512_min_ps(r, top);
      _mm_mask_storeu_epi8(qm + k, mk, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
  }
}

void dequantize_rows_avx512(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                            const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w,
                            const float* bias, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* a = acc + m * ldacc;
    float* ym = y + m * ldy;
    const __m512 sx = _mm512_set1_ps(scale_x[m]);
    const __m512i zx = _mm512_set1_epi32(zero_x[m]);
    for (int64_t n = 0; n < N; n += 16) {
      const __mmask16 mk = first_n(N - n);
      const __m512i av = _mm512_maskz_loadu_epi32(mk, a + n);
      const __m512i cs = _mm512_maskz_loadu_epi32(mk, colsum_w + n);
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(av, _mm512_mullo_epi32(zx, cs)));
      const __m512 s = _mm512_mul_ps(sx, _mm512_maskz_loadu_ps(mk, scale_w + n));
      const __m512 b = bias ? _mm512_maskz_loadu_ps(mk, bias + n) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(ym + n, mk, _mm512_fmadd_ps(v, s, b));
    }
  }
}

}  // namespace tfm::kernels
