// src/kernels/rms_norm_avx2.cc — AVX2 bodies of RMSNorm (rms_norm_forward_avx2, rms_norm_backward_avx2;
// contracts in kernels.h) for CPUs without AVX-512. Compiled with AVX2 and FMA flags by CMake; called only by
// the dispatchers in rms_norm.cc when cpu_has_avx2() and not cpu_has_avx512(). Each does what its scalar twin
// in rms_norm_scalar.h does, 8 floats a step (each half widened to 4 doubles), the row's last fewer than 8
// through load_n / store_n (common_avx2.h).
//
// Precision: as the AVX-512 bodies (rms_norm_avx512.cc): Σx² and mean(g ⊙ x̂) in double, so a body differs
// from the twin only by the order of those sums; the backward's x̂ uses the forward's rstd, so dw is bitwise
// the twin's.
#include <immintrin.h>

#include <cmath>

#include "kernels/common_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// y = x·rstd·w with rstd = 1/sqrt(mean(x²) + eps), Σx² in double, as rms_norm_forward_scalar.
void rms_norm_forward_avx2(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float* yr = y + n * D;
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 v = load_n(xr + d, D - d);  // lanes past the row read 0, add 0
      const __m256d v0 = lo_pd(v), v1 = hi_pd(v);
      s0 = _mm256_fmadd_pd(v0, v0, s0);
      s1 = _mm256_fmadd_pd(v1, v1, s1);
    }
    const double ss = reduce_add_pd(_mm256_add_pd(s0, s1));
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(eps));
    const __m256d vr = _mm256_set1_pd(r);
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 v = load_n(xr + d, D - d);
      const __m256 wv = load_n(w + d, D - d);
      // (x·r)·w, the twin's two products in its order.
      const __m256d y0 = _mm256_mul_pd(_mm256_mul_pd(lo_pd(v), vr), lo_pd(wv));
      const __m256d y1 = _mm256_mul_pd(_mm256_mul_pd(hi_pd(v), vr), hi_pd(wv));
      store_n(yr + d, join_ps(y0, y1), D - d);
    }
    if (rstd) rstd[n] = static_cast<float>(r);
  }
}

// With x̂ = x·rstd, g = dy ⊙ w: dx = rstd·(g − x̂·mean(g ⊙ x̂)); dw += dy ⊙ x̂.
void rms_norm_backward_avx2(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                            int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    const float* dyr = dy + n * D;
    const __m256d vr = _mm256_set1_pd(static_cast<double>(rstd[n]));
    __m256d gx0 = _mm256_setzero_pd(), gx1 = _mm256_setzero_pd();
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 xv = load_n(xr + d, D - d);
      const __m256 dv = load_n(dyr + d, D - d);  // lanes past the row: dy = 0 → g = 0
      const __m256 wv = load_n(w + d, D - d);
      const __m256d h0 = _mm256_mul_pd(lo_pd(xv), vr), h1 = _mm256_mul_pd(hi_pd(xv), vr);
      const __m256d dy0 = lo_pd(dv), dy1 = hi_pd(dv);
      gx0 = _mm256_fmadd_pd(_mm256_mul_pd(dy0, lo_pd(wv)), h0, gx0);
      gx1 = _mm256_fmadd_pd(_mm256_mul_pd(dy1, hi_pd(wv)), h1, gx1);
      // dw += float(dy·x̂) (rounded to float before the add, as the twin).
      const __m256 dwv = _mm256_add_ps(load_n(dw + d, D - d), join_ps(_mm256_mul_pd(dy0, h0), _mm256_mul_pd(dy1, h1)));
      store_n(dw + d, dwv, D - d);
    }
    const double mgx = reduce_add_pd(_mm256_add_pd(gx0, gx1)) / static_cast<double>(D);
    const __m256d vmgx = _mm256_set1_pd(mgx);
    for (int64_t d = 0; d < D; d += 8) {
      const __m256 xv = load_n(xr + d, D - d);
      const __m256 dv = load_n(dyr + d, D - d);
      const __m256 wv = load_n(w + d, D - d);
      const __m256d h0 = _mm256_mul_pd(lo_pd(xv), vr), h1 = _mm256_mul_pd(hi_pd(xv), vr);
      const __m256d q0 = _mm256_mul_pd(lo_pd(dv), lo_pd(wv)), q1 = _mm256_mul_pd(hi_pd(dv), hi_pd(wv));
      // r·(g − x̂·mgx)
      const __m256d o0 = _mm256_mul_pd(vr, _mm256_sub_pd(q0, _mm256_mul_pd(h0, vmgx)));
      const __m256d o1 = _mm256_mul_pd(vr, _mm256_sub_pd(q1, _mm256_mul_pd(h1, vmgx)));
      store_n(dx + n * D + d, join_ps(o0, o1), D - d);
    }
  }
}

}  // namespace tfm::kernels
