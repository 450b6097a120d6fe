// src/kernels/common_avx512.h — small pieces shared by the AVX-512 kernels (include only from files
// compiled with AVX-512 flags): the lane mask of a partial vector, float ↔ double halves of a vector
// (the row sums of the norms run in double), float32 → bfloat16 rounding, a vector exp, and a thread's grow-only scratch.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tfm::kernels {

// Lanes [0, n) of a 16-lane vector, n clamped to [0, 16]: the mask of a row's tail.
inline __mmask16 first_n(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

// float ↔ double halves of a 16-float vector.
inline __m512d lo_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
inline __m512d hi_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline __m512 join_ps(__m512d lo, __m512d hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}

// float32 → bfloat16 bits in the upper half of each 32-bit lane (the lower half zero), rounded to nearest
// even as the scalar kernels::float_to_bf16 (gemm_packed.h) rounds, on the bits u:
//   NaN (|u| > 0x7F800000) → (u & 0xFFFF0000) | 0x00400000 (quiet; sign and top payload kept)
//   else                   → (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000 (the carry may reach the exponent)
// Integer arithmetic rather than VCVTNEPS2BF16, which treats denormal inputs as zero and so would not match
// the twin. `>> 16` gives the 16-bit value in the lower half.
inline __m512i bf16_hi(__m512i u) {
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                       _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
      top);
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_or_epi32(rounded, nan, _mm512_and_si512(u, top), _mm512_set1_epi32(0x00400000));
}

// dst[i] = bfloat16 of src[i] (bf16_hi's rounding) for n contiguous floats, 16 at a time (masked tail).
inline void round_run_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512i h = _mm512_srli_epi32(bf16_hi(_mm512_maskz_loadu_epi32(m, src + i)), 16);
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(h));
  }
}

// Vector exp, 16 lanes (the softmax of attention_avx512.cc, the GELU and the sigmoid of
// activation_avx512.cc, the log-sum-exp and softmax of cross_entropy_avx512.cc):
// exp(x) = 2^n · e^r with n = round(x·log2 e), r = x − n·ln2 (Cody–Waite: ln2 = C1 + C2, C1 with few
// bits so n·C1 is exact), |r| ≤ ln2/2, e^r by its degree-7 Taylor polynomial (truncation error
// r^8/8! ≤ 5e-9 relative, far below float's 6e-8 half-ulp), 2^n applied by vscalefps (which
// also yields 0 / inf / denormals correctly). Inputs are clamped to [−104, 89] (exp(−104) rounds
// to 0 in float, exp(89) overflows) so ±inf give 0 / inf instead of NaN; NaN stays NaN.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // vmaxps returns its 2nd operand (x) on NaN
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.0f / 5040.0f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 720.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

// 64-byte aligned float scratch that grows once to the largest size its owner has needed (so the
// steady state allocates nothing); declared thread_local by its users. Throws std::bad_alloc.
struct Scratch {
  float* data = nullptr;
  size_t cap = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(data);
      cap = (n + 1023) & ~size_t(1023);
      data = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
      if (data == nullptr) {
        cap = 0;
        throw std::bad_alloc();
      }
    }
    return data;
  }
};

}  // namespace tfm::kernels
