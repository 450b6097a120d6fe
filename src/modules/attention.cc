// src/modules/attention.cc — nn.MultiheadAttention: packed input projection, attention, out_proj.
#include "tfm/modules/attention.h"

#include "tfm/ops/linear.h"

namespace tfm {

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, float dropout_, bool bias,
                                       bool batch_first_, Generator& gen)
    : embed_dim(embed_dim_),
      num_heads(num_heads_),
      dropout(dropout_),
      batch_first(batch_first_),
      out_proj(embed_dim_, embed_dim_, bias, gen),
      gen_(&gen) {
  if (num_heads <= 0 || embed_dim % num_heads != 0)
    throw std::invalid_argument("MultiheadAttention: embed_dim " + std::to_string(embed_dim) +
                                " must be divisible by num_heads " + std::to_string(num_heads));
  in_proj_weight = Tensor::empty({3 * embed_dim, embed_dim});
  init_xavier_uniform(in_proj_weight, gen);
  if (bias) {
    in_proj_bias = Tensor::zeros({3 * embed_dim});
    out_proj.bias.fill_(0.0f);
  }
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const ops::AttentionMasks& masks) const {
  const int64_t E = embed_dim;
  auto rows = [&](int64_t start, int64_t n, const Tensor& t) { return t.defined() ? t.narrow0(start, n) : Tensor(); };
  ops::AttentionInput q, k, v;
  if (query.same(key) && key.same(value)) {  // self-attention: one (.., 3E) projection
    Tensor qkv = ops::linear(query, in_proj_weight, in_proj_bias);
    q = {qkv, 0};
    k = {qkv, E};
    v = {qkv, 2 * E};
  } else if (key.same(value)) {  // cross-attention: q, and one (.., 2E) projection of memory
    q = {ops::linear(query, rows(0, E, in_proj_weight), rows(0, E, in_proj_bias)), 0};
    Tensor kv = ops::linear(key, rows(E, 2 * E, in_proj_weight), rows(E, 2 * E, in_proj_bias));
    k = {kv, 0};
    v = {kv, E};
  } else {
    q = {ops::linear(query, rows(0, E, in_proj_weight), rows(0, E, in_proj_bias)), 0};
    k = {ops::linear(key, rows(E, E, in_proj_weight), rows(E, E, in_proj_bias)), 0};
    v = {ops::linear(value, rows(2 * E, E, in_proj_weight), rows(2 * E, E, in_proj_bias)), 0};
  }
  Tensor o = ops::attention(q, k, v, num_heads, E, batch_first, masks, dropout, is_training(), *gen_);
  return out_proj.forward(o);
}

}  // namespace tfm
