// src/kernels/rowwise_avx512.cc — AVX-512 bodies of the row-wise and element-wise kernels
// (rowwise.h, kernels.h). Compiled with AVX-512 flags by CMake; called only by the dispatchers in
// rowwise.cc after cpu_has_avx512(). Each body does what its scalar twin in rowwise_scalar.h does:
// a 16-lane main loop, then the remainder with a masked load/store in the same function.
//
// Precision: LayerNorm accumulates its moments and evaluates its formulas in double, like the scalar
// template, so the two differ only by the order of the moment sums (and then by at most a rounding of
// y). Everything else is bitwise equal to its twin.
//
// To add a body: write it here against the twin's contract, declare it in rowwise.h (namespace
// avx512), dispatch in rowwise.cc, test in tests/kernels/rowwise_test.cc.
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_cvtps_pd,
// _mm512_extractf64x4_pd and _mm512_cvtepi32_epi16 with an "undefined" vector, which
// -Wmaybe-uninitialized / -Wuninitialized report from inside the header; the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>

#include "kernels/common_avx512.h"
#include "kernels/dropout_hash_avx512.h"
#include "kernels/rowwise.h"
#include "kernels/transpose_avx512.h"

namespace tfm::kernels::avx512 {
namespace {

inline __m512d lo_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
inline __m512d hi_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline __m512 join_ps(__m512d lo, __m512d hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}


}  // namespace

// ---- LayerNorm --------------------------------------------------------------------------------------
// One row's moments in double, as ref::row_moments (two passes; only the order of the sums differs).
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
  mu_out = mu;
  r_out = 1.0 / std::sqrt((var > 0.0 ? var : 0.0) + static_cast<double>(eps));
}

// y = (x − μ)·rstd·w + b, moments in double (two passes), as ref::layer_norm_forward.
void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
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
void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                         int64_t N, int64_t D, float eps) {
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
      _mm512_mask_storeu_ps(dx + n * D + d, k, join_ps(o0, o1));
    }
  }
}

// ---- activations ------------------------------------------------------------------------------------
// relu(x + b) = max(x + b, 0): _mm512_max_ps(v, 0) returns 0 for NaN and −0, like `v > 0 ? v : 0`.
bool bias_activation_forward(ActivationKind k, const float* x, const float* bias, float* y, int64_t N,
                             int64_t F) {
  if (k != ActivationKind::ACT_RELU) return false;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      _mm512_mask_storeu_ps(yr + f, m, _mm512_max_ps(v, zero));
    }
  }
  return true;
}

// relu: dx = dy · [x > 0] (a multiply by 1 or 0, exactly as the twin, so −0 and NaN match too).
bool activation_backward(ActivationKind k, const float* dy, const float* x, float* dx, int64_t N,
                         int64_t F) {
  if (k != ActivationKind::ACT_RELU) return false;
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  const int64_t n = N * F;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(xv, zero, _CMP_GT_OQ), one);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
  return true;
}

// ---- element-wise -----------------------------------------------------------------------------------
void add_forward(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// keep_i = dropout_keep(seed, offset + i, p), sixteen lanes at a time (avx512::DropoutMask16).
// y = x·keep/(1 − p), or with ADD y = a + x·keep/(1 − p) (the twin's per-element ops, so bitwise).
template <bool ADD>
static void dropout_body(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset) {
  const __m512 scale = _mm512_set1_ps(1.0f / (1.0f - p));
  DropoutMask16 drop_mask = DropoutMask16::strided(seed, p, 1);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __mmask16 keep = drop_mask.keep(offset + static_cast<uint64_t>(i));
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 out = _mm512_maskz_mul_ps(keep, v, scale);
    if constexpr (ADD) out = _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), out);
    _mm512_mask_storeu_ps(y + i, m, out);
  }
}

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  dropout_body<false>(nullptr, x, y, n, p, seed, offset);
}

void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  transpose_block(src, sl, rows, cols, dst, ld);
}

// relu(x + b) as bias_activation_forward (max with 0), then dropout_body's keep and multiply.
void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(1.0f / (1.0f - drop.p));
  DropoutMask16 drop_mask = DropoutMask16::strided(drop.seed, drop.p, 1);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    const uint64_t row = drop.offset + static_cast<uint64_t>(n * F);
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      const __mmask16 keep = drop_mask.keep(row + static_cast<uint64_t>(f));
      _mm512_mask_storeu_ps(yr + f, m, _mm512_maskz_mul_ps(keep, _mm512_max_ps(v, zero), scale));
    }
  }
}

// dx = y > 0 ? dy·scale : 0 (a masked multiply: dropped or shut lanes get +0 whatever dy holds).
void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(1.0f / (1.0f - p));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __mmask16 open = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, y + i), zero, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_mul_ps(open, _mm512_maskz_loadu_ps(m, dy + i), scale));
  }
}
void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset) {
  dropout_body<true>(a, x, y, n, p, seed, offset);
}

// db(NV·16 columns) += Σ_rows dy with NV accumulators in registers: one pass over the rows reads
// NV·64 contiguous bytes of each (a 16-column strip per pass walked the rows at stride ld, which
// the prefetcher follows poorly: 4 KB–8 KB apart for the FFN widths).
template <int NV>
static void bias_grad_strip(const float* dy, int64_t ld, float* db, int64_t N, __mmask16 last) {
  __m512 acc[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, db + 16 * v);
  for (int64_t n = 0; n < N; ++n) {
    const float* r = dy + n * ld;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, r + 16 * v));
  }
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(db + 16 * v, v == NV - 1 ? last : 0xFFFF, acc[v]);
}

// db += Σ_rows dy, each column in row order, bitwise as the twin: strips of 256 columns, then 16.
void bias_grad(const float* dy, int64_t ld, float* db, int64_t N, int64_t F) {
  int64_t f = 0;
  for (; f + 256 <= F; f += 256) bias_grad_strip<16>(dy + f, ld, db + f, N, 0xFFFF);
  for (; f < F; f += 16) bias_grad_strip<1>(dy + f, ld, db + f, N, first_n(F - f));
}

// float32 → bfloat16, round to nearest even, as the scalar kernels::float_to_bf16: on the bits u,
//   NaN (|u| > 0x7F800000) → (u >> 16) | 0x0040 (quiet, sign and top payload kept)
//   else                   → (u + 0x7FFF + ((u >> 16) & 1)) >> 16   (the carry may reach the exponent)
// Integer arithmetic rather than VCVTNEPS2BF16, which treats denormal inputs as zero and so would not
// be bitwise equal to the twin.
void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(m, src + i);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(hi, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i h = _mm512_mask_or_epi32(rounded, nan, hi, quiet);
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(h));
  }
}

}  // namespace tfm::kernels::avx512
