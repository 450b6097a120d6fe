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

// The rounding is common_avx512.h's round_run_to_bf16 (bf16_hi: the scalar kernels::float_to_bf16's).
void convert_rows_to_bf16_avx512(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst) {
  if (lds == K) return round_run_to_bf16(src, dst, m * K);  // dense: one run
  for (int64_t i = 0; i < m; ++i) round_run_to_bf16(src + i * lds, dst + i * K, K);
}

}  // namespace tfm::kernels
