// src/kernels/elementwise_avx2.cc — AVX2 bodies of the element-wise kernels for CPUs without AVX-512
// (contracts in kernels.h): add, multiply, dropout, add + dropout, the bias gradient and the strided transpose.
// Compiled with AVX2 and FMA flags by CMake; called only by the dispatchers (elementwise.cc, and layer_norm.cc's fused
// residual add) when cpu_has_avx2() and not cpu_has_avx512(). Each is bitwise equal to its scalar twin
// (elementwise_scalar.h): the twin's per-element operations, 8 lanes at a time, the last fewer than 8
// through load_tail / store_tail (common_avx2.h: plain stores, AMD microcodes masked ones), but in the bias
// gradient's strips, stored once per strip under a lane mask.
#include <immintrin.h>

#include "kernels/common_avx2.h"
#include "kernels/dropout_hash_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

void add_forward_avx2(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    store_tail(y + i, _mm256_add_ps(load_tail(a + i, n - i), load_tail(b + i, n - i)), n - i);
  }
}

void mul_forward_avx2(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    store_tail(y + i, _mm256_mul_ps(load_tail(a + i, n - i), load_tail(b + i, n - i)), n - i);
  }
}

namespace {

// keep_i = dropout_keep(seed, offset + i, p), eight lanes at a time (DropoutMask8, dropout_hash_avx2.h).
// y = x·keep/(1 − p) (+0 where dropped), or with ADD y = a + that: the twin's per-element ops, so bitwise.
template <bool ADD>
void dropout_body(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const __m256 scale = _mm256_set1_ps(dropout_scale(p));
  DropoutMask8 drop_mask(seed, p);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 keep = drop_mask.keep(offset + static_cast<uint64_t>(i));
    __m256 out = _mm256_and_ps(keep, _mm256_mul_ps(load_n(x + i, n - i), scale));
    if constexpr (ADD) out = _mm256_add_ps(load_n(a + i, n - i), out);
    store_n(y + i, out, n - i);
  }
}

// db (NV·8 columns) += Σ_rows dy with NV accumulators in registers, one pass over the rows (as
// elementwise_avx512.cc's bias_grad_strip); the last vector's lanes from `last` on are masked off.
template <int NV>
void bias_grad_strip(const float* dy, int64_t ld, float* db, int64_t N, __m256i last) {
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 acc[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_maskload_ps(db + 8 * v, v == NV - 1 ? last : all);
  for (int64_t n = 0; n < N; ++n) {
    const float* r = dy + n * ld;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[v] = _mm256_add_ps(acc[v], _mm256_maskload_ps(r + 8 * v, v == NV - 1 ? last : all));
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) _mm256_maskstore_ps(db + 8 * v, v == NV - 1 ? last : all, acc[v]);
}

}  // namespace

void dropout_forward_avx2(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  dropout_body<false>(nullptr, x, y, n, p, seed, offset);
}

void add_dropout_forward_avx2(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                              uint64_t offset) {
  dropout_body<true>(a, x, y, n, p, seed, offset);
}

// db += Σ_rows dy, each column in row order, bitwise as the twin: strips of 64 columns, then 8.
void bias_grad_avx2(const float* dy, int64_t ld, float* db, int64_t N, int64_t F) {
  int64_t f = 0;
  for (; f + 64 <= F; f += 64) bias_grad_strip<8>(dy + f, ld, db + f, N, _mm256_set1_epi32(-1));
  for (; f < F; f += 8) bias_grad_strip<1>(dy + f, ld, db + f, N, first_n_lanes(F - f));
}

// Full 8×8 blocks through registers; the rows and columns past the last full block one element at a
// time, as the twin. Only moves data, so bitwise the twin.
void transpose_avx2(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t r0 = 0; r0 < rows8; r0 += 8)
    for (int64_t c0 = 0; c0 < cols8; c0 += 8) {
      __m256 b[8];
      for (int64_t i = 0; i < 8; ++i) b[i] = _mm256_loadu_ps(src + (r0 + i) * sl + c0);
      transpose8x8(b);
      for (int64_t c = 0; c < 8; ++c) _mm256_storeu_ps(dst + (c0 + c) * ld + r0, b[c]);
    }
  for (int64_t r = 0; r < rows; ++r)  // the columns past the full blocks, every row
    for (int64_t c = cols8; c < cols; ++c) dst[c * ld + r] = src[r * sl + c];
  for (int64_t r = rows8; r < rows; ++r)  // the rows past the full blocks, the blocks' columns
    for (int64_t c = 0; c < cols8; ++c) dst[c * ld + r] = src[r * sl + c];
}

}  // namespace tfm::kernels
