// src/kernels/layer_norm_avx512.cc — AVX-512 bodies of LayerNorm (layer_norm_forward_avx512,
// layer_norm_backward_avx512; contracts in kernels.h). Compiled with AVX-512 flags by CMake; called
// only by the dispatchers in layer_norm.cc after cpu_has_avx512(). Each does what its scalar twin in
// layer_norm_scalar.h does: a 16-lane main loop, then the remainder with a masked load/store in the
// same function.
//
// Precision: the moments are accumulated and the formulas evaluated in double, like the scalar
// template, so the two differ only by the order of the moment sums (and then by at most a rounding of
// y). db is bitwise the twin's: the same float adds of dy, in the same order. dw += float(dy·x̂) is the
// twin's float operation, but on this body's x̂ = (x − μ)·rstd, whose μ and rstd (row_moments, summed
// in another order) may differ from the twin's in the last bits of a double; the float rounding of
// dy·x̂ differs only where the double product lies that close to a rounding boundary between two
// floats (then by one ulp). That is rare, not excluded: tests/kernels/layer_norm_test.cc asserts equal
// bits on its fixed inputs.
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

// ---- LayerNorm --------------------------------------------------------------------------------------
// One row's moments in double, as layer_norm_scalar_detail::row_moments (two passes; only the order
// of the sums differs).
static void row_moments(const float* xr, int64_t D, float eps, double& mu_out, double& r_out) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t d = 0; d < D; d += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(first_n(D - d), xr + d);  // masked lanes read 0
    s0 = _mm512_add_pd(s0, lo_pd(v));
    s1 = _mm512_add_pd(s1, hi_pd(v));
  }
  const double mu = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / static_cast<double>(D);
  const __m512d vmu = _mm512_set1_pd(mu);
  __m512d q0 = _mm512_setzero_pd(), q1 = _mm512_setzero_pd();
  for (int64_t d = 0; d < D; d += 16) {
    const int64_t rem = D - d;
    const __m512 v = _mm512_maskz_loadu_ps(first_n(rem), xr + d);
    // Masked-off lanes hold 0 − μ: zero them so they add nothing.
    const __mmask8 k0 = static_cast<__mmask8>(first_n(rem) & 0xFF);
    const __mmask8 k1 = static_cast<__mmask8>(first_n(rem) >> 8);
    const __m512d c0 = _mm512_maskz_sub_pd(k0, lo_pd(v), vmu);
    const __m512d c1 = _mm512_maskz_sub_pd(k1, hi_pd(v), vmu);
    q0 = _mm512_fmadd_pd(c0, c0, q0);
    q1 = _mm512_fmadd_pd(c1, c1, q1);
  }
  double var = _mm512_reduce_add_pd(_mm512_add_pd(q0, q1)) / static_cast<double>(D);
  // A two-pass variance is a sum of rounded squares, never negative, so `var > 0 ? var : 0` changes
  // no finite var (it would guard the one-pass E[x²] − μ², which rounding can push below 0). It does
  // map a NaN var (x holding NaN or ±inf) to 0, giving rstd = 1/√eps where the twin's std::max keeps
  // NaN; y is non-finite in both.
  mu_out = mu;
  r_out = 1.0 / std::sqrt((var > 0.0 ? var : 0.0) + static_cast<double>(eps));
}

// y = (x − μ)·rstd·w + b, moments in double (two passes), as layer_norm_forward_scalar.
void layer_norm_forward_avx512(const float* x, const float* w, const float* b, float* y, float* mean,
                               float* rstd, int64_t N, int64_t D, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float* yr = y + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
    const __m512d vmu = _mm512_set1_pd(mu), vr = _mm512_set1_pd(r);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 v = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      const __m512 bv = b ? _mm512_maskz_loadu_ps(k, b + d) : _mm512_setzero_ps();
      const __m512d h0 = _mm512_mul_pd(_mm512_sub_pd(lo_pd(v), vmu), vr);
      const __m512d h1 = _mm512_mul_pd(_mm512_sub_pd(hi_pd(v), vmu), vr);
      const __m512d y0 = _mm512_fmadd_pd(h0, lo_pd(wv), lo_pd(bv));
      const __m512d y1 = _mm512_fmadd_pd(h1, hi_pd(wv), hi_pd(bv));
      _mm512_mask_storeu_ps(yr + d, k, join_ps(y0, y1));
    }
    if (mean) mean[n] = static_cast<float>(mu);
    if (rstd) rstd[n] = static_cast<float>(r);
  }
}

// With x̂ = (x − μ)·rstd, g = dy ⊙ w: dx = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)); dw += dy ⊙ x̂; db += dy.
// μ, rstd recomputed in double (kernels.h says why).
void layer_norm_backward_avx512(const float* dy, const float* x, const float* w, float* dx, float* dw,
                                float* db, int64_t N, int64_t D, float eps, bool accumulate_dx) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    const float* dyr = dy + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
    const __m512d vmu = _mm512_set1_pd(mu), vr = _mm512_set1_pd(r);
    __m512d g0 = _mm512_setzero_pd(), g1 = _mm512_setzero_pd();
    __m512d gx0 = _mm512_setzero_pd(), gx1 = _mm512_setzero_pd();
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 xv = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 dv = _mm512_maskz_loadu_ps(k, dyr + d);  // masked lanes: dy = 0 → g = 0
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      const __m512d h0 = _mm512_mul_pd(_mm512_sub_pd(lo_pd(xv), vmu), vr);
      const __m512d h1 = _mm512_mul_pd(_mm512_sub_pd(hi_pd(xv), vmu), vr);
      const __m512d dy0 = lo_pd(dv), dy1 = hi_pd(dv);
      const __m512d q0 = _mm512_mul_pd(dy0, lo_pd(wv)), q1 = _mm512_mul_pd(dy1, hi_pd(wv));
      g0 = _mm512_add_pd(g0, q0);
      g1 = _mm512_add_pd(g1, q1);
      gx0 = _mm512_fmadd_pd(q0, h0, gx0);
      gx1 = _mm512_fmadd_pd(q1, h1, gx1);
      // dw += float(dy·x̂) (rounded to float before the add, as the twin); db += dy.
      const __m512 dwv = _mm512_add_ps(_mm512_maskz_loadu_ps(k, dw + d),
                                       join_ps(_mm512_mul_pd(dy0, h0), _mm512_mul_pd(dy1, h1)));
      _mm512_mask_storeu_ps(dw + d, k, dwv);
      if (db) _mm512_mask_storeu_ps(db + d, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, db + d), dv));
    }
    const double mg = _mm512_reduce_add_pd(_mm512_add_pd(g0, g1)) / static_cast<double>(D);
    const double mgx = _mm512_reduce_add_pd(_mm512_add_pd(gx0, gx1)) / static_cast<double>(D);
    const __m512d vmg = _mm512_set1_pd(mg), vmgx = _mm512_set1_pd(mgx);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 k = first_n(D - d);
      const __m512 xv = _mm512_maskz_loadu_ps(k, xr + d);
      const __m512 dv = _mm512_maskz_loadu_ps(k, dyr + d);
      const __m512 wv = _mm512_maskz_loadu_ps(k, w + d);
      const __m512d h0 = _mm512_mul_pd(_mm512_sub_pd(lo_pd(xv), vmu), vr);
      const __m512d h1 = _mm512_mul_pd(_mm512_sub_pd(hi_pd(xv), vmu), vr);
      const __m512d q0 = _mm512_mul_pd(lo_pd(dv), lo_pd(wv)), q1 = _mm512_mul_pd(hi_pd(dv), hi_pd(wv));
      // r·(g − mg − x̂·mgx)
      const __m512d o0 = _mm512_mul_pd(vr, _mm512_sub_pd(_mm512_sub_pd(q0, vmg), _mm512_mul_pd(h0, vmgx)));
      const __m512d o1 = _mm512_mul_pd(vr, _mm512_sub_pd(_mm512_sub_pd(q1, vmg), _mm512_mul_pd(h1, vmgx)));
      const __m512 v = join_ps(o0, o1);
      float* dxr = dx + n * D + d;
      _mm512_mask_storeu_ps(dxr, k, accumulate_dx ? _mm512_add_ps(_mm512_maskz_loadu_ps(k, dxr), v) : v);
    }
  }
}

}  // namespace tfm::kernels
