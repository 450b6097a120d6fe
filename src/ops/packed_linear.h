// src/ops/packed_linear.h — internal: the Linear forward against InferenceMode's packed weights
// (include/tfm/inference.h), one of linear_matmul's products (ops/linear_impl.h, linear.cc), which every
// Linear-shaped op runs.
#pragma once

#include <cstdint>

#include "tfm/tensor.h"

namespace tfm::ops {

// When an InferenceMode scope is active on this thread: y (N, out) = x (N, in) · Wᵀ (+ bias (out)
// if not null) with weight (out, in) packed once per scope, and returns true. Otherwise returns
// false and touches nothing. The caller has checked the shapes and that no gradient is needed.
bool linear_forward_packed(int64_t N, const float* x, const Tensor& weight, const float* bias,
                           float* y);

// Whether an InferenceMode scope is active on this thread (it takes precedence over Autocast: attention
// runs its bfloat16 products only under Autocast(BFLOAT16) with no such scope inside).
bool inference_scope_active();

}  // namespace tfm::ops
