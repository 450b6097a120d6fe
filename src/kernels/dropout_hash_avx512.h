// src/kernels/dropout_hash_avx512.h — kernels::dropout_hash (kernels.h) on sixteen counters at once,
// for the *_avx512.cc kernels (include only from files compiled with AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {

// dropout_mix lane by lane (32-bit lanes): bitwise the scalar function.
inline __m512i dropout_mix16(__m512i lo, __m512i key) {
  __m512i x = _mm512_xor_si512(lo, _mm512_srli_epi32(lo, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kDropoutMul1)));
  x = _mm512_xor_si512(x, key);
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kDropoutMul2)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// Keep decisions of dropout_keep(seed, c_l, p) for sixteen counters c_l = first + off[l]
// (0 = off[0] ≤ off[l] ≤ off[15]), as a lane mask. The per-2³²-window key is cached: it changes
// only where the counters cross a multiple of 2³², where the lanes take their keys one by one.
class DropoutMask16 {
 public:
  DropoutMask16(uint64_t seed, float p, const uint64_t (&off)[16]) : seed_(seed) {
    threshold_ = _mm512_set1_epi32(static_cast<int>(dropout_threshold(p)));
    alignas(64) uint32_t lo[16];
    for (int l = 0; l < 16; ++l) off_[l] = off[l], lo[l] = static_cast<uint32_t>(off[l]);
    off_lo_ = _mm512_load_si512(lo);
    hi_ = 0;
    key_ = _mm512_set1_epi32(static_cast<int>(dropout_key(seed, 0)));
  }

  // Lane l's counter is first + l·stride (1: sixteen consecutive elements).
  static DropoutMask16 strided(uint64_t seed, float p, uint64_t stride) {
    uint64_t off[16];
    for (int l = 0; l < 16; ++l) off[l] = static_cast<uint64_t>(l) * stride;
    return DropoutMask16(seed, p, off);
  }

  __mmask16 keep(uint64_t first) {
    const uint64_t hi = first >> 32;
    __m512i key = key_;
    if (hi != hi_ || (first + off_[15]) >> 32 != hi) {
      if ((first + off_[15]) >> 32 == hi) {  // a new window, all lanes in it
        hi_ = hi;
        key_ = key = _mm512_set1_epi32(static_cast<int>(dropout_key(seed_, hi)));
      } else {  // the lanes straddle a window boundary
        alignas(64) uint32_t k[16];
        for (int l = 0; l < 16; ++l) k[l] = dropout_key(seed_, (first + off_[l]) >> 32);
        key = _mm512_load_si512(k);
      }
    }
    const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)), off_lo_);
    const __m512i h24 = _mm512_srli_epi32(dropout_mix16(lo, key), 8);
    return _mm512_cmpge_epu32_mask(h24, threshold_);
  }

 private:
  uint64_t seed_;
  uint64_t off_[16];
  __m512i off_lo_, threshold_, key_;
  uint64_t hi_;
};

}  // namespace tfm::kernels
