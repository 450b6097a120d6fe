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
//   is_causal: additionally block key j > query i, on top of the other masks: the top-left-aligned
//     tril(L, S) mask of F.scaled_dot_product_attention(is_causal=True). In nn.MultiheadAttention
//     (PyTorch ≥ 2.0) is_causal is different: only a hint that attn_mask already holds the causal
//     mask, which must still be given. tfm's MultiheadAttention passes is_causal here as it is, so it
//     needs no attn_mask and applies the causal mask itself.
// A query row whose keys are all masked gets zeros (not NaN) and no gradient.
struct AttentionMasks {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
};

// The heads' geometry: H heads, queries and keys Dh wide and values (hence the output) Dv wide per
// head, scores scaled by `scale`. nn.MultiheadAttention's is Dh = Dv = E/H, scale = 1/√Dh.
struct AttentionHeads {
  int64_t num_heads = 1;   // H
  int64_t head_dim = 1;    // Dh
  int64_t v_head_dim = 1;  // Dv
  float scale = 1.0f;
  int64_t qk_width() const { return num_heads * head_dim; }   // H·Dh, the columns of q and of k
  int64_t v_width() const { return num_heads * v_head_dim; }  // H·Dv, the columns of v and of the output
};

// One of q, k, v: columns [col, col + W) of the last dim of src (W = H·Dh for q and k, H·Dv for v),
// where src is (B, L, C) when batch_first else (L, B, C). A packed projection (C = 2·H·Dh + H·Dv)
// serves as q, k and v at cols 0, H·Dh, 2·H·Dh without copies; the backward writes each block of
// d(src).
struct AttentionInput {
  Tensor src;
  int64_t col = 0;
};

// Returns (B, L, H·Dv) if batch_first else (L, B, H·Dv): softmax(scale·q·kᵀ + masks)·v per head,
// heads concatenated. Dropout p on the attention probabilities when training. Inside an
// Autocast(BFLOAT16) scope (tfm/autocast.h) the products take bfloat16 operands when
// bf16_attention_pays(L, S); otherwise, and inside InferenceMode, they are float32.
Tensor attention(const AttentionInput& q, const AttentionInput& k, const AttentionInput& v,
                 const AttentionHeads& heads, bool batch_first, const AttentionMasks& masks, float dropout_p,
                 bool training, Generator& gen);

// nn.MultiheadAttention's add_bias_kv and add_zero_attn, on projected keys or values: x (B, S, W) batch_first or
// (S, B, W) → (B, S + n, W) / (S + n, B, W), every batch row gaining n positions after its S: `row` (W values, any
// shape: bias_k is (1, 1, W)) when defined, then `zeros` positions of zeros; n = (row defined) + zeros.
// Backward: dx = dy's first S positions, drow = Σ_b dy[b, S] (in row's shape).
Tensor append_positions(const Tensor& x, const Tensor& row, int64_t zeros, bool batch_first);

// The masks of an attention whose S keys gained n more at the end (append_positions), which every query may attend,
// as PyTorch pads its masks for them (with 0 / False): attn_mask (L, S) or (B·H, L, S) and key_padding_mask (B, S)
// padded with n columns that mask nothing (Float32, additive); is_causal, which would hide the new keys from the
// first queries, becomes the causal −inf over the first S keys of attn_mask. Throws std::invalid_argument when a
// mask's key or query length is not S or L.
AttentionMasks pad_key_masks(const AttentionMasks& masks, int64_t L, int64_t S, int64_t n);

// Whether a bfloat16 autocast runs attention's products (QKᵀ, PV and their backward) in bfloat16 for L queries
// and S keys per head: when a head's scores fill more than one 64×64 tile, L·S > 64². Below that the products are
// a small part of the work, and rounding q, k, v and the output gradient into the bfloat16 layouts the products
// read costs more than the faster products save, so they stay float32 (bench/RESULTS.md, "Attention's products
// in bf16: from one score tile up").
bool bf16_attention_pays(int64_t L, int64_t S);

}  // namespace tfm::ops
