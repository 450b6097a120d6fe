// tfm/ops/elementwise.h — small element-wise ops with autograd.
#pragma once
#include "tfm/tensor.h"

namespace tfm::ops {
Tensor add(const Tensor& a, const Tensor& b);  // same shapes; da = db = dy
Tensor mul_scalar(const Tensor& x, float s);   // dx = s·dy
// x (B, T, D) or (T, B, D) per batch_first, plus table[t] (max_len ≥ T, D) broadcast over batch.
// Not differentiated with respect to table (a constant buffer, like PyTorch's registered buffer).
Tensor add_positional(const Tensor& x, const Tensor& table, bool batch_first);
// Sum of all elements (for tests and losses): () tensor.
Tensor sum(const Tensor& x);
}  // namespace tfm::ops
