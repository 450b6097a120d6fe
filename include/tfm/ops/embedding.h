// tfm/ops/embedding.h — torch.nn.functional.embedding.
#pragma once
#include <cstdint>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::ops {
// weight (V, D), ids (numel of `shape`), each in [0, V) → (shape..., D).
// Backward: dW[id] += dy row (rows of padding_idx, if ≥ 0, receive no gradient).
// padding_idx < 0 means no padding row, as in torch.embedding's internal argument; nn.Embedding and
// F.embedding instead read a negative padding_idx from the end (−1 is row V − 1). Neither this op nor
// tfm::Embedding (tfm/modules/basic.h) converts it: pass V − 1, not −1, for the last row.
Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& shape,
                 int64_t padding_idx = -1);
}  // namespace tfm::ops
