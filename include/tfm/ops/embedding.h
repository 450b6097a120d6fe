// tfm/ops/embedding.h — torch.nn.functional.embedding.
#pragma once
#include <cstdint>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::ops {
// weight (V, D), ids (numel of `shape`), each in [0, V) → (shape..., D).
// Backward: dW[id] += dy row (rows of padding_idx, if ≥ 0, receive no gradient).
Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& shape,
                 int64_t padding_idx = -1);
}  // namespace tfm::ops
