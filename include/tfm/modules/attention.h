// tfm/modules/attention.h — nn.MultiheadAttention (need_weights=False path), and the cache that lets
// the same forward run incremental decoding one position at a time.
//
// Shapes: B batch, L query length, S key length, E = embed_dim, H heads, Dh query/key head width,
// Dv value head width, A = H·Dh the width of the projected queries and keys, Av = H·Dv that of the
// projected values (A = Av = E with PyTorch's arguments), N rows decoded together (hypotheses),
// Bm memory rows.
#pragma once

#include <optional>
#include <vector>

#include "tfm/modules/basic.h"
#include "tfm/ops/attention.h"
#include "tfm/ops/attention_cache.h"

namespace tfm {

// What a MultiheadAttention keeps between the steps of incremental decoding, where each forward
// feeds one new position for each of N rows. Inference only (no autograd, no attention dropout).
// Which half a cache uses is decided by the forward it is passed to:
//   self-attention (query, key and value one tensor): the step's keys and values are appended to
//     `kv`, and the query attends to every position fed so far — the causal mask of the full forward;
//   cross-attention (key and value one memory tensor): the memory's keys and values are projected
//     at the first step and read at every later one.
struct AttentionCache {
  // Self-attention.
  int64_t capacity = 1;  // positions `kv` holds when created; it doubles when full
  ops::KVCache kv;       // keys (N, capacity, A), values (N, capacity, Av) of positions [0, kv.length); made by the first step

  // Cross-attention. Row n attends to memory row row_source[n] and to its keys [0, memory_len[b])
  // (b = row_source[n]): memory rows are padded at the end, so the lengths stand for
  // memory_key_padding_mask. Empty row_source: row n reads memory row n; empty memory_len: all S
  // keys are real. Both are filled in by the first step.
  std::vector<int64_t> row_source;  // (N)
  std::vector<int64_t> memory_len;  // (Bm)
  Tensor memory;     // (Bm, S, E) batch_first / (S, Bm, E): the memory memory_kv was projected from
  Tensor memory_kv;  // (Bm, S, A+Av) / (S, Bm, A+Av): [keys | values] = memory·W[A:2A+Av]ᵀ + b[A:2A+Av]

  int64_t length() const { return kv.length; }  // positions fed (self-attention)
  // Row r becomes old row rows[r] (beam search reorders, duplicates and drops rows); the projected
  // memory is shared, only row_source is remapped.
  void select_rows(const std::vector<int64_t>& rows);
};

// The attention variants beyond nn.MultiheadAttention's arguments. Each one unset keeps PyTorch's
// behaviour: the layout, initialisation and numbers of nn.MultiheadAttention.
struct AttentionVariant {
  std::optional<int64_t> head_dim;    // Dh; unset: embed_dim / num_heads
  std::optional<int64_t> v_head_dim;  // Dv; unset: Dh
  std::optional<bool> qkv_bias;       // in_proj_bias present; unset: `bias`
  std::optional<bool> out_bias;       // out_proj.bias present; unset: `bias`
  std::optional<float> attn_scale;    // the scores' factor; unset: 1/√Dh
  // Throws std::invalid_argument naming the option: Dh or Dv not positive, a scale not finite and
  // positive, or (head_dim unset) embed_dim not divisible by num_heads.
  void validate(int64_t embed_dim, int64_t num_heads) const;

  // The keys, once: every config that holds a variant (tfm forward's, ModelConfig) reads and writes
  // them through this list.
  template <typename Self, typename Visit>
  static void fields(Self& v, Visit&& visit) {
    visit("head_dim", v.head_dim);
    visit("v_head_dim", v.v_head_dim);
    visit("qkv_bias", v.qkv_bias);
    visit("out_bias", v.out_bias);
    visit("attn_scale", v.attn_scale);
  }
};

// Keys: in_proj_weight (2A+Av, E) with the q, k, v rows in that order, in_proj_bias (2A+Av),
// out_proj.weight (E, Av), out_proj.bias (E); a bias switched off has no key. With add_bias_kv also bias_k
// (1, 1, A) and bias_v (1, 1, Av), xavier_normal-initialised as PyTorch does (std √(1/A), √(1/Av)).
// With kdim or vdim other than E (PyTorch's separate projections, `_qkv_same_embed_dim` false) the
// packed matrix is three: q_proj_weight (A, E), k_proj_weight (A, kdim), v_proj_weight (Av, vdim),
// and no in_proj_weight; in_proj_bias stays one vector.
// Init as PyTorch: xavier_uniform in_proj_weight (or each of q/k/v_proj_weight), zero biases,
// out_proj.weight like Linear.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout = 0.0f, bool bias = true,
                     bool batch_first = false, Generator& gen = default_generator());
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout, bool bias, bool batch_first,
                     const AttentionVariant& variant, Generator& gen = default_generator());
  // kdim, vdim: the widths of key and value (nn.MultiheadAttention's kdim and vdim; unset: embed_dim).
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout, bool bias, bool batch_first,
                     const AttentionVariant& variant, std::optional<int64_t> kdim, std::optional<int64_t> vdim,
                     Generator& gen = default_generator());
  // add_bias_kv, add_zero_attn: nn.MultiheadAttention's. add_bias_kv: learned bias_k (1, 1, A) and bias_v (1, 1, Av),
  // appended to every batch row's projected keys and values as one more position; add_zero_attn: then one more
  // position of zeros. The masks are padded so that every query may attend the added positions (PyTorch pads them
  // with 0 / False), and is_causal hides only the key's own S positions beyond the query's. Not with a cache.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout, bool bias, bool batch_first,
                     const AttentionVariant& variant, std::optional<int64_t> kdim, std::optional<int64_t> vdim,
                     bool add_bias_kv, bool add_zero_attn, Generator& gen = default_generator());
  // query (B, L, E) / (L, B, E); key (B, S, kdim) / (S, B, kdim), value (B, S, vdim) / (S, B, vdim)
  // → attn_output like query. When key and value (or all three) are the same tensor, their
  // projections run as one GEMM (not with separate projections: there each input has its own).
  //
  // With a cache: one decoding step, inference only. query (N, 1, E) / (1, N, E), one new position
  // per row → (N, 1, E) / (1, N, E), the same numbers the full forward computes at that position.
  //   Self-attention: query, key and value the same tensor, masks.is_causal set and no other mask.
  //   A prefill: batch_first self-attention into an empty cache may take a prompt (N, T, E): the
  //   causal attention of its T positions in one pass (ops::attention), their keys and values
  //   appended to the cache.
  //   Cross-attention: key and value the same memory (Bm, S, E) / (S, Bm, E) at every step (its
  //   projection is kept), no mask (the cache's memory_len stands for the key padding mask).
  //   Not with separate projections (kdim or vdim other than E).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const ops::AttentionMasks& masks = {}, AttentionCache* cache = nullptr) const;

  int64_t head_dim() const { return heads_.head_dim; }        // Dh
  int64_t v_head_dim() const { return heads_.v_head_dim; }    // Dv
  int64_t proj_dim() const { return heads_.qk_width(); }      // A = H·Dh
  int64_t v_proj_dim() const { return heads_.v_width(); }     // Av = H·Dv
  const ops::AttentionHeads& heads() const { return heads_; }  // H, Dh, Dv and the scale

  // PyTorch's `_qkv_same_embed_dim` negated: q/k/v_proj_weight instead of in_proj_weight.
  bool separate_projections() const { return kdim != embed_dim || vdim != embed_dim; }
  // Positions append_positions adds to the keys and values: bias_k/bias_v's and add_zero_attn's.
  int64_t added_positions() const { return (bias_k.defined() ? 1 : 0) + (add_zero_attn ? 1 : 0); }

  int64_t embed_dim, num_heads;
  int64_t kdim, vdim;  // the widths of key and value
  float dropout;
  bool batch_first;
  Tensor in_proj_weight, in_proj_bias;
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // separate_projections() only
  Tensor bias_k, bias_v;                               // (1, 1, A), (1, 1, Av): add_bias_kv only
  bool add_zero_attn = false;
  Linear out_proj;

 private:
  Tensor forward_step(const Tensor& query, const ops::AttentionInput& q, const ops::AttentionInput& k,
                      const ops::AttentionInput& v, bool self, AttentionCache& cache) const;
  ops::AttentionHeads heads_;
  Generator* gen_;
};

}  // namespace tfm
