// src/kernels/gemm_rows_vnni_avx512.cc — the row kernel's int8 body (gemm_packed.h, "The row kernel"):
// int32 sums of u8 activations times s8 weights read straight from oneDNN's "BA16a64b4a" layout, one
// vpdpbusd per four k and sixteen columns. Compiled with AVX-512 and AVX512-VNNI flags (CMakeLists.txt),
// and called only from gemm_packed.cc where kernels::cpu_has_int8_dot(); nothing else lives in this file,
// so no other code is built for VNNI (tests/kernels/check_isa.py checks it). The sums are exact int32, so
// they equal the scalar twin's (int8_dot_rows in gemm_packed_scalar) bit for bit.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/common_avx512.h"
#include "kernels/gemm_packed.h"

namespace tfm::kernels {
namespace {

// acc[r][v] += Σ_k qa[r, k]·w[k, 16v .. 16v+15] over one block of 16·V columns, the block ⌈K/4⌉ runs of
// 16·V columns × 4 consecutive k (each 32-bit lane one column's four k). vpdpbusd multiplies the four
// u8 activation bytes broadcast to every lane by the lane's four s8 weights and adds the four products to
// the lane's int32 sum, without saturation: exact for K < 2^16 (|u8·s8| ≤ 255·128).
template <int R, int V>
void rows_s8(int64_t K, const uint8_t* qa, int64_t lda, const int8_t* w, __m512i (&acc)[R][V]) {
  for (int64_t k = 0; k < K; k += 4) {
    const int8_t* wk = w + k * (16 * V);  // (k / 4) runs of 64·V bytes
    __m512i wv[V];
    for (int v = 0; v < V; ++v) wv[v] = _mm512_loadu_si512(wk + 64 * v);
    for (int r = 0; r < R; ++r) {
      int32_t four;  // qa[r, k .. k+3]; rows are zero-padded to a multiple of 4
      std::memcpy(&four, qa + r * lda + k, sizeof four);
      const __m512i x = _mm512_set1_epi32(four);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], x, wv[v]);
    }
  }
}

template <int R, int V>
void rows_s8_blocks(const PackedRows& w, const uint8_t* qa, int64_t lda, int32_t* acc_out, int64_t ldacc,
                    int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    __m512i acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_si512();
    rows_s8<R, V>(w.K, qa, lda, static_cast<const int8_t*>(w.data) + b * w.stride, acc);
    for (int v = 0; v < V; ++v) {
      const int64_t n = b * 16 * V + 16 * v;
      const __mmask16 m = first_n(w.N - n);
      if (!m) break;
      for (int r = 0; r < R; ++r) _mm512_mask_storeu_epi32(acc_out + r * ldacc + n, m, acc[r][v]);
    }
  }
}

template <int R>
void rows_s8_v(const PackedRows& w, const uint8_t* qa, int64_t lda, int32_t* acc, int64_t ldacc, int64_t b0,
               int64_t b1) {
  switch (w.n_block) {
    case 16: return rows_s8_blocks<R, 1>(w, qa, lda, acc, ldacc, b0, b1);
    case 32: return rows_s8_blocks<R, 2>(w, qa, lda, acc, ldacc, b0, b1);
    case 48: return rows_s8_blocks<R, 3>(w, qa, lda, acc, ldacc, b0, b1);
    default: return rows_s8_blocks<R, 4>(w, qa, lda, acc, ldacc, b0, b1);  // 64 (packed_for_row_kernel)
  }
}

}  // namespace

void gemm_rows_s8_avx512vnni(const PackedRows& w, int64_t m, const uint8_t* qa, int64_t lda, int32_t* acc,
                             int64_t ldacc, int64_t b0, int64_t b1) {
  switch (m) {
    case 1: return rows_s8_v<1>(w, qa, lda, acc, ldacc, b0, b1);
    case 2: return rows_s8_v<2>(w, qa, lda, acc, ldacc, b0, b1);
    case 3: return rows_s8_v<3>(w, qa, lda, acc, ldacc, b0, b1);
    default: return rows_s8_v<4>(w, qa, lda, acc, ldacc, b0, b1);  // kRowKernelRows
  }
}

}  // namespace tfm::kernels
