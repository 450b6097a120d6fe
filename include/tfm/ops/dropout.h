// tfm/ops/dropout.h — torch.nn.functional.dropout with a counter-based mask, and stochastic depth
// (drop_path), its per-sample relative.
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
// Stochastic depth (timm's drop_path; Huang et al., "Deep Networks with Stochastic Depth"): in
// training with p > 0, y = x ⊙ m / (1 − p), m one keep decision per sample s (index along
// sample_dim: 0 for (B, T, D), 1 for (T, B, D)), m_s = dropout_keep(seed, offset + s, p), broadcast
// over the sample's other elements; otherwise returns x itself with no generator draw.
// 0 ≤ p < 1 (p = 1 would drop every sample: a layer never applied). Backward dx = dy ⊙ m / (1 − p),
// the mask recomputed.
Tensor drop_path(const Tensor& x, float p, int64_t sample_dim, bool training, Generator& gen);
}  // namespace tfm::ops
