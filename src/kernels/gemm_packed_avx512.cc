// src/kernels/gemm_packed_avx512.cc — gemm_packed.h's AVX-512 code: the bfloat16 rounding,
// convert_rows_to_bf16_avx512 (the rounding every bf16 matmul's operands go through: gemm_packed's and
// gemm_bf16's), and the row kernel gemm_rows_avx512 (products of a few rows, read straight from oneDNN's
// blocked layout; twin gemm_rows_scalar in gemm_packed.cc). Every other product is oneDNN's. Compiled with
// AVX-512 flags by CMake; called only from gemm_packed.cc after cpu_has_avx512().
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_cvtepi32_epi16 with an
// "undefined" vector, which -Wmaybe-uninitialized / -Wuninitialized report from inside the header;
// the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "kernels/common_avx512.h"
#include "kernels/gemm_packed.h"

namespace tfm::kernels {

// The rounding is common_avx512.h's round_run_to_bf16 (bf16_hi: the scalar kernels::float_to_bf16's).
void convert_rows_to_bf16_avx512(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst) {
  if (lds == K) return round_run_to_bf16(src, dst, m * K);  // dense: one run
  for (int64_t i = 0; i < m; ++i) round_run_to_bf16(src + i * lds, dst + i * K, K);
}

namespace {

// acc[r][v] += Σ_k a[r, k]·w[k, 16v .. 16v+15] over one block of 16·V columns: f32, the block is K rows
// of 16·V floats (group 1). One FMA per k and vector: each lane is one output's k-ascending fma chain.
template <int R, int V>
void rows_f32(int64_t K, const float* a, int64_t lda, const float* w, __m512 (&acc)[R][V]) {
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = w + k * (16 * V);
    __m512 wv[V];
    for (int v = 0; v < V; ++v) wv[v] = _mm512_loadu_ps(wk + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, wv[v], acc[r][v]);
    }
  }
}

// The same for bf16 (group 2): the block is ⌈K/2⌉ runs of 16·V column pairs, each 32-bit lane one
// column's (k even, k odd) bfloat16 pair, k even in the low half. Widening a bfloat16 to float is a
// 16-bit shift, exact; the products of two bfloat16 values are exact in float, so each step is the
// twin's fma. k even goes first: the chain stays k-ascending.
template <int R, int V>
void rows_bf16(int64_t K, const float* a, int64_t lda, const uint16_t* w, __m512 (&acc)[R][V]) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t k = 0; k < K; k += 2) {
    const uint16_t* wk = w + k * (16 * V);  // (k / 2) runs of 32·V halves
    __m512 even[V], odd[V];
    for (int v = 0; v < V; ++v) {
      const __m512i pair = _mm512_loadu_si512(wk + 32 * v);
      even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
      odd[v] = _mm512_castsi512_ps(_mm512_and_si512(pair, high));
    }
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, even[v], acc[r][v]);
    }
    if (k + 1 == K) break;  // odd K: the last pair's second half is padding
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k + 1]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, odd[v], acc[r][v]);
    }
  }
}

// Blocks [b0, b1) with R rows and 16·V columns a block: the sums, then C = sum (+ bias) for the columns
// below N (the last block's padding columns are computed and dropped).
template <int R, int V>
void rows_blocks(const PackedRows& w, const float* a, int64_t lda, const float* bias, float* C, int64_t ldc,
                 int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    if (w.group == 1)
      rows_f32<R, V>(w.K, a, lda, static_cast<const float*>(w.data) + b * w.stride, acc);
    else
      rows_bf16<R, V>(w.K, a, lda, static_cast<const uint16_t*>(w.data) + b * w.stride, acc);
    for (int v = 0; v < V; ++v) {
      const int64_t n = b * 16 * V + 16 * v;
      const __mmask16 m = first_n(w.N - n);
      if (!m) break;
      const __m512 add = bias ? _mm512_maskz_loadu_ps(m, bias + n) : _mm512_setzero_ps();
      for (int r = 0; r < R; ++r)
        _mm512_mask_storeu_ps(C + r * ldc + n, m, bias ? _mm512_add_ps(acc[r][v], add) : acc[r][v]);
    }
  }
}

template <int R>
void rows_dispatch_v(const PackedRows& w, const float* a, int64_t lda, const float* bias, float* C, int64_t ldc,
                     int64_t b0, int64_t b1) {
  switch (w.n_block) {
    case 16: return rows_blocks<R, 1>(w, a, lda, bias, C, ldc, b0, b1);
    case 32: return rows_blocks<R, 2>(w, a, lda, bias, C, ldc, b0, b1);
    case 48: return rows_blocks<R, 3>(w, a, lda, bias, C, ldc, b0, b1);
    default: return rows_blocks<R, 4>(w, a, lda, bias, C, ldc, b0, b1);  // 64 (packed_for_row_kernel)
  }
}

}  // namespace

void gemm_rows_avx512(const PackedRows& w, int64_t m, const float* a, int64_t lda, const float* bias, float* C,
                      int64_t ldc, int64_t b0, int64_t b1) {
  switch (m) {
    case 1: return rows_dispatch_v<1>(w, a, lda, bias, C, ldc, b0, b1);
    case 2: return rows_dispatch_v<2>(w, a, lda, bias, C, ldc, b0, b1);
    case 3: return rows_dispatch_v<3>(w, a, lda, bias, C, ldc, b0, b1);
    default: return rows_dispatch_v<4>(w, a, lda, bias, C, ldc, b0, b1);  // kRowKernelRows
  }
}

}  // namespace tfm::kernels
