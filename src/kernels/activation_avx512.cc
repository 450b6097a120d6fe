// src/kernels/activation_avx512.cc — AVX-512 bodies of the activation kernels (contracts in kernels.h):
// bias + relu forward, relu backward, and the FFN's bias + relu + dropout pass with its backward.
// Compiled with AVX-512 flags by CMake; called only by the dispatchers in activation.cc after
// cpu_has_avx512(). Each is bitwise equal to its scalar twin in activation_scalar.h: a 16-lane main
// loop, then the remainder with a masked load/store in the same function. The other kinds (gelu,
// the gated ones) have no SIMD body: bias_activation_forward_avx512 and activation_backward_avx512
// return false for them and the dispatcher runs the twin.
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_max_ps and _mm512_srli_epi32
// with an "undefined" vector that -Wmaybe-uninitialized reports from inside the header; the value is
// never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/common_avx512.h"
#include "kernels/dropout_hash_avx512.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// relu(x + b) = max(x + b, 0): _mm512_max_ps(v, 0) returns 0 for NaN and −0, like `v > 0 ? v : 0`.
bool bias_activation_forward_avx512(Activation k, const float* x, const float* bias, float* y,
                                    int64_t N, int64_t F) {
  if (k != Activation::RELU) return false;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      _mm512_mask_storeu_ps(yr + f, m, _mm512_max_ps(v, zero));
    }
  }
  return true;
}

// relu: dx = dy · [x > 0] (a multiply by 1 or 0, exactly as the twin, so −0 and NaN match too).
bool activation_backward_avx512(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                                int64_t F) {
  if (k != Activation::RELU) return false;
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  const int64_t n = N * F;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xv, zero, _CMP_GT_OQ), one);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
  return true;
}

// relu(x + b) as bias_activation_forward_avx512 (max with 0), then dropout_forward_avx512's keep and
// multiply.
void bias_relu_dropout_forward_avx512(const float* x, const float* bias, float* y, int64_t N,
                                      int64_t F, const DropoutSpec& drop) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(1.0f / (1.0f - drop.p));
  DropoutMask16 drop_mask = DropoutMask16::strided(drop.seed, drop.p, 1);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    const uint64_t row = drop.offset + static_cast<uint64_t>(n * F);
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      const __mmask16 keep = drop_mask.keep(row + static_cast<uint64_t>(f));
      _mm512_mask_storeu_ps(yr + f, m, _mm512_maskz_mul_ps(keep, _mm512_max_ps(v, zero), scale));
    }
  }
}

// dx = y > 0 ? dy·scale : 0 (a masked multiply: dropped or shut lanes get +0 whatever dy holds).
void relu_dropout_backward_avx512(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(1.0f / (1.0f - p));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __mmask16 open = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, y + i), zero, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_mul_ps(open, _mm512_maskz_loadu_ps(m, dy + i), scale));
  }
}

}  // namespace tfm::kernels
