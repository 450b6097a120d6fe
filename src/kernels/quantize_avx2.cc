// src/kernels/quantize_avx2.cc — AVX2 bodies of the activations' uint8 quantization and of the dequantization
// of int32 sums (contract in kernels.h; twins in quantize.cc, to which they are bitwise equal), for CPUs
// without AVX-512: the int8 products of gemm_packed_avx2.cc quantize their rows and dequantize their sums here.
// Bitwise equal to the twins for the same reasons as the AVX-512 bodies: the same float reciprocal of the
// scale, the same round-to-nearest-even (vroundps under the default rounding mode is std::nearbyint), NaN
// skipped by vminps/vmaxps exactly as the twins' `a < b ? a : b`, min and max exact in any lane order; the
// dequantization's float conversion, product and fma are the twin's, one per element.
// Compiled with AVX2 and FMA flags by CMake; called only from quantize.cc when cpu_has_avx2() and not
// cpu_has_avx512().
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
void quantize_rows_u8_avx2(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale, int32_t* zero) {
  const __m256 zero_ps = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    __m256 lo = zero_ps, hi = zero_ps;
    for (int64_t k = 0; k < K; k += 8) {
      const __m256 v = _mm256_maskload_ps(xm + k, first_n_lanes(K - k));  // lanes past K read 0: lo ≤ 0 ≤ hi
      lo = _mm256_min_ps(v, lo);
      hi = _mm256_max_ps(v, hi);
    }
    const float lo_s = reduce_min_ps(lo), hi_s = reduce_max_ps(hi);
    float s = (hi_s - lo_s) / 255.0f;
    if (!(s > 0.0f)) s = 1.0f;  // a row of zeros
    const float z = std::nearbyint(-lo_s / s);
    scale[m] = s;
    zero[m] = static_cast<int32_t>(z);
    const __m256 inv = _mm256_set1_ps(1.0f / s), zv = _mm256_set1_ps(z);
    uint8_t* qm = q + m * K;
    for (int64_t k = 0; k < K; k += 8) {
      const __m256 v = _mm256_maskload_ps(xm + k, first_n_lanes(K - k));
      __m256 r = _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm256_add_ps(r, zv);
      r = _mm256_max_ps(r, zero_ps);  // NaN → 0, as the twin
      r = _mm256_min_ps(r, top);
      // 8 int32 in [0, 255] → 8 bytes (the packs saturate nothing: every value fits).
      const __m256i i = _mm256_cvtps_epi32(r);
      const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
      const __m128i b = _mm_packus_epi16(w, w);
      if (K - k >= 8) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(qm + k), b);
      } else {
        alignas(16) uint8_t tail[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(tail), b);
        std::memcpy(qm + k, tail, static_cast<size_t>(K - k));
      }
    }
  }
}

void dequantize_rows_avx2(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                          const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w, const float* bias,
                          float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* a = acc + m * ldacc;
    float* ym = y + m * ldy;
    const __m256 sx = _mm256_set1_ps(scale_x[m]);
    const __m256i zx = _mm256_set1_epi32(zero_x[m]);
    for (int64_t n = 0; n < N; n += 8) {
      const __m256i mk = first_n_lanes(N - n);
      const __m256i av = _mm256_maskload_epi32(a + n, mk);
      const __m256i cs = _mm256_maskload_epi32(colsum_w + n, mk);
      const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(av, _mm256_mullo_epi32(zx, cs)));
      const __m256 s = _mm256_mul_ps(sx, _mm256_maskload_ps(scale_w + n, mk));
      const __m256 b = bias ? _mm256_maskload_ps(bias + n, mk) : _mm256_setzero_ps();
      _mm256_maskstore_ps(ym + n, mk, _mm256_fmadd_ps(v, s, b));
    }
  }
}

}  // namespace tfm::kernels
