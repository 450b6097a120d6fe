// src/kernels/cross_entropy_avx512.cc — AVX-512 bodies of the softmax cross-entropy and of
// log_softmax_rows (contracts in kernels.h). The dispatchers call them one row at a time (they take N
// rows); 16 logits at a time, the row's tail under a lane mask; both forwards start from one row
// log-sum-exp, row_log_sum_exp.
// Compiled with AVX-512 flags by CMake; called only by the dispatchers in cross_entropy.cc after
// cpu_has_avx512(). They perform the twin's (cross_entropy_scalar.h) steps with the vector exp_ps of
// common_avx512.h in float where the twin calls std::exp in double (forward) or float (backward),
// and sum 16 lanes apart in double where the twin sums in order, so they agree with it within float
// rounding, not bitwise (bounds in tests/kernels/cross_entropy_test.cc).
// GCC 12's intrinsic headers seed the pass-through operand of several intrinsics with an
// "undefined" vector that -Wmaybe-uninitialized / -Wuninitialized report from inside the header;
// the value is never read (as in activation_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/common_avx512.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

// One row's log-sum-exp, the statistic both bodies below start from.
struct RowLse {
  double lse = 0;       // m + log Σ_v exp_ps(z_v − m), the sum in double
  double zsum = 0;      // Σ_v z_v in double (kSumZ only: label smoothing's mean logit)
  int64_t argmax = -1;  // the first v with z_v = m (kArgmax only)
};

// A row z (V ≥ 1) in two passes. First m = max z (exact in float; the tail's lanes read as −inf), then
// s = Σ exp_ps(z_v − m) in double (each 16-lane vector converted to two 8-lane doubles, the lanes folded
// at the end) and lse = m + log s in double, the twin's formula (log_softmax_row_scalar). z_v − m is
// rounded to float before exp_ps, a relative 6e-8 on the argument: the term exp(z_v − m) ≤ 1 moves by
// at most 6e-8·|z_v − m|·exp(z_v − m) ≤ 2.2e-8 (the maximum of t·e^−t is 1/e), below exp_ps's own
// 2 ulp. With only_finite, a row holding a NaN or whose maximum is not finite (a +inf logit, or every
// logit −inf) stops after the first pass and returns false, for the twin, whose edge rows these are;
// without it such a row runs through (NaN or inf propagate into lse). The extra sums (kSumZ) and the
// argmax (kArgmax) ride along in the second pass and change nothing in lse.
template <bool kSumZ, bool kArgmax>
bool row_log_sum_exp(const float* z, int64_t V, bool only_finite, RowLse* out) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = neg_inf;
  __mmask16 nan = 0;
  for (int64_t v = 0; v < V; v += 16) {
    const __m512 zv = _mm512_mask_loadu_ps(neg_inf, first_n(V - v), z + v);
    if (only_finite) nan |= _mm512_cmp_ps_mask(zv, zv, _CMP_UNORD_Q);
    mv = _mm512_max_ps(mv, zv);
  }
  const float mf = _mm512_reduce_max_ps(mv);
  if (only_finite && (nan != 0 || !std::isfinite(mf))) return false;
  const __m512 m = _mm512_set1_ps(mf);
  int64_t first = -1;
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, z0 = s0, z1 = s0;
  for (int64_t v = 0; v < V; v += 16) {
    const __mmask16 k = first_n(V - v);
    const __m512 zv = _mm512_maskz_loadu_ps(k, z + v);
    if constexpr (kArgmax) {
      const __mmask16 at_max = _mm512_mask_cmp_ps_mask(k, zv, m, _CMP_EQ_OQ);
      if (first < 0 && at_max != 0) first = v + __builtin_ctz(at_max);
    }
    const __m512 e = _mm512_maskz_mov_ps(k, exp_ps(_mm512_sub_ps(zv, m)));
    s0 = _mm512_add_pd(s0, lo_pd(e));
    s1 = _mm512_add_pd(s1, hi_pd(e));
    if constexpr (kSumZ) {
      z0 = _mm512_add_pd(z0, lo_pd(zv));
      z1 = _mm512_add_pd(z1, hi_pd(zv));
    }
  }
  out->lse = static_cast<double>(mf) + std::log(_mm512_reduce_add_pd(_mm512_add_pd(s0, s1)));
  if constexpr (kSumZ) out->zsum = _mm512_reduce_add_pd(_mm512_add_pd(z0, z1));
  out->argmax = first;
  return true;
}

}  // namespace

// Per row: the row's lse and Σ z (row_log_sum_exp), then the row's loss (cross_entropy_row_loss, as the twin).
void cross_entropy_forward_avx512(const float* logits, const int32_t* target, float* loss, float* lse,
                                  int64_t N, int64_t V, int32_t ignore_index, float label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    RowLse r;
    row_log_sum_exp<true, false>(z, V, false, &r);
    const double l = r.lse;
    lse[n] = static_cast<float>(l);
    if (target[n] == ignore_index) {
      loss[n] = 0.0f;
      continue;
    }
    loss[n] = static_cast<float>(cross_entropy_row_loss(l, z[target[n]], r.zsum, V, label_smoothing));
  }
}

// One row: lse and the first index of the maximum (row_log_sum_exp), or false for an edge row.
bool log_softmax_row_avx512(const float* z, int64_t V, double* lse, int64_t* argmax) {
  if (V <= 0) return false;
  RowLse r;
  if (!row_log_sum_exp<false, true>(z, V, true, &r)) return false;
  *lse = r.lse;
  *argmax = r.argmax;
  return true;
}

// dz_v = scale · (exp(z_v − lse) − ε/V), then dz_t −= scale·(1 − ε): the twin's operations with
// exp_ps for std::exp.
void cross_entropy_backward_avx512(const float* logits, const int32_t* target, const float* lse,
                                   const float* scale, float* dlogits, int64_t N, int64_t V,
                                   int32_t ignore_index, float label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    float* dz = dlogits + n * V;
    if (target[n] == ignore_index) {
      for (int64_t v = 0; v < V; v += 16) _mm512_mask_storeu_ps(dz + v, first_n(V - v), _mm512_setzero_ps());
      continue;
    }
    const __m512 s = _mm512_set1_ps(scale[n]), l = _mm512_set1_ps(lse[n]);
    const __m512 uniform = _mm512_set1_ps(label_smoothing / static_cast<float>(V));
    for (int64_t v = 0; v < V; v += 16) {
      const __mmask16 k = first_n(V - v);
      const __m512 p = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, z + v), l));
      _mm512_mask_storeu_ps(dz + v, k, _mm512_mul_ps(s, _mm512_sub_ps(p, uniform)));
    }
    dz[target[n]] -= scale[n] * (1.0f - label_smoothing);
  }
}

}  // namespace tfm::kernels
