// src/kernels/cross_entropy_avx2.cc — AVX2 bodies of the softmax cross-entropy and of log_softmax_rows
// (contracts in kernels.h), for CPUs without AVX-512: cross_entropy_avx512.cc's steps 8 logits at a time
// (the tail of a row padded: −inf for the maximum, 0 for the sums), the vector exp of common_avx2.h, sums in
// double 8 lanes apart. Compiled with AVX2 and FMA flags by CMake; called only by the dispatchers in
// cross_entropy.cc when cpu_has_avx2() and not cpu_has_avx512(). They agree with the twin
// (cross_entropy_scalar.h) within float rounding, the bounds the AVX-512 bodies meet
// (tests/kernels/cross_entropy_test.cc and log_softmax_row_test.cc run every body the CPU has).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

struct RowLse {
  double lse = 0;       // m + log Σ_v exp_ps(z_v − m), the sum in double
  double zsum = 0;      // Σ_v z_v in double (kSumZ only)
  int64_t argmax = -1;  // the first v with z_v = m (kArgmax only)
};

// cross_entropy_avx512.cc's row_log_sum_exp, 8 lanes: m = max z, then s = Σ exp(z_v − m) in double, lse =
// m + log s; with only_finite, false (after the first pass) for a row holding a NaN or whose maximum is not
// finite.
template <bool kSumZ, bool kArgmax>
bool row_log_sum_exp(const float* z, int64_t V, bool only_finite, RowLse* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  __m256 mv = _mm256_set1_ps(kNegInf);
  __m256 nan = _mm256_setzero_ps();
  const int64_t full = V / 8 * 8;
  for (int64_t v = 0; v < V; v += 8) {
    const __m256 zv = v < full ? _mm256_loadu_ps(z + v) : load_tail(z + v, V - v, kNegInf);
    if (only_finite) nan = _mm256_or_ps(nan, _mm256_cmp_ps(zv, zv, _CMP_UNORD_Q));
    mv = _mm256_max_ps(mv, zv);
  }
  const float mf = reduce_max_ps(mv);
  if (only_finite && (_mm256_movemask_ps(nan) != 0 || !std::isfinite(mf))) return false;
  const __m256 m = _mm256_set1_ps(mf);
  int64_t first = -1;
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, z0 = s0, z1 = s0;
  for (int64_t v = 0; v < V; v += 8) {
    const int64_t n = std::min<int64_t>(8, V - v);
    const __m256 zv = v < full ? _mm256_loadu_ps(z + v) : load_tail(z + v, n);
    const __m256 live = _mm256_castsi256_ps(first_n_lanes(n));
    if constexpr (kArgmax) {
      const int at_max = _mm256_movemask_ps(_mm256_and_ps(live, _mm256_cmp_ps(zv, m, _CMP_EQ_OQ)));
      if (first < 0 && at_max != 0) first = v + __builtin_ctz(static_cast<unsigned>(at_max));
    }
    const __m256 e = _mm256_and_ps(live, exp_ps(_mm256_sub_ps(zv, m)));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    if constexpr (kSumZ) {
      z0 = _mm256_add_pd(z0, _mm256_cvtps_pd(_mm256_castps256_ps128(zv)));
      z1 = _mm256_add_pd(z1, _mm256_cvtps_pd(_mm256_extractf128_ps(zv, 1)));
    }
  }
  out->lse = static_cast<double>(mf) + std::log(reduce_add_pd(_mm256_add_pd(s0, s1)));
  if constexpr (kSumZ) out->zsum = reduce_add_pd(_mm256_add_pd(z0, z1));
  out->argmax = first;
  return true;
}

}  // namespace

// Per row: lse and Σ z (row_log_sum_exp), then the row's loss (cross_entropy_row_loss, as the twin).
void cross_entropy_forward_avx2(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                                int64_t V, int32_t ignore_index, float label_smoothing) {
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

bool log_softmax_row_avx2(const float* z, int64_t V, double* lse, int64_t* argmax) {
  if (V <= 0) return false;
  RowLse r;
  if (!row_log_sum_exp<false, true>(z, V, true, &r)) return false;
  *lse = r.lse;
  *argmax = r.argmax;
  return true;
}

// dz_v = scale · (exp(z_v − lse) − ε/V), then dz_t −= scale·(1 − ε).
void cross_entropy_backward_avx2(const float* logits, const int32_t* target, const float* lse, const float* scale,
                                 float* dlogits, int64_t N, int64_t V, int32_t ignore_index, float label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    float* dz = dlogits + n * V;
    if (target[n] == ignore_index) {
      for (int64_t v = 0; v < V; ++v) dz[v] = 0.0f;
      continue;
    }
    const __m256 s = _mm256_set1_ps(scale[n]), l = _mm256_set1_ps(lse[n]);
    const __m256 uniform = _mm256_set1_ps(label_smoothing / static_cast<float>(V));
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
      const __m256 p = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(z + v), l));
      _mm256_storeu_ps(dz + v, _mm256_mul_ps(s, _mm256_sub_ps(p, uniform)));
    }
    if (v < V) {
      const __m256 p = exp_ps(_mm256_sub_ps(load_tail(z + v, V - v), l));
      store_tail(dz + v, _mm256_mul_ps(s, _mm256_sub_ps(p, uniform)), V - v);
    }
    dz[target[n]] -= scale[n] * (1.0f - label_smoothing);
  }
}

}  // namespace tfm::kernels
