// tfm/ops/layer_norm.h — torch.nn.functional.layer_norm over the last dimension.
#pragma once
#include "tfm/tensor.h"

namespace tfm::ops {
// x (..., D), weight (D), bias (D) or undefined → (..., D). Saves mean and rstd (rows) for backward.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
// layer_norm(x + r, ...) in one pass (the post-norm residual): returns the normalized sum.
Tensor add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                      float eps);
}  // namespace tfm::ops
