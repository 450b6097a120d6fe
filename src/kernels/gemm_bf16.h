// src/kernels/gemm_bf16.h — C = op(A)·op(B) with bfloat16 operands and float32 sums: the matmuls of a
// Linear trained in bfloat16 (tfm::Autocast, include/tfm/autocast.h) — forward x·Wᵀ, backward g·W and
// gᵀ·x — where both operands change every step, so nothing is packed ahead (contrast gemm_packed.h).
//
//   C (M, N) = op(A) (M, K) · op(B) (K, N) + bias (N, broadcast over rows; nullptr: none) + beta·C
//
// A and B hold bfloat16 bits (uint16_t, the top half of a float32; gemm_packed.h: float_to_bf16) with
// the strides and transposes of kernels::gemm (kernels.h); C is float32, row-major at stride ldc.
// Each product of two bfloat16 values is exact in float32 and the sums are float32: what
// torch.autocast("cpu", torch.bfloat16) computes for a Linear's matmuls, except that C stays float32
// (PyTorch's is rounded to bfloat16 once more).
//
// Backend: oneDNN's matmul primitive (AMX-BF16 tiles or AVX512-BF16 vdpbf16ps where the CPU has them)
// on the output panels of kernels::gemm's plan (gemm_backend.h: fixed by the shape, each panel one
// single-threaded call, spread over the OpenMP team), so C is bitwise identical for any thread count.
// Primitives are cached per panel shape. Where oneDNN has no bf16 kernel for the CPU (it would take
// its reference loop), a panel is widened to float32 and multiplied by sgemm: the same products and
// float32 sums, another summation order.
//
// The scalar twin gemm_bf16_scalar is the specification: every operand widened to float32 exactly,
// then gemm_scalar (one accumulator per output, k ascending), bias added after the sum, then beta·C.
// TFM_FORCE_SCALAR=1 selects it. Unlike the rest of the kernels it allocates on every call (the widened
// operands, and the float32-A form's rounded A): an exception to kernels.h's no-allocation rule that
// only the forced-scalar path and the tests pay.
#pragma once

#include <cstdint>

namespace tfm::kernels {

// C (M, N) = op(A)·op(B) + bias + beta·C; beta = 0 overwrites C (may hold garbage). M, N, K ≥ 0; K = 0
// gives bias + beta·C. C must not alias A or B.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);
void gemm_bf16_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
                      const float* bias = nullptr);

// The same product with A given in float32, rounded to bfloat16 (float_to_bf16) panel by panel by the thread
// that multiplies the panel, into a per-thread buffer of the panel's size: no whole rounded copy of A is made
// (a Linear's input or output gradient). The twin rounds all of A, then gemm_bf16_scalar.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);
void gemm_bf16_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);

// dst[i] = float_to_bf16(src[i]) for n floats, over the OpenMP team in fixed blocks (parallel_chunks.h; elementwise:
// the same bits for any thread count); AVX-512 where cpu_has_avx512(), the scalar rounding otherwise.
// Each block is one convert_rows_to_bf16 call (gemm_packed.h), so its twin is that function's,
// convert_rows_to_bf16_scalar (tests/kernels/gemm_bf16_test.cc compares them).
void convert_to_bf16(const float* src, int64_t n, uint16_t* dst);

// AVX512-BF16 (vdpbf16ps) or AMX-BF16, and not forced scalar: gemm_bf16 runs on bf16 dot-product
// instructions; false: oneDNN emulates bfloat16 on AVX-512 or gemm_bf16 widens to float32 (same
// numbers up to summation order, slower). For front ends to say so.
bool cpu_has_bf16_dot();

}  // namespace tfm::kernels
