// src/kernels/rms_norm_avx512.cc — AVX-512 bodies of RMSNorm (rms_norm_forward_avx512,
// rms_norm_backward_avx512; contracts in kernels.h). Compiled with AVX-512 flags by CMake; called only
// by the dispatchers in rms_norm.cc after cpu_has_avx512(). Each does what its scalar twin in
// rms_norm_scalar.h does: a 16-lane main loop, then the remainder with a masked load/store in the same
// function.
//
// Precision: Σx² and mean(g ⊙ x̂) are accumulated and the formulas evaluated in double, like the scalar
// template, so the two differ only by the order of those sums (and then by at most a rounding of y or
// dx). The backward's x̂ = x·rstd uses the forward's rstd, the same number in both, so dw is bitwise
// the twin's.
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_cvtps_pd and
// _mm512_extractf64x4_pd with an "undefined" vector, which -Wmaybe-uninitialized / -Wuninitialized
// report from inside the header; the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>

#include "kernels/common_avx512.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// y = x·rstd·w with rstd = 1/sqrt(mean(x²) + eps), Σx² in double, as rms_norm_forward_scalar.
void rms_norm_forward_avx512(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D,
                             float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float* yr = y + n * D;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(first_n(D - d), xr + d);  // masked lanes read 0, add 0
      const __m512d v0 = lo_pd(v), v1 = hi_pd(v);
      s0 = _mm512_fmadd_pd(v0, v0, s0);
      s1 = _mm512_fmadd_pd(v1, v1, s1);
    }
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(eps));
    const __m512d vr = _mm512_set1_pd(r);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 v = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      // (x·r)·w, the twin's two products in its order.
      const __m512d y0 = _mm512_mul_pd(_mm512_mul_pd(lo_pd(v), vr), lo_pd(wv));
      const __m512d y1 = _mm512_mul_pd(_mm512_mul_pd(hi_pd(v), vr), hi_pd(wv));
      _mm512_mask_storeu_ps(yr + d, k, join_ps(y0, y1));
    }
    if (rstd) rstd[n] = static_cast<float>(r);
  }
}

// With x̂ = x·rstd, g = dy ⊙ w: dx = rstd·(g − x̂·mean(g ⊙ x̂)); dw += dy ⊙ x̂.
void rms_norm_backward_avx512(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                              float* dw, int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    const float* dyr = dy + n * D;
    const __m512d vr = _mm512_set1_pd(static_cast<double>(rstd[n]));
    __m512d gx0 = _mm512_setzero_pd(), gx1 = _mm512_setzero_pd();
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 xv = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 dv = _mm512_maskz_loadu_ps(k, dyr + d);  // masked lanes: dy = 0 → g = 0
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      const __m512d h0 = _mm512_mul_pd(lo_pd(xv), vr), h1 = _mm512_mul_pd(hi_pd(xv), vr);
      const __m512d dy0 = lo_pd(dv), dy1 = hi_pd(dv);
      gx0 = _mm512_fmadd_pd(_mm512_mul_pd(dy0, lo_pd(wv)), h0, gx0);
      gx1 = _mm512_fmadd_pd(_mm512_mul_pd(dy1, hi_pd(wv)), h1, gx1);
      // dw += float(dy·x̂) (rounded to float before the add, as the twin).
      const __m512 dwv = _mm512_add_ps(_mm512_maskz_loadu_ps(k, dw + d),
                                       join_ps(_mm512_mul_pd(dy0, h0), _mm512_mul_pd(dy1, h1)));
      _mm512_mask_storeu_ps(dw + d, k, dwv);
    }
    const double mgx = _mm512_reduce_add_pd(_mm512_add_pd(gx0, gx1)) / static_cast<double>(D);
    const __m512d vmgx = _mm512_set1_pd(mgx);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 xv = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 dv = _mm512_maskz_loadu_ps(k, dyr + d);
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      const __m512d h0 = _mm512_mul_pd(lo_pd(xv), vr), h1 = _mm512_mul_pd(hi_pd(xv), vr);
      const __m512d q0 = _mm512_mul_pd(lo_pd(dv), lo_pd(wv)), q1 = _mm512_mul_pd(hi_pd(dv), hi_pd(wv));
      // r·(g − x̂·mgx)
      const __m512d o0 = _mm512_mul_pd(vr, _mm512_sub_pd(q0, _mm512_mul_pd(h0, vmgx)));
      const __m512d o1 = _mm512_mul_pd(vr, _mm512_sub_pd(q1, _mm512_mul_pd(h1, vmgx)));
      _mm512_mask_storeu_ps(dx + n * D + d, k, join_ps(o0, o1));
    }
  }
}

}  // namespace tfm::kernels
