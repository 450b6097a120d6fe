// tfm/modules/attention.h — nn.MultiheadAttention (need_weights=False path).
#pragma once

#include "tfm/modules/basic.h"
#include "tfm/ops/attention.h"

namespace tfm {

// Keys: in_proj_weight (3E, E), in_proj_bias (3E), out_proj.weight (E, E), out_proj.bias (E).
// Init as PyTorch: xavier_uniform in_proj_weight, zero biases, out_proj.weight like Linear.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout = 0.0f, bool bias = true,
                     bool batch_first = false, Generator& gen = default_generator());
  // query (B, L, E) / (L, B, E); key, value (B, S, E) / (S, B, E) → attn_output like query.
  // When key and value (or all three) are the same tensor, their projections run as one GEMM.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const ops::AttentionMasks& masks = {}) const;

  int64_t embed_dim, num_heads;
  float dropout;
  bool batch_first;
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;

 private:
  Generator* gen_;
};

}  // namespace tfm
