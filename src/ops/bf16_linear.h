// src/ops/bf16_linear.h — internal: the Linear matmuls inside a tfm::Autocast(BFLOAT16) scope
// (include/tfm/autocast.h), run by linear_matmul and linear_backward (ops/linear_impl.h, linear.cc) and by
// the bfloat16 feed-forward of ops/linear_activation.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::ops {

// A weight (out, in) rounded to bfloat16, row-major; made once per Autocast scope (or refreshed by the
// weight's writer, tfm::Bf16WeightCache) and kept by the autograd nodes that recorded it, so the backward
// multiplies by the forward's copy.
using Bf16Weight = std::shared_ptr<const std::vector<uint16_t>>;

// The bfloat16 copy of `weight` when an Autocast(BFLOAT16) scope is active on this thread (callers try
// InferenceMode's packed path first, which runs whenever such a scope is active); null otherwise.
Bf16Weight autocast_weight(const Tensor& weight);

// y (N, out) = bf16(x (N, in))·w16ᵀ (+ bias (out) if not null), float32 sums (x rounded panel by panel).
void linear_forward_bf16(int64_t N, int64_t in, int64_t out, const float* x, const std::vector<uint16_t>& w16,
                         const float* bias, float* y);

// n floats rounded to bfloat16 (kernels::convert_to_bf16), whole, into a heap buffer: a backward's transient
// operand (an output gradient for both its products). Plain malloc: glibc reuses the freed block for the next
// call's (kernels' keep_gemm_buffers_resident keeps such blocks on the heap), so it costs no page faults and
// raises the peak only while it lives.
std::unique_ptr<uint16_t[]> bf16_rounded(const float* src, int64_t n);

// A bf16 backward's output gradient g (N, out) rounded as bf16_rounded does; with bias_slot (else null), the
// bias gradient db (out) += Σ_rows g in the same pass over g (kernels::bias_grad_bf16), the slot set to zeros
// first if empty.
std::unique_ptr<uint16_t[]> round_output_grad(const float* g, int64_t N, int64_t out, Tensor* bias_slot);

// n floats rounded to bfloat16 (kernels::convert_to_bf16), whole, into the bytes of a new float tensor of
// ⌈n/2⌉ elements: the copy of an operand an autograd node keeps (bf16_data reads it).
Tensor bf16_copy(const float* src, int64_t n);
inline const uint16_t* bf16_data(const Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data()); }

// What a Linear's bfloat16 forward hands its node for the backward: the weight's copy (w16) and, when a
// gradient will be recorded, the input's (x16 = bf16(x), (N, in)), so that dW = bf16(g)ᵀ·x16 does not round
// x again. Empty (w16 null) outside Autocast(BFLOAT16).
struct Bf16Operands {
  Bf16Weight w16;
  Tensor x16;  // undefined: linear_backward rounds x itself
  explicit operator bool() const { return w16 != nullptr; }
};

}  // namespace tfm::ops
