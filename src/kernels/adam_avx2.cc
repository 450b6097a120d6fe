// src/kernels/adam_avx2.cc — the AVX2 body of adam_update (kernels.h), 8 elements a step, the last fewer through
// load_n / store_n (common_avx2.h). Compiled with AVX2 flags and -ffp-contract=off (CMakeLists.txt): each
// multiply and add is the twin's (adam.cc), in its order, and the vector sqrt and divide round as the scalar
// ones, so the body is bitwise the twin; p16's rounding is bf16_hi's (common_avx2.h), float_to_bf16's.
#include <immintrin.h>

#include <algorithm>

#include "kernels/common_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

template <AdamDecay kMode>
void update(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, float scale) {
  const __m256 sc = _mm256_set1_ps(scale), wd = _mm256_set1_ps(c.wd), decay = _mm256_set1_ps(c.decay);
  const __m256 b1 = _mm256_set1_ps(c.beta1), b2 = _mm256_set1_ps(c.beta2);
  const __m256 omb1 = _mm256_set1_ps(c.one_m_b1), omb2 = _mm256_set1_ps(c.one_m_b2);
  const __m256 bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps), step = _mm256_set1_ps(c.neg_step_size);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t k = n - i;  // load_n / store_n: all 8 lanes when k ≥ 8
    __m256 pv = load_n(p + i, k);
    __m256 gv = _mm256_mul_ps(load_n(g + i, k), sc);  // g·scale
    if constexpr (kMode == AdamDecay::L2) gv = _mm256_add_ps(gv, _mm256_mul_ps(wd, pv));
    if constexpr (kMode == AdamDecay::DECOUPLED) pv = _mm256_mul_ps(pv, decay);
    const __m256 mv = _mm256_add_ps(_mm256_mul_ps(load_n(m + i, k), b1), _mm256_mul_ps(omb1, gv));
    const __m256 vv = _mm256_add_ps(_mm256_mul_ps(load_n(v + i, k), b2), _mm256_mul_ps(_mm256_mul_ps(omb2, gv), gv));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2), eps);
    pv = _mm256_add_ps(pv, _mm256_mul_ps(step, _mm256_div_ps(mv, denom)));
    store_n(m + i, mv, k);
    store_n(v + i, vv, k);
    store_n(p + i, pv, k);
  }
}

// With p16, blocks of kBlock elements: the update, then the block's new p (still in L1) rounded, as the AVX-512
// body does: rounding inside the update's loop costs more here too.
constexpr int64_t kBlock = 1024;

template <AdamDecay kMode>
void body(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c, float scale,
          uint16_t* p16) {
  if (!p16) return update<kMode>(p, g, m, v, n, c, scale);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t len = std::min(kBlock, n - i);
    update<kMode>(p + i, g + i, m + i, v + i, len, c, scale);
    for (int64_t j = 0; j < len; j += 8) store_bf16_n(p16 + i + j, load_n(p + i + j, len - j), len - j);
  }
}

}  // namespace

void adam_update_avx2(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
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
