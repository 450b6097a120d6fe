// src/kernels/philox_avx512.h — kernels::philox_hash (cpu.cc) on eight 64-bit counters at once, for
// the *_avx512.cc kernels (include only from files compiled with AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tfm::kernels::avx512 {

// One SplitMix64 output step on z = seed·φ + counter (φ = 0x9E3779B97F4A7C15), lane by lane:
// bitwise philox_hash(seed, counter) when seed_mul = seed·φ.
inline __m512i philox_hash8(__m512i seed_mul, __m512i counter) {
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(0x9E3779B97F4A7C15ull));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull));
  __m512i z = _mm512_add_epi64(_mm512_add_epi64(seed_mul, counter), golden);
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

}  // namespace tfm::kernels::avx512
