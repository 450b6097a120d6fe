// src/kernels/transpose_avx512.h — matrix transposes through AVX-512 registers, for the *_avx512.cc
// kernels (include only from files compiled with AVX-512 flags). transpose_block is the body of
// transpose_avx512 (elementwise_avx512.cc), whose scalar twin is transpose_scalar (kernels.h);
// tests/kernels/elementwise_test.cc compares them.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace tfm::kernels {

// In-register 16×16 transpose: on return r[c] holds column c of the input rows r[0..15].
// Four stages of 2×2 block swaps: 32-bit pairs (unpack ps), 64-bit pairs (unpack pd), then 128-bit
// lanes twice (shuffle_f32x4).
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // per 128-bit lane k: a(i,4k) a(i+1,4k) a(i,4k+1) a(i+1,4k+1)
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // a(i,4k+2) a(i+1,4k+2) a(i,4k+3) a(i+1,4k+3)
  }
  for (int i = 0; i < 16; i += 4) {  // lane k of u[i + c]: column 4k + c of rows i..i+3
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // t is reused. With h = 0 (rows 0-7) and h = 8 (rows 8-15), c < 4: the 128-bit lanes of t[h + c] are
  // column c of rows h..h+3, column c+8 of rows h..h+3, column c of rows h+4..h+7, column c+8 of rows
  // h+4..h+7; t[h + 4 + c] holds the same for columns c+4 and c+12.
  for (int h = 0; h < 16; h += 8)
    for (int c = 0; c < 4; ++c) {
      t[h + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0x88);
      t[h + 4 + c] = _mm512_shuffle_f32x4(u[h + c], u[h + 4 + c], 0xdd);
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);           // column c
    r[c + 8] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);       // column c + 8
    r[c + 4] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);  // column c + 4
    r[c + 12] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd); // column c + 12
  }
}

// dst[c·ld + r] = src[r·sl + c] for r < rows, c < cols: 16×16 blocks loaded as rows (masked at the
// column edge, zero rows past the row edge), transposed in registers, stored as rows of dst (masked at
// the row edge). Touches nothing else of dst.
inline void transpose_block(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst,
                            int64_t ld) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t rn = std::min<int64_t>(16, rows - r0);
    const __mmask16 rm = static_cast<__mmask16>(rn == 16 ? 0xFFFFu : (1u << rn) - 1u);
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t cn = std::min<int64_t>(16, cols - c0);
      const __mmask16 cm = static_cast<__mmask16>(cn == 16 ? 0xFFFFu : (1u << cn) - 1u);
      __m512 b[16];
      for (int64_t i = 0; i < 16; ++i)
        b[i] = i < rn ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * sl + c0) : _mm512_setzero_ps();
      transpose16x16(b);
      for (int64_t c = 0; c < cn; ++c) _mm512_mask_storeu_ps(dst + (c0 + c) * ld + r0, rm, b[c]);
    }
  }
}

}  // namespace tfm::kernels
