// tfm/ops/attention_cache.h — attention for incremental decoding: one new query per row against
// cached keys/values. Inference only (no autograd): calling these with gradient recording on and an
// input that requires a gradient throws.
//
// Both functions run the same flash-attention kernel as ops::attention, addressing the cache
// buffers through strides, so a cached step computes what the full causal decoder computes for its
// last position (rows are independent in the kernel; masked keys contribute exactly 0).
#pragma once

#include <cstdint>
#include <vector>

#include "tfm/ops/attention.h"

namespace tfm::ops {

// The keys and values of positions [0, length) of N decoding rows (hypotheses), for one
// self-attention layer. Storage grows by doubling; rows are independent.
struct KVCache {
  Tensor k;  // (N, capacity, H·Dh) projected keys
  Tensor v;  // (N, capacity, H·Dv) projected values
  int64_t length = 0;

  void reset(int64_t N, int64_t capacity, int64_t Ek, int64_t Ev);  // empty cache, key and value widths
  int64_t rows() const { return k.defined() ? k.size(0) : 0; }
  // Appends T positions: src (N, T, C); position t's key is src[n, t, k_col : k_col+H·Dh], its value
  // src[n, t, v_col : v_col+H·Dv] (T = 1 for a decoding step, the prompt's length for a prefill). The
  // capacity doubles until they fit.
  void append(const Tensor& src, int64_t k_col, int64_t v_col);
  // Row r of the result is old row rows[r] (beam reordering and dropping finished rows; indices
  // may repeat).
  void select_rows(const std::vector<int64_t>& rows);
};

// softmax(scale·q·kᵀ)·v per head for each row's single query q.src (N, 1, C) (columns
// [q.col, q.col+H·Dh)) against its cached positions [0, cache.length) → (N, 1, H·Dv). No mask is
// needed: the cache holds only earlier positions and the current one (the causal mask of the full
// decoder).
Tensor attention_step(const AttentionInput& q, const KVCache& cache, const AttentionHeads& heads);

// Cross-attention of N single queries q.src (N, 1, C) against projected memory shared by the rows
// of one source: k.src, v.src (Bm, S, Ck) when batch_first, else (S, Bm, Ck); row n reads memory
// row row_source[n] and its keys [0, memory_len[row_source[n]]) (the unpadded part: sources are
// padded at the end, so this is the key_padding_mask of the full model). A row whose memory is
// empty gets zeros, like an all-masked row in ops::attention. Consecutive rows of the same source
// run as one kernel call. → (N, 1, H·Dv).
Tensor attention_memory(const AttentionInput& q, const AttentionInput& k, const AttentionInput& v,
                        const std::vector<int64_t>& row_source, const std::vector<int64_t>& memory_len,
                        const AttentionHeads& heads, bool batch_first = true);

}  // namespace tfm::ops
