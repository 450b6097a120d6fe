// tfm/ops/dropout.h — torch.nn.functional.dropout with a counter-based mask.
#pragma once
#include "tfm/random.h"
#include "tfm/tensor.h"

namespace tfm::ops {
// Training with p > 0: y_i = x_i·keep_i/(1−p), keep_i = dropout_keep(seed, offset + i, p);
// otherwise returns x itself. The mask is recomputed (not stored) in the backward.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
// x + dropout(r, p, training, gen) in one pass (the pre-norm residual x + dropout(sublayer(...))):
// bitwise the composition ops::add(x, dropout(r, ...)), with the same generator draw.
Tensor add_dropout(const Tensor& x, const Tensor& r, float p, bool training, Generator& gen);
}  // namespace tfm::ops
