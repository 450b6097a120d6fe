// src/kernels/activation_avx2.cc — AVX2 bodies of GELU's kernels for CPUs without AVX-512 (contracts in
// kernels.h): bias + gelu forward and gelu backward, 8 lanes. Compiled with AVX2 and FMA flags by CMake
// (the *_avx2.cc files); called only by the dispatchers in activation.cc, when cpu_has_avx2() and not
// cpu_has_avx512(). The method and coefficients are activation_avx512.cc's (gelu_erf.h), so the two agree
// with the twin and with float64 within the same bounds (tests/kernels/activation_test.cc runs every body
// the CPU has against both). Other kinds return false: the entry point then runs the scalar twin.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common_avx2.h"
#include "kernels/gelu_erf.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

using gelu_erf::kErfcG;
using gelu_erf::kErfP;

// c[0]·x^(K−1) + … + c[K−1] by Horner's rule with FMA.
template <size_t K>
inline __m256 horner(__m256 x, const float (&c)[K]) {
  __m256 y = _mm256_set1_ps(c[0]);
  for (size_t i = 1; i < K; ++i) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c[i]));
  return y;
}

struct GeluTerms {
  __m256 q;  // 1 + erf(x/√2)
  __m256 e;  // exp(−x²/2)
};

// activation_avx512.cc's gelu_terms, operation for operation (gelu_erf.h has the method).
inline GeluTerms gelu_terms(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752440f));
  const __m256 az = abs_ps(z);
  const __m256 xc = _mm256_min_ps(abs_ps(x), _mm256_set1_ps(15.0f));
  const __m256 h = _mm256_mul_ps(xc, xc);
  const __m256 l = _mm256_fmsub_ps(xc, xc, h);
  const __m256 e0 = exp_ps(_mm256_mul_ps(h, _mm256_set1_ps(-0.5f)));
  const __m256 e = _mm256_fnmadd_ps(e0, _mm256_mul_ps(l, _mm256_set1_ps(0.5f)), e0);
  const __m256 q_small = _mm256_fmadd_ps(z, horner(_mm256_mul_ps(z, z), kErfP), one);
  const __m256 t = _mm256_div_ps(one, _mm256_min_ps(_mm256_max_ps(az, one), _mm256_set1_ps(10.0f)));
  const __m256 g = horner(_mm256_sub_ps(t, _mm256_set1_ps(0.55f)), kErfcG);
  const __m256 erfc = _mm256_mul_ps(e, _mm256_mul_ps(t, g));
  const __m256 pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 q_large = _mm256_blendv_ps(erfc, _mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), pos);
  const __m256 small = _mm256_cmp_ps(az, one, _CMP_LT_OQ);
  return {_mm256_blendv_ps(q_large, q_small, small), e};
}

// gelu(v) = (0.5·v)·q, the twin's order of operations.
inline __m256 gelu_ps(__m256 v) { return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), gelu_terms(v).q); }

// gelu'(v) = 0.5·q + v·(e/√(2π)).
inline __m256 gelu_grad_ps(__m256 v) {
  const GeluTerms g = gelu_terms(v);
  const __m256 pdf = _mm256_mul_ps(g.e, _mm256_set1_ps(0.39894228040143267794f));
  return _mm256_fmadd_ps(v, pdf, _mm256_mul_ps(_mm256_set1_ps(0.5f), g.q));
}

}  // namespace

bool bias_activation_forward_avx2(Activation k, const float* x, const float* bias, float* y, int64_t N, int64_t F) {
  if (k != Activation::GELU) return false;
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    int64_t f = 0;
    for (; f + 8 <= F; f += 8) {
      __m256 v = _mm256_loadu_ps(xr + f);
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + f));
      _mm256_storeu_ps(yr + f, gelu_ps(v));
    }
    if (f < F) {
      __m256 v = load_tail(xr + f, F - f);
      if (bias) v = _mm256_add_ps(v, load_tail(bias + f, F - f));
      store_tail(yr + f, gelu_ps(v), F - f);
    }
  }
  return true;
}

bool activation_backward_avx2(Activation k, const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
  if (k != Activation::GELU) return false;
  const int64_t n = N * F;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), gelu_grad_ps(_mm256_loadu_ps(x + i))));
  if (i < n) store_tail(dx + i, _mm256_mul_ps(load_tail(dy + i, n - i), gelu_grad_ps(load_tail(x + i, n - i))), n - i);
  return true;
}

}  // namespace tfm::kernels
