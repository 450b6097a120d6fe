// src/ops/linear_impl.h — internal: what every Linear-shaped op shares (ops::linear, and the fused ops
// of ops/linear_activation.h), defined in linear.cc: the argument checks, the rows of an input, the one
// choice of product for x·Wᵀ, and the Linear backward. Not public API.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/bf16_linear.h"
#include "tfm/tensor.h"

namespace tfm::ops {

// The argument checks of every Linear-shaped op (`op` names it in messages): x (..., in) float,
// weight (out, in) float, bias (out) float or undefined. Returns (out, in).
std::pair<int64_t, int64_t> check_linear_args(const char* op, const Tensor& x, const Tensor& weight,
                                              const Tensor& bias);

// The rows N of an input (..., in): the product of its leading dims (not numel / in, which is 0 when in
// is 0 while the rows are not).
int64_t linear_rows(const Tensor& x);

// y (N, out) = x (N, in)·Wᵀ (+ bias (out), or null: none), weight (out, in), y overwritten: the product
// every Linear-shaped forward runs. The weight InferenceMode packed (ops/packed_linear.h) when `may_pack`
// (no gradient will be recorded) and such a scope is active; else, under Autocast(BFLOAT16),
// bf16(x)·bf16(W)ᵀ with float32 sums (ops/bf16_linear.h), returning the operands' bfloat16 copies for the
// node to keep (x's only when !may_pack: x rounded once, whole, and multiplied from that copy, the same bits
// as rounding it panel by panel); else kernels::gemm_bias (x·Wᵀ summed onto rows preset to the bias). Returns empty
// operands but for bf16. The caller has checked the shapes (check_linear_args).
Bf16Operands linear_matmul(int64_t N, const float* x, const Tensor& weight, const float* bias, float* y, bool may_pack);

// The Linear backward from the gradient g (N, out) of y = x·Wᵀ + b: din[0] (x's shape) gets dx = g·W,
// din[1] (out, in) gets dW = gᵀ·x, din[2] (out) gets db = Σ_rows g (if has_bias); each slot is set
// if empty, else accumulated into; null slots are skipped. With bf16 operands (the copies the forward used
// under Autocast, ops/bf16_linear.h) the dx and dW matmuls take bfloat16 operands (g rounded once for both;
// x16 as kept, or x rounded here), float32 sums.
void linear_backward(const float* g, const Tensor& x, const Tensor& weight, bool has_bias,
                     const std::vector<Tensor*>& din, const Bf16Operands& bf16 = {});

// linear_backward's two bfloat16 products from g already rounded, g16 (N, out): dx (x's shape) from g16·w16 and
// dW (out, in) from g16ᵀ·x16 (x rounded here if the forward kept no copy), each slot set if empty, else
// accumulated into; null slots skipped. bf16 holds the forward's copies (bf16.w16 set).
void linear_backward_bf16(const uint16_t* g16, const Tensor& x, const Tensor& weight, Tensor* dx, Tensor* dw,
                          const Bf16Operands& bf16);

}  // namespace tfm::ops
