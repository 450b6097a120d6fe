// src/kernels/dropout_hash_avx2.h — kernels::dropout_hash (kernels.h) on eight counters at once, for the
// *_avx2.cc kernels (include only from files compiled with AVX2 flags): dropout_hash_avx512.h's DropoutMask16
// at half the width.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {

// dropout_mix lane by lane (32-bit lanes): bitwise the scalar function.
inline __m256i dropout_mix8(__m256i lo, __m256i key) {
  __m256i x = _mm256_xor_si256(lo, _mm256_srli_epi32(lo, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kDropoutMul1)));
  x = _mm256_xor_si256(x, key);
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kDropoutMul2)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// Keep decisions of dropout_keep(seed, first + l, p) for the eight consecutive counters from first, as a
// float lane mask (all ones: kept). The per-2³²-window key is cached: it changes only where the counters
// cross a multiple of 2³², where the lanes take their keys one by one.
class DropoutMask8 {
 public:
  DropoutMask8(uint64_t seed, float p) : seed_(seed) {
    // hash >> 8 < 2²⁴ and the threshold ≤ 2²⁴ fit signed lanes, so a signed compare decides.
    threshold_ = _mm256_set1_epi32(static_cast<int>(dropout_threshold(p)));
    key_ = _mm256_set1_epi32(static_cast<int>(dropout_key(seed, 0)));
  }

  __m256 keep(uint64_t first) {
    const uint64_t hi = first >> 32;
    __m256i key = key_;
    if (hi != hi_ || (first + 7) >> 32 != hi) {
      if ((first + 7) >> 32 == hi) {  // a new window, all lanes in it
        hi_ = hi;
        key_ = key = _mm256_set1_epi32(static_cast<int>(dropout_key(seed_, hi)));
      } else {  // the lanes straddle a window boundary
        alignas(32) uint32_t k[8];
        for (int l = 0; l < 8; ++l) k[l] = dropout_key(seed_, (first + static_cast<uint64_t>(l)) >> 32);
        key = _mm256_load_si256(reinterpret_cast<const __m256i*>(k));
      }
    }
    const __m256i lo =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i h24 = _mm256_srli_epi32(dropout_mix8(lo, key), 8);
    const __m256i dropped = _mm256_cmpgt_epi32(threshold_, h24);  // h24 < threshold
    return _mm256_castsi256_ps(_mm256_xor_si256(dropped, _mm256_set1_epi32(-1)));
  }

 private:
  uint64_t seed_;
  __m256i threshold_, key_;
  uint64_t hi_ = 0;
};

}  // namespace tfm::kernels
