// src/kernels/common_avx2.h — small pieces shared by the AVX2 kernels (include only from *_avx2.cc files,
// compiled with AVX2 and FMA flags): a vector exp, |x|, a lane mask, the load and store of a row's tail of fewer
// than 8 floats (AVX2 has no lane masks for them), a tile's prefetch, lane reductions, the float-to-double halves
// of a vector, and an 8×8 transpose in registers.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tfm::kernels {

// Vector exp, 8 lanes (GELU in activation_avx2.cc, the log-sum-exp and softmax of cross_entropy_avx2.cc, the
// softmax of attention_avx2.cc):
// common_avx512.h's exp_ps (n = round(x·log2 e), Cody–Waite
// r = x − n·ln2, degree-7 Taylor polynomial for e^r, inputs clamped to [−104, 89], NaN kept), with 2^n
// applied without vscalefps: as two factors 2^⌊n/2⌋ and 2^(n − ⌊n/2⌋), each a normal float for
// n ∈ [−150, 129], built in the exponent bits. The first product is exact, the second rounds once, so
// denormal and overflowing results come out as vscalefps gives them.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);  // vmaxps returns its 2nd operand (x) on NaN
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.0f / 5040.0f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 720.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);  // exact: n is an integer in [−150, 129] (garbage on NaN, y is NaN)
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
}

inline __m256 abs_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

// A lane mask for the first n lanes (all lanes for n ≥ 8, none for n ≤ 0): AVX2's stand-in for an AVX-512
// lane mask, for _mm256_maskload_ps / _mm256_maskstore_ps or an and. (Not named first_n: common_avx512.h's
// first_n(int64_t) would be the same symbol, and the linker keeps one of two inline definitions.)
inline __m256i first_n_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Up to 8 floats from p into a vector, the lanes past n set to `fill` (a row's tail), and back.
inline __m256 load_tail(const float* p, int64_t n, float fill = 0.0f) {
  alignas(32) float b[8] = {fill, fill, fill, fill, fill, fill, fill, fill};
  std::memcpy(b, p, sizeof(float) * static_cast<size_t>(n));
  return _mm256_load_ps(b);
}
inline void store_tail(float* p, __m256 v, int64_t n) {
  alignas(32) float b[8];
  _mm256_store_ps(b, v);
  std::memcpy(p, b, sizeof(float) * static_cast<size_t>(n));
}

// n ≥ 8 floats: a plain 8-lane load or store; fewer: load_tail / store_tail. Not _mm256_maskstore_ps: AMD's
// CPUs run the masked store as microcode, many times slower than a plain one even with every lane set.
inline __m256 load_n(const float* p, int64_t n) { return n >= 8 ? _mm256_loadu_ps(p) : load_tail(p, n); }
inline void store_n(float* p, __m256 v, int64_t n) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    store_tail(p, v, n);
}

// Asks for the lines of a tile of C — `rows` rows of `cols` (1 … 16) floats from p, at stride ld — to be brought
// into L1. gemm_avx2.cc's drivers (training's panels, and the packed weights' products gemm_packed_avx2.cc calls
// it for) ask for the next tile while the current tile's k loop runs: a tile's first loads of its sums, and its
// stores' line fills, otherwise wait on memory once C outgrows L2 (a 1024 × 1536 product: ~15% of its time). A prefetch
// changes no value and never faults; only addresses inside the tile are formed (a row's first and last float: the row's
// one or two lines).
inline void prefetch_tile16(const float* p, int64_t ld, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(p + r * ld), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + r * ld + cols - 1), _MM_HINT_T0);
  }
}

// float32 → bfloat16 bits in the upper half of each 32-bit lane (the lower half zero), rounded as the scalar
// kernels::float_to_bf16 (gemm_packed.h) rounds, on the bits u — common_avx512.h's bf16_hi in 8 lanes: a NaN keeps
// its top bits with the quiet bit set, anything else rounds to nearest even on bit 16 (the carry may reach the
// exponent: overflow gives ±inf). `>> 16` gives the 16-bit value in the lower half.
inline __m256i bf16_hi(__m256i u) {
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
  return _mm256_and_si256(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), is_nan),
                          _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
}

// The first n (≤ 8; all 8 when n ≥ 8) bfloat16 of 8 floats' bf16_hi rounding to dst.
inline void store_bf16_n(uint16_t* dst, __m256 x, int64_t n) {
  const __m256i h = _mm256_srli_epi32(bf16_hi(_mm256_castps_si256(x)), 16);  // each value < 2¹⁶: packus exact
  const __m128i w = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08));
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), w);
  } else {
    alignas(16) uint16_t b[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), w);
    std::memcpy(dst, b, sizeof(uint16_t) * static_cast<size_t>(n));
  }
}

// The maximum, the minimum and the sum of a vector's 8 lanes (or 4 doubles). A lane holding NaN: vmaxps and
// vminps return their second operand then, so which lane's NaN or number comes out depends on the order.
inline float reduce_max_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
inline float reduce_min_ps(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
inline double reduce_add_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// The low and high 4 floats of v as doubles, and 8 doubles back to floats (each rounded once): the norms,
// which evaluate their formulas in double.
inline __m256d lo_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
inline __m256d hi_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
inline __m256 join_ps(__m256d lo, __m256d hi) { return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)); }
// A float lane mask (first_n_lanes) as the masks of its low and high 4 lanes widened to doubles.
inline __m256d lo_mask_pd(__m256i m) { return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(m))); }
inline __m256d hi_mask_pd(__m256i m) {
  return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)));
}

// In-register 8×8 transpose (transpose_avx2 in elementwise_avx2.cc, the GEMM's packing in gemm_avx2.cc): on
// return r[c] holds column c of the input rows r[0..7]. 32-bit pairs (unpack), then 64-bit pairs (shuffle),
// then the 128-bit halves (permute2f128).
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // per half h: a(i,4h) a(i+1,4h) a(i,4h+1) a(i+1,4h+1)
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a(i,4h+2) a(i+1,4h+2) a(i,4h+3) a(i+1,4h+3)
  }
  for (int i = 0; i < 8; i += 4) {  // half h of u[i + c]: column 4h + c of rows i..i+3
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);      // column c: the low halves
    r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);  // column c + 4: the high halves
  }
}

}  // namespace tfm::kernels
