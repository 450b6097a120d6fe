// src/kernels/common_avx512.h — small pieces shared by the AVX-512 kernels (include only from files
// compiled with AVX-512 flags): the lane mask of a partial vector, float ↔ double halves of a vector
// (the row sums of the norms run in double), and a thread's grow-only scratch.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tfm::kernels {

// Lanes [0, n) of a 16-lane vector, n clamped to [0, 16]: the mask of a row's tail.
inline __mmask16 first_n(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

// float ↔ double halves of a 16-float vector.
inline __m512d lo_pd(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
inline __m512d hi_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline __m512 join_ps(__m512d lo, __m512d hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}

// 64-byte aligned float scratch that grows once to the largest size its owner has needed (so the
// steady state allocates nothing); declared thread_local by its users. Throws std::bad_alloc.
struct Scratch {
  float* data = nullptr;
  size_t cap = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(data);
      cap = (n + 1023) & ~size_t(1023);
      data = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
      if (data == nullptr) {
        cap = 0;
        throw std::bad_alloc();
      }
    }
    return data;
  }
};

}  // namespace tfm::kernels
