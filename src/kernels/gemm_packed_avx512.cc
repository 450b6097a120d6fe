// src/kernels/gemm_packed_avx512.cc — the AVX-512 body of gemm_packed.h's bfloat16 rounding,
// convert_rows_to_bf16_avx512 (the rounding every bf16 matmul's operands go through: gemm_packed's and
// gemm_bf16's). gemm_packed.h's only AVX-512 code: the matmuls themselves are oneDNN's. Compiled with
// AVX-512 flags by CMake; called only by convert_rows_to_bf16 (gemm_packed.cc) after cpu_has_avx512().
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_cvtepi32_epi16 with an
// "undefined" vector, which -Wmaybe-uninitialized / -Wuninitialized report from inside the header;
// the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "kernels/common_avx512.h"
#include "kernels/gemm_packed.h"

namespace tfm::kernels {

// float32 → bfloat16, round to nearest even, as the scalar kernels::float_to_bf16: on the bits u,
//   NaN (|u| > 0x7F800000) → (u >> 16) | 0x0040 (quiet, sign and top payload kept)
//   else                   → (u + 0x7FFF + ((u >> 16) & 1)) >> 16   (the carry may reach the exponent)
// Integer arithmetic rather than VCVTNEPS2BF16, which treats denormal inputs as zero and so would not
// be bitwise equal to the twin. n contiguous floats.
namespace {
void round_run_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(m, src + i);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(hi, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i h = _mm512_mask_or_epi32(rounded, nan, hi, quiet);
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(h));
  }
}
}  // namespace

void convert_rows_to_bf16_avx512(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst) {
  if (lds == K) return round_run_to_bf16(src, dst, m * K);  // dense: one run
  for (int64_t i = 0; i < m; ++i) round_run_to_bf16(src + i * lds, dst + i * K, K);
}

}  // namespace tfm::kernels
