// src/kernels/layer_norm_avx2.cc — AVX2 bodies of LayerNorm (layer_norm_forward_avx2, layer_norm_backward_avx2;
// contracts in kernels.h) for CPUs without AVX-512. Compiled with AVX2 and FMA flags by CMake; called only by
// the dispatchers in layer_norm.cc when cpu_has_avx2() and not cpu_has_avx512(). Each does what its scalar
// twin in layer_norm_scalar.h does, 8 floats a step (each half widened to 4 doubles), the row's last
// fewer than 8 through load_n / store_n (common_avx2.h).
//
// Precision: as the AVX-512 bodies (layer_norm_avx512.cc says it in full): moments and formulas in double,
// so a body differs from the twin only by the order of the moment sums; db is bitwise the twin's; dw is
// the twin's float operation on this body's x̂.
#include <immintrin.h>

#include <cmath>

#include "kernels/common_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

// One row's moments in double, as layer_norm_scalar_detail::row_moments (two passes; only the order of the
// sums differs). A NaN variance maps to 0, as in the AVX-512 body (layer_norm_avx512.cc says why that is safe).
void row_moments(const float* xr, int64_t D, float eps, double& mu_out, double& r_out) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 v = load_n(xr + d, D - d);  // lanes past the row read 0
    s0 = _mm256_add_pd(s0, lo_pd(v));
    s1 = _mm256_add_pd(s1, hi_pd(v));
  }
  const double mu = reduce_add_pd(_mm256_add_pd(s0, s1)) / static_cast<double>(D);
  const __m256d vmu = _mm256_set1_pd(mu);
  __m256d q0 = _mm256_setzero_pd(), q1 = _mm256_setzero_pd();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256i m = first_n_lanes(D - d);
    const __m256 v = load_n(xr + d, D - d);
    // Masked-off lanes hold 0 − μ: zero them so they add nothing.
    const __m256d c0 = _mm256_and_pd(_mm256_sub_pd(lo_pd(v), vmu), lo_mask_pd(m));
    const __m256d c1 = _mm256_and_pd(_mm256_sub_pd(hi_pd(v), vmu), hi_mask_pd(m));
    q0 = _mm256_fmadd_pd(c0, c0, q0);
    q1 = _mm256_fmadd_pd(c1, c1, q1);
  }
  const double var = reduce_add_pd(_mm256_add_pd(q0, q1)) / static_cast<double>(D);
  mu_out = mu;
  r_out = 1.0 / std::sqrt((var > 0.0 ? var : 0.0) + static_cast<double>(eps));
}

}  // namespace

// y = (x − μ)·rstd·w + b, moments in double (two passes), as layer_norm_forward_scalar.
void layer_norm_forward_avx2(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                             int64_t N, int64_t D, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float* yr = y + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
    const __m256d vmu = _mm256_set1_pd(mu), vr = _mm256_set1_pd(r);
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 v = load_n(xr + d, D - d);
      const __m256 wv = load_n(w + d, D - d);
      const __m256 bv = b ? load_n(b + d, D - d) : _mm256_setzero_ps();
      const __m256d h0 = _mm256_mul_pd(_mm256_sub_pd(lo_pd(v), vmu), vr);
      const __m256d h1 = _mm256_mul_pd(_mm256_sub_pd(hi_pd(v), vmu), vr);
      const __m256d y0 = _mm256_fmadd_pd(h0, lo_pd(wv), lo_pd(bv));
      const __m256d y1 = _mm256_fmadd_pd(h1, hi_pd(wv), hi_pd(bv));
      store_n(yr + d, join_ps(y0, y1), D - d);
    }
    if (mean) mean[n] = static_cast<float>(mu);
    if (rstd) rstd[n] = static_cast<float>(r);
  }
}

// With x̂ = (x − μ)·rstd, g = dy ⊙ w: dx = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)); dw += dy ⊙ x̂; db += dy.
// μ, rstd recomputed in double (kernels.h says why).
void layer_norm_backward_avx2(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                              int64_t N, int64_t D, float eps, bool accumulate_dx) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    const float* dyr = dy + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
    const __m256d vmu = _mm256_set1_pd(mu), vr = _mm256_set1_pd(r);
    __m256d g0 = _mm256_setzero_pd(), g1 = _mm256_setzero_pd();
    __m256d gx0 = _mm256_setzero_pd(), gx1 = _mm256_setzero_pd();
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 xv = load_n(xr + d, D - d);
      const __m256 dv = load_n(dyr + d, D - d);  // lanes past the row: dy = 0 → g = 0
      const __m256 wv = load_n(w + d, D - d);
      const __m256d h0 = _mm256_mul_pd(_mm256_sub_pd(lo_pd(xv), vmu), vr);
      const __m256d h1 = _mm256_mul_pd(_mm256_sub_pd(hi_pd(xv), vmu), vr);
      const __m256d dy0 = lo_pd(dv), dy1 = hi_pd(dv);
      const __m256d q0 = _mm256_mul_pd(dy0, lo_pd(wv)), q1 = _mm256_mul_pd(dy1, hi_pd(wv));
      g0 = _mm256_add_pd(g0, q0);
      g1 = _mm256_add_pd(g1, q1);
      gx0 = _mm256_fmadd_pd(q0, h0, gx0);
      gx1 = _mm256_fmadd_pd(q1, h1, gx1);
      // dw += float(dy·x̂) (rounded to float before the add, as the twin); db += dy.
      const __m256 dwv = _mm256_add_ps(load_n(dw + d, D - d), join_ps(_mm256_mul_pd(dy0, h0), _mm256_mul_pd(dy1, h1)));
      store_n(dw + d, dwv, D - d);
      if (db) store_n(db + d, _mm256_add_ps(load_n(db + d, D - d), dv), D - d);
    }
    const double mg = reduce_add_pd(_mm256_add_pd(g0, g1)) / static_cast<double>(D);
    const double mgx = reduce_add_pd(_mm256_add_pd(gx0, gx1)) / static_cast<double>(D);
    const __m256d vmg = _mm256_set1_pd(mg), vmgx = _mm256_set1_pd(mgx);
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 xv = load_n(xr + d, D - d);
      const __m256 dv = load_n(dyr + d, D - d);
      const __m256 wv = load_n(w + d, D - d);
      const __m256d h0 = _mm256_mul_pd(_mm256_sub_pd(lo_pd(xv), vmu), vr);
      const __m256d h1 = _mm256_mul_pd(_mm256_sub_pd(hi_pd(xv), vmu), vr);
      const __m256d q0 = _mm256_mul_pd(lo_pd(dv), lo_pd(wv)), q1 = _mm256_mul_pd(hi_pd(dv), hi_pd(wv));
      // r·(g − mg − x̂·mgx)
      const __m256d o0 = _mm256_mul_pd(vr, _mm256_sub_pd(_mm256_sub_pd(q0, vmg), _mm256_mul_pd(h0, vmgx)));
      const __m256d o1 = _mm256_mul_pd(vr, _mm256_sub_pd(_mm256_sub_pd(q1, vmg), _mm256_mul_pd(h1, vmgx)));
      const __m256 v = join_ps(o0, o1);
      float* dxr = dx + n * D + d;
      store_n(dxr, accumulate_dx ? _mm256_add_ps(load_n(dxr, D - d), v) : v, D - d);
    }
  }
}

}  // namespace tfm::kernels
