// src/kernels/gemm_packed_avx2.cc — gemm_packed's products on CPUs with AVX2 but without AVX-512 (float32 and
// bfloat16), and its int8 products on CPUs without an int8 dot product (contract and layouts in gemm_packed.h):
// the weight packed once into blocks of 16 output columns (pack_rows16 and pack_rows16_s8, in gemm_packed.cc),
// multiplied by a kernel whose every output is one k-ascending fma chain — the sum gemm_rows_scalar specifies,
// so the products equal that twin bit for bit whatever the rows, the panels or the thread count — or one exact
// int32 sum. Compiled with AVX2 and FMA flags by CMake; called only from gemm_packed.cc, when cpu_has_avx2()
// and, for float32 and bfloat16, not cpu_has_avx512().
//
// The kernel (GotoBLAS's loop order, without packing A):
//   for each pass of kKc consecutive k:            a block's kKc·16 floats (16 KiB) stay in L1
//     for each block of 16 columns:
//       for each tile of up to 6 rows:             6 × 16 outputs in 12 ymm accumulators
//         acc = 0 (first pass) or C; acc += a[r, k]·w[k, :] for the pass's k; C = acc (+ bias, last pass)
// A pass's rows of A (m × kKc floats, 128 KiB for 128 rows) stay in L2 while the blocks run over them. A
// step is 2 loads of the block, 6 broadcasts of A and 12 FMAs, so the two FMA pipes are the limit. Between
// passes a sum waits in C, in float: storing and reloading it changes no bit of the chain.
// The loops over a tile's rows are unrolled by pragma: left as loops, GCC keeps the accumulator array in
// memory and stores all 12 vectors every step.
//
// int8 on a CPU without an int8 dot product (no VNNI; AVX2 has one only in vpmaddubsw, whose int16 pair sums
// saturate): the same loops on int32 accumulators, the weight's int8 pairs of k widened as they are read
// and multiplied by the row's uint8 values widened once to int16 (widen_rows_u8_avx2) with vpmaddwd, whose
// products and pair sums are exact. Every int32 sum is exact, so any order gives the portable loop's bits.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common_avx2.h"
#include "kernels/gemm_packed.h"

namespace tfm::kernels {

namespace {

constexpr int64_t kKc = 256;  // k per pass
constexpr int kTileRows = 6;

// One tile: rows [0, R) of a (at stride lda, already offset to the pass's first k) times the kc steps of
// block w (kc runs of 16 floats), into C's first `cols` ≤ 16 columns (at stride ldc). C's and the bias's
// second 8 columns are touched only when cols > 8: no pointer past their end is formed.
template <int R>
void tile(int64_t kc, const float* a, int64_t lda, const float* w, float* c, int64_t ldc, int cols, bool first,
          bool last, const float* bias) {
  __m256 acc[R][2];
  const bool full = cols == 16;
  const __m256i lo = first_n_lanes(cols), hi = first_n_lanes(cols - 8);  // lanes of columns 0–7 and 8–15
  _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
    if (first) {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    } else if (full) {
      acc[r][0] = _mm256_loadu_ps(c + r * ldc);
      acc[r][1] = _mm256_loadu_ps(c + r * ldc + 8);
    } else {
      acc[r][0] = _mm256_maskload_ps(c + r * ldc, lo);
      acc[r][1] = cols > 8 ? _mm256_maskload_ps(c + r * ldc + 8, hi) : _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_loadu_ps(w + 16 * k), w1 = _mm256_loadu_ps(w + 16 * k + 8);
    _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  if (last && bias) {
    const __m256 b0 = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, lo);
    const __m256 b1 = full       ? _mm256_loadu_ps(bias + 8)
                      : cols > 8 ? _mm256_maskload_ps(bias + 8, hi)
                                 : _mm256_setzero_ps();
    _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_add_ps(acc[r][0], b0);
      acc[r][1] = _mm256_add_ps(acc[r][1], b1);
    }
  }
  _Pragma("GCC unroll 6") for (int r = 0; r < R; ++r) {
    if (full) {
      _mm256_storeu_ps(c + r * ldc, acc[r][0]);
      _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    } else {
      _mm256_maskstore_ps(c + r * ldc, lo, acc[r][0]);
      if (cols > 8) _mm256_maskstore_ps(c + r * ldc + 8, hi, acc[r][1]);
    }
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool, bool, const float*);
constexpr TileFn kTiles[kTileRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

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
  const auto* data = static_cast<const float*>(w.data);
  const int64_t K = w.K;
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    const bool first = k0 == 0, last = k0 + kc == K;
    for (int64_t b = b0; b < b1; ++b) {
      const float* wb = data + b * w.stride + k0 * 16;
      const int64_t n0 = b * 16;
      const int cols = static_cast<int>(std::min<int64_t>(16, w.N - n0));
      const float* bb = bias ? bias + n0 : nullptr;
      for (int64_t i = 0; i < m; i += kTileRows) {
        const int R = static_cast<int>(std::min<int64_t>(kTileRows, m - i));
        kTiles[R](kc, a + i * lda + k0, lda, wb, C + i * ldc + n0, ldc, cols, first, last, bb);
      }
    }
  }
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
