// src/kernels/adam_avx512.cc — the AVX-512 body of adam_update (kernels.h), 16 elements a step, the last fewer
// under a lane mask. Compiled with AVX-512 flags and -ffp-contract=off (CMakeLists.txt): each multiply and add
// is the twin's (adam.cc), in its order, and the vector sqrt and divide round as the scalar ones, so the body
// is bitwise the twin; p16's rounding is bf16_hi's (common_avx512.h), float_to_bf16's.
#include <immintrin.h>

#include <algorithm>

#include "kernels/common_avx512.h"

// GCC 12 reports -Wmaybe-uninitialized inside _mm512_sqrt_ps (its deliberately undefined pass-through operand,
// _mm512_undefined_ps; GCC PR 105593, fixed in GCC 13); silence just that.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

template <AdamDecay kMode>
void update(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, float scale) {
  const __m512 sc = _mm512_set1_ps(scale), wd = _mm512_set1_ps(c.wd), decay = _mm512_set1_ps(c.decay);
  const __m512 b1 = _mm512_set1_ps(c.beta1), b2 = _mm512_set1_ps(c.beta2);
  const __m512 omb1 = _mm512_set1_ps(c.one_m_b1), omb2 = _mm512_set1_ps(c.one_m_b2);
  const __m512 bc2 = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps), step = _mm512_set1_ps(c.neg_step_size);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = first_n(n - i);
    __m512 pv = _mm512_maskz_loadu_ps(k, p + i);
    __m512 gv = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), sc);  // g·scale
    if constexpr (kMode == AdamDecay::L2) gv = _mm512_add_ps(gv, _mm512_mul_ps(wd, pv));
    if constexpr (kMode == AdamDecay::DECOUPLED) pv = _mm512_mul_ps(pv, decay);
    const __m512 mv = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), b1), _mm512_mul_ps(omb1, gv));
    const __m512 vv =
        _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gv), gv));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2), eps);
    pv = _mm512_add_ps(pv, _mm512_mul_ps(step, _mm512_div_ps(mv, denom)));
    _mm512_mask_storeu_ps(m + i, k, mv);
    _mm512_mask_storeu_ps(v + i, k, vv);
    _mm512_mask_storeu_ps(p + i, k, pv);
  }
}

// With p16, blocks of kBlock elements: the update, then the block's new p (still in L1) rounded. Rounding in the
// update's loop itself costs more: its integer work queues behind the square root and the divisions.
constexpr int64_t kBlock = 1024;

template <AdamDecay kMode>
void body(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, float scale,
          uint16_t* p16) {
  if (!p16) return update<kMode>(p, g, m, v, n, c, scale);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t len = std::min(kBlock, n - i);
    update<kMode>(p + i, g + i, m + i, v + i, len, c, scale);
    round_run_to_bf16(p + i, p16 + i, len);
  }
}

}  // namespace

void adam_update_avx512(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
                        const AdamCoefficients& c, float scale, uint16_t* p16) {
  switch (mode) {
    case AdamDecay::NONE:
      return body<AdamDecay::NONE>(p, g, m, v, n, c, scale, p16);
    case AdamDecay::L2:
      return body<AdamDecay::L2>(p, g, m, v, n, c, scale, p16);
    case AdamDecay::DECOUPLED:
      return body<AdamDecay::DECOUPLED>(p, g, m, v, n, c, scale, p16);
  }
}

}  // namespace tfm::kernels
