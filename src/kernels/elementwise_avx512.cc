// src/kernels/elementwise_avx512.cc — AVX-512 bodies of the element-wise kernels (contracts in
// kernels.h): add, multiply, dropout, add + dropout, the bias gradient (also with dy rounded to bfloat16) and
// the strided transpose. Compiled with
// AVX-512 flags by CMake; called only by the dispatchers (elementwise.cc, and layer_norm.cc's fused
// residual add) after cpu_has_avx512(). Each is bitwise equal to its scalar twin (elementwise_scalar.h,
// transpose_scalar): a 16-lane main loop, then the remainder with a masked load/store in the same
// function.
// GCC 12's intrinsic headers seed the pass-through operand of the unpack/shuffle intrinsics (the
// register transpose) with an "undefined" vector that -Wmaybe-uninitialized reports from inside the
// header; the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/common_avx512.h"
#include "kernels/dropout_hash_avx512.h"
#include "kernels/kernels.h"
#include "kernels/transpose_avx512.h"

namespace tfm::kernels {

void add_forward_avx512(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

void mul_forward_avx512(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// keep_i = dropout_keep(seed, offset + i, p), sixteen lanes at a time (DropoutMask16,
// dropout_hash_avx512.h).
// y = x·keep/(1 − p), or with ADD y = a + x·keep/(1 − p) (the twin's per-element ops, so bitwise).
template <bool ADD>
static void dropout_body(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset) {
  const __m512 scale = _mm512_set1_ps(dropout_scale(p));
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

void dropout_forward_avx512(const float* x, float* y, int64_t n, float p, uint64_t seed,
                            uint64_t offset) {
  dropout_body<false>(nullptr, x, y, n, p, seed, offset);
}

void transpose_avx512(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst,
                      int64_t ld) {
  transpose_block(src, sl, rows, cols, dst, ld);
}

void add_dropout_forward_avx512(const float* a, const float* x, float* y, int64_t n, float p,
                                uint64_t seed, uint64_t offset) {
  dropout_body<true>(a, x, y, n, p, seed, offset);
}

// db(NV·16 columns) += Σ_rows dy with NV accumulators in registers: one pass over the rows reads
// NV·64 contiguous bytes of each (a 16-column strip per pass would walk the rows at stride ld, which
// the prefetcher follows poorly: 4 KB–8 KB apart for the FFN widths). ROUND: each vector read is also
// stored rounded to bfloat16 at the same place of dy16. MUL: dy is dy ⊙ mul (mul_forward's product), mul read
// at the same places.
template <int NV, bool ROUND = false, bool MUL = false>
static void bias_grad_strip(const float* dy, int64_t ld, float* db, int64_t N, __mmask16 last, uint16_t* dy16 = nullptr,
                            const float* mul = nullptr) {
  __m512 acc[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, db + 16 * v);
  for (int64_t n = 0; n < N; ++n) {
    const float* r = dy + n * ld;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : 0xFFFF;
      __m512 x = _mm512_maskz_loadu_ps(m, r + 16 * v);
      if constexpr (MUL) x = _mm512_mul_ps(x, _mm512_maskz_loadu_ps(m, mul + n * ld + 16 * v));
      acc[v] = _mm512_add_ps(acc[v], x);
      if constexpr (ROUND) {
        const __m512i h = _mm512_srli_epi32(bf16_hi(_mm512_castps_si512(x)), 16);
        _mm256_mask_storeu_epi16(dy16 + n * ld + 16 * v, m, _mm512_cvtepi32_epi16(h));
      }
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(db + 16 * v, v == NV - 1 ? last : 0xFFFF, acc[v]);
}

// db += Σ_rows dy, each column in row order, bitwise as the twin: strips of 256 columns, then 16.
void bias_grad_avx512(const float* dy, int64_t ld, float* db, int64_t N, int64_t F) {
  int64_t f = 0;
  for (; f + 256 <= F; f += 256) bias_grad_strip<16>(dy + f, ld, db + f, N, 0xFFFF);
  for (; f < F; f += 16) bias_grad_strip<1>(dy + f, ld, db + f, N, first_n(F - f));
}

void bias_grad_bf16_avx512(const float* dy, int64_t ld, float* db, uint16_t* dy16, int64_t N, int64_t F) {
  int64_t f = 0;
  for (; f + 256 <= F; f += 256) bias_grad_strip<16, true>(dy + f, ld, db + f, N, 0xFFFF, dy16 + f);
  for (; f < F; f += 16) bias_grad_strip<1, true>(dy + f, ld, db + f, N, first_n(F - f), dy16 + f);
}

void mul_bias_grad_bf16_avx512(const float* a, const float* b, int64_t ld, float* db, uint16_t* dy16, int64_t N,
                               int64_t F) {
  int64_t f = 0;
  for (; f + 256 <= F; f += 256) bias_grad_strip<16, true, true>(a + f, ld, db + f, N, 0xFFFF, dy16 + f, b + f);
  for (; f < F; f += 16) bias_grad_strip<1, true, true>(a + f, ld, db + f, N, first_n(F - f), dy16 + f, b + f);
}

}  // namespace tfm::kernels
