// tfm/ops/attention.h — multi-head scaled dot-product attention with PyTorch's mask semantics,
// on projected q, k, v (the projections themselves are Linear ops in MultiheadAttention).
#pragma once
#include <cstdint>

#include "tfm/random.h"
#include "tfm/tensor.h"

namespace tfm::ops {

// Masks exactly as nn.MultiheadAttention:
//   attn_mask (L, S) or (B·H, L, S): Bool (true = may not attend) or Float32 (added; −inf allowed)
//   key_padding_mask (B, S): Bool (true = padding, ignored) or Float32 (added)
//   is_causal: additionally block key j > query i.
// A query row whose keys are all masked gets zeros (not NaN) and no gradient.
struct AttentionMasks {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
};

// One of q, k, v: columns [col, col + E) of the last dim of src, where src is (B, L, C) when
// batch_first else (L, B, C). A packed projection (C = 3E) serves as q, k and v at cols 0, E, 2E
// without copies; the backward writes each block of d(src).
struct AttentionInput {
  Tensor src;
  int64_t col = 0;
};

// Returns (B, L, E) if batch_first else (L, B, E): softmax(q·kᵀ/√Dh + masks)·v per head,
// heads concatenated (E = H·Dh). Dropout p on the attention probabilities when training.
Tensor attention(const AttentionInput& q, const AttentionInput& k, const AttentionInput& v,
                 int64_t num_heads, int64_t embed_dim, bool batch_first, const AttentionMasks& masks,
                 float dropout_p, bool training, Generator& gen);

}  // namespace tfm::ops
