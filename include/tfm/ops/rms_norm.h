// tfm/ops/rms_norm.h — RMSNorm over the last dimension: y = x / sqrt(mean(x²) + eps) · weight.
// Weight only, no bias. Reference: the formula in float64 (PyTorch 1.13 has no nn.RMSNorm; later
// versions' torch.nn.functional.rms_norm computes the same).
#pragma once
#include "tfm/tensor.h"

namespace tfm::ops {
// x (..., D), weight (D) → (..., D). When recording for the backward, saves x and each row's rstd (N).
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);
}  // namespace tfm::ops
