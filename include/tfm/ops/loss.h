// tfm/ops/loss.h — losses with PyTorch's reductions.
#pragma once
#include <cstdint>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::ops {
// F.cross_entropy(logits (N, V), target (N), ignore_index, label_smoothing, reduction='mean'):
// mean over rows whose target != ignore_index (0 if there are none, with zero gradient). That case
// differs from PyTorch on purpose: its mean divides 0 by 0 and returns NaN.
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& target,
                     int32_t ignore_index = -100, float label_smoothing = 0.0f);
// F.mse_loss(input, target, reduction='mean'); target is a constant.
Tensor mse_loss(const Tensor& input, const Tensor& target);
}  // namespace tfm::ops
