// src/kernels/gemm_packed_avx2.cc — gemm_packed's products on CPUs with AVX2 but without AVX-512 (float32 and
// bfloat16), and its int8 products on CPUs without an int8 dot product (contract and layouts in gemm_packed.h):
// the weight packed once into blocks of 16 output columns (pack_rows16 and pack_rows16_s8, in gemm_packed.cc).
// Compiled with AVX2 and FMA flags by CMake; called only from gemm_packed.cc, when cpu_has_avx2() and, for
// float32 and bfloat16, not cpu_has_avx512().
//
// float32 and bfloat16 (rows already rounded): gemm_avx2.cc's blocked product, whose packed strips of B are
// pack_rows16's blocks as they are, so only A is packed per call (gemm_avx2_rows16). Every output is one
// k-ascending fma chain — the sum gemm_rows_scalar specifies — so the products equal that twin bit for bit
// whatever the rows, the panels or the thread count.
//
// int8 on a CPU without an int8 dot product (no VNNI; AVX2 has one only in vpmaddubsw, whose int16 pair sums
// saturate): GotoBLAS's loops without packing A, on int32 accumulators —
//   for each pass of kKcS8 consecutive k:           a block's pairs of k (8 KiB of int8) stay in L1
//     for each block of 16 columns:
//       for each tile of up to 6 rows:             6 × 16 sums in 12 ymm accumulators
// — the weight's int8 pairs of k widened as they are read and multiplied by the row's uint8 values widened once
// to int16 (widen_rows_u8_avx2) with vpmaddwd, whose products and pair sums are exact. Every int32 sum is exact,
// so any order gives the portable loop's bits. The loops over a tile's rows are unrolled by pragma: left as
// loops, GCC keeps the accumulator array in memory and stores all 12 vectors every step.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common_avx2.h"
#include "kernels/gemm_backend.h"
#include "kernels/gemm_packed.h"

namespace tfm::kernels {

namespace {

constexpr int kTileRows = 6;

// int8: k per pass (a block's 256 pairs of k, 8 KiB of int8, stay in L1).
constexpr int64_t kKcS8 = 512;

// One int8 tile: the exact int32 sums of rows [0, R) of a (int16 pairs at stride lda, already offset to the
// pass's first pair) times the `pairs` steps of block w (pairs of 16 columns × 2 k, int8), into acc's first
// `cols` ≤ 16 columns (at stride ldc), added to what acc holds unless first. A step widens the block's 32
// bytes to two vectors of 16 int16 (columns 0–7 and 8–15, each column's two k side by side), broadcasts a
// row's pair of k to every lane pair, and vpmaddwd adds each lane pair's two products into one int32 lane:
// exact (|a·w| ≤ 255·127), so only the int32 additions remain, and they are exact too.
template <int R>
void tile_s8(int64_t pairs, const int16_t* a, int64_t lda, const int8_t* w, int32_t* c, int64_t ldc, int cols,
             bool first) {
  __m256i acc[R][2];
  const bool full = cols == 16;
  const __m256i lo = first_n_lanes(cols), hi = first_n_lanes(cols - 8);
  _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
    if (first) {
      acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    } else if (full) {
      acc[r][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * ldc));
      acc[r][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * ldc + 8));
    } else {
      acc[r][0] = _mm256_maskload_epi32(c + r * ldc, lo);
      acc[r][1] = cols > 8 ? _mm256_maskload_epi32(c + r * ldc + 8, hi) : _mm256_setzero_si256();
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32 * p + 16)));
    _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
      int32_t pair;  // a[r, 2p] and a[r, 2p + 1]
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof pair);
      const __m256i x = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(x, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(x, w1));
    }
  }
  _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
    if (full) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), acc[r][0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + 8), acc[r][1]);
    } else {
      _mm256_maskstore_epi32(c + r * ldc, lo, acc[r][0]);
      if (cols > 8) _mm256_maskstore_epi32(c + r * ldc + 8, hi, acc[r][1]);
    }
  }
}

using TileS8Fn = void (*)(int64_t, const int16_t*, int64_t, const int8_t*, int32_t*, int64_t, int, bool);
constexpr TileS8Fn kTilesS8[kTileRows + 1] = {nullptr,    tile_s8<1>, tile_s8<2>, tile_s8<3>,
                                              tile_s8<4>, tile_s8<5>, tile_s8<6>};

}  // namespace

// float_to_bf16's rounding with integer lanes (bf16_hi, common_avx2.h), widened back.
void round_rows_to_bf16_avx2(const float* src, int64_t lds, int64_t m, int64_t K, float* dst) {
  for (int64_t i = 0; i < m; ++i) {
    const float* s = src + i * lds;
    float* d = dst + i * K;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
      _mm256_storeu_ps(d + k, _mm256_castsi256_ps(bf16_hi(_mm256_castps_si256(_mm256_loadu_ps(s + k)))));
    for (; k < K; ++k) d[k] = bf16_to_float(float_to_bf16(s[k]));
  }
}

void gemm_packed_avx2(const PackedRows& w, int64_t m, const float* a, int64_t lda, const float* bias, float* C,
                      int64_t ldc, int64_t b0, int64_t b1) {
  gemm_detail::gemm_avx2_rows16(m, a, lda, static_cast<const float*>(w.data), w.stride, w.N, w.K, b0, b1, bias, C, ldc);
}

void widen_rows_u8_avx2(const uint8_t* q, int64_t m, int64_t K, int16_t* dst) {
  const int64_t K2 = K + (K & 1);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* s = q + i * K;
    int16_t* d = dst + i * K2;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k),
                          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k))));
    for (; k < K; ++k) d[k] = s[k];
    if (K2 > K) d[K] = 0;
  }
}

void gemm_packed_s8_avx2(const PackedRows& w, int64_t m, const int16_t* a, int64_t lda, int32_t* acc, int64_t ldacc,
                         int64_t b0, int64_t b1) {
  const auto* data = static_cast<const int8_t*>(w.data);
  const int64_t K2 = w.K + (w.K & 1);
  for (int64_t k0 = 0; k0 < K2; k0 += kKcS8) {
    const int64_t pairs = std::min(kKcS8, K2 - k0) / 2;
    for (int64_t b = b0; b < b1; ++b) {
      const int8_t* wb = data + b * w.stride + k0 * 16;
      const int64_t n0 = b * 16;
      const int cols = static_cast<int>(std::min<int64_t>(16, w.N - n0));
      for (int64_t i = 0; i < m; i += kTileRows) {
        const int R = static_cast<int>(std::min<int64_t>(kTileRows, m - i));
        kTilesS8[R](pairs, a + i * lda + k0, lda, wb, acc + i * ldacc + n0, ldacc, cols, k0 == 0);
      }
    }
  }
}

}  // namespace tfm::kernels
