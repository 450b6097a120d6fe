// src/kernels/adam.cc — one Adam/AdamW update over a run of elements (kernels.h's adam_update): the dispatching
// entry point and the float scalar twin. The bodies: adam_avx512.cc, adam_avx2.cc. All three files are compiled
// with -ffp-contract=off (CMakeLists.txt), so no multiply and add fuse into an FMA anywhere: every body performs
// the twin's float operations in the twin's order per element, and is bitwise the twin. src/optim.cc runs it over
// its parameters' owned ranges.
#include <cmath>

#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

template <AdamDecay kMode>
void adam_twin(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
               const AdamCoefficients& c, float scale, uint16_t* __restrict p16) {
  for (int64_t j = 0; j < n; ++j) {
    float gj = g[j] * scale;
    if constexpr (kMode == AdamDecay::L2) gj = gj + c.wd * p[j];
    if constexpr (kMode == AdamDecay::DECOUPLED) p[j] = p[j] * c.decay;
    m[j] = m[j] * c.beta1 + c.one_m_b1 * gj;
    v[j] = v[j] * c.beta2 + c.one_m_b2 * gj * gj;
    const float denom = std::sqrt(v[j]) / c.bc2_sqrt + c.eps;
    p[j] = p[j] + c.neg_step_size * (m[j] / denom);
    if (p16) p16[j] = float_to_bf16(p[j]);
  }
}

}  // namespace

void adam_update_scalar(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
                        const AdamCoefficients& c, float scale, uint16_t* p16) {
  switch (mode) {
    case AdamDecay::NONE:
      return adam_twin<AdamDecay::NONE>(p, g, m, v, n, c, scale, p16);
    case AdamDecay::L2:
      return adam_twin<AdamDecay::L2>(p, g, m, v, n, c, scale, p16);
    case AdamDecay::DECOUPLED:
      return adam_twin<AdamDecay::DECOUPLED>(p, g, m, v, n, c, scale, p16);
  }
}

void adam_update(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c,
                 float scale, uint16_t* p16) {
  if (cpu_has_avx512()) return adam_update_avx512(mode, p, g, m, v, n, c, scale, p16);
  if (cpu_has_avx2()) return adam_update_avx2(mode, p, g, m, v, n, c, scale, p16);
  adam_update_scalar(mode, p, g, m, v, n, c, scale, p16);
}

}  // namespace tfm::kernels
