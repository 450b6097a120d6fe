// tfm/ops/linear.h — y = x·Wᵀ + b (torch.nn.functional.linear).
#pragma once
#include "tfm/tensor.h"

namespace tfm::ops {
// x (..., in), weight (out, in), bias (out) or undefined → (..., out).
// Backward: dx = dy·W;  dW += dyᵀ·x;  db += Σ_rows dy.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
}  // namespace tfm::ops
