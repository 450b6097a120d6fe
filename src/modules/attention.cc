// src/modules/attention.cc — nn.MultiheadAttention: packed input projection, attention, out_proj;
// with an AttentionCache, the same projections feed the single-position attention of incremental
// decoding (ops/attention_cache.h) instead of ops::attention.
#include "tfm/modules/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "tfm/ops/linear.h"

namespace tfm {

void AttentionCache::select_rows(const std::vector<int64_t>& rows) {
  if (kv.k.defined()) kv.select_rows(rows);
  if (row_source.empty()) {  // identity: new row r reads memory row rows[r]
    row_source = rows;
    return;
  }
  std::vector<int64_t> src(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] < 0 || rows[r] >= static_cast<int64_t>(row_source.size()))
      throw std::invalid_argument("AttentionCache::select_rows: row " + std::to_string(rows[r]) +
                                  " out of range [0, " + std::to_string(row_source.size()) + ")");
    src[r] = row_source[static_cast<size_t>(rows[r])];
  }
  row_source = std::move(src);
}

void AttentionVariant::validate(int64_t embed_dim, int64_t num_heads) const {
  if (num_heads <= 0 || embed_dim <= 0)
    throw std::invalid_argument("MultiheadAttention: embed_dim " + std::to_string(embed_dim) + " and num_heads " +
                                std::to_string(num_heads) + " must be positive");
  if (head_dim && *head_dim <= 0)
    throw std::invalid_argument("MultiheadAttention: head_dim must be positive, got " + std::to_string(*head_dim));
  if (v_head_dim && *v_head_dim <= 0)
    throw std::invalid_argument("MultiheadAttention: v_head_dim must be positive, got " +
                                std::to_string(*v_head_dim));
  if (attn_scale && !(std::isfinite(*attn_scale) && *attn_scale > 0.0f))
    throw std::invalid_argument("MultiheadAttention: attn_scale must be finite and positive, got " +
                                std::to_string(*attn_scale));
  if (!head_dim && embed_dim % num_heads != 0)
    throw std::invalid_argument("MultiheadAttention: embed_dim " + std::to_string(embed_dim) +
                                " is not divisible by num_heads " + std::to_string(num_heads) +
                                " (or give head_dim)");
}

namespace {
// Av = H·Dv for these arguments, once they are checked (out_proj, the first member built, needs it).
int64_t checked_value_width(const AttentionVariant& v, int64_t embed_dim, int64_t num_heads) {
  v.validate(embed_dim, num_heads);
  return num_heads * v.v_head_dim.value_or(v.head_dim.value_or(embed_dim / num_heads));
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, float dropout_, bool bias,
                                       bool batch_first_, Generator& gen)
    : MultiheadAttention(embed_dim_, num_heads_, dropout_, bias, batch_first_, AttentionVariant{}, gen) {}

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, float dropout_, bool bias,
                                       bool batch_first_, const AttentionVariant& variant, Generator& gen)
    : MultiheadAttention(embed_dim_, num_heads_, dropout_, bias, batch_first_, variant, std::nullopt, std::nullopt,
                         gen) {}

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, float dropout_, bool bias,
                                       bool batch_first_, const AttentionVariant& variant, std::optional<int64_t> kdim_,
                                       std::optional<int64_t> vdim_, Generator& gen)
    : MultiheadAttention(embed_dim_, num_heads_, dropout_, bias, batch_first_, variant, kdim_, vdim_, false, false,
                         gen) {}

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, float dropout_, bool bias,
                                       bool batch_first_, const AttentionVariant& variant, std::optional<int64_t> kdim_,
                                       std::optional<int64_t> vdim_, bool add_bias_kv, bool add_zero_attn_,
                                       Generator& gen)
    : embed_dim(embed_dim_),
      num_heads(num_heads_),
      kdim(kdim_.value_or(embed_dim_)),
      vdim(vdim_.value_or(embed_dim_)),
      dropout(dropout_),
      batch_first(batch_first_),
      add_zero_attn(add_zero_attn_),
      out_proj(checked_value_width(variant, embed_dim_, num_heads_), embed_dim_, variant.out_bias.value_or(bias), gen),
      gen_(&gen) {
  const int64_t Dh = variant.head_dim.value_or(embed_dim / num_heads);
  heads_.num_heads = num_heads;
  heads_.head_dim = Dh;
  heads_.v_head_dim = variant.v_head_dim.value_or(Dh);
  heads_.scale = variant.attn_scale.value_or(1.0f / std::sqrt(static_cast<float>(Dh)));
  if (kdim <= 0 || vdim <= 0)
    throw std::invalid_argument("MultiheadAttention: kdim " + std::to_string(kdim) + " and vdim " +
                                std::to_string(vdim) + " must be positive");
  if (separate_projections()) {
    q_proj_weight = Tensor::empty({proj_dim(), embed_dim});
    k_proj_weight = Tensor::empty({proj_dim(), kdim});
    v_proj_weight = Tensor::empty({v_proj_dim(), vdim});
    for (Tensor* w : {&q_proj_weight, &k_proj_weight, &v_proj_weight}) init_xavier_uniform(*w, gen);
    register_parameter("q_proj_weight", q_proj_weight);
    register_parameter("k_proj_weight", k_proj_weight);
    register_parameter("v_proj_weight", v_proj_weight);
  } else {
    in_proj_weight = Tensor::empty({2 * proj_dim() + v_proj_dim(), embed_dim});
    init_xavier_uniform(in_proj_weight, gen);
    register_parameter("in_proj_weight", in_proj_weight);
  }
  if (variant.qkv_bias.value_or(bias)) in_proj_bias = Tensor::zeros({2 * proj_dim() + v_proj_dim()});
  if (out_proj.bias.defined()) out_proj.bias.fill_(0.0f);
  register_parameter("in_proj_bias", in_proj_bias);
  if (add_bias_kv) {  // xavier_normal over (1, 1, W): fan_in = fan_out = W, std = √(2 / 2W)
    bias_k = Tensor::empty({1, 1, proj_dim()});
    bias_v = Tensor::empty({1, 1, v_proj_dim()});
    for (Tensor* b : {&bias_k, &bias_v}) init_normal(*b, 1.0f / std::sqrt(static_cast<float>(b->size(2))), gen);
    register_parameter("bias_k", bias_k);
    register_parameter("bias_v", bias_v);
  }
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const ops::AttentionMasks& masks, AttentionCache* cache) const {
  const int64_t A = proj_dim(), Av = v_proj_dim();
  auto rows = [&](int64_t start, int64_t n, const Tensor& t) { return t.defined() ? t.narrow0(start, n) : Tensor(); };
  const bool separate = separate_projections();
  const int64_t added = added_positions();
  // With added positions the keys and values are appended to (append_positions): each projection its own tensor.
  const bool self = !separate && added == 0 && query.same(key) && key.same(value);
  if (cache) {
    const char* why = nullptr;
    if (separate)
      why = "kdim and vdim must equal embed_dim (one packed in_proj_weight)";
    else if (added > 0)
      why = "not with add_bias_kv or add_zero_attn (the cache holds the projected positions only)";
    else if (!self && !key.same(value))
      why = "key and value must be one tensor (self- or cross-attention)";
    else if (masks.attn_mask.defined() || masks.key_padding_mask.defined())
      why = self ? "the cache holds exactly the earlier positions, so no attn_mask or key_padding_mask"
                 : "no attn_mask or key_padding_mask (the cache's memory_len marks the padding)";
    else if (masks.is_causal != self)
      why = self ? "self-attention with a cache is causal: set is_causal" : "cross-attention cannot be causal";
    else if (is_training() && dropout > 0.0f) why = "attention dropout does not run with a cache: call eval()";
    if (why) throw std::invalid_argument(std::string("MultiheadAttention with a cache: ") + why);
  }
  ops::AttentionInput q, k, v;
  if (self) {  // self-attention: one (.., 2A+Av) projection
    Tensor qkv = ops::linear(query, in_proj_weight, in_proj_bias);
    q = {qkv, 0};
    k = {qkv, A};
    v = {qkv, 2 * A};
  } else if (!separate && added == 0 && key.same(value)) {
    // cross-attention: q, and one (.., A+Av) projection of memory
    q = {ops::linear(query, rows(0, A, in_proj_weight), rows(0, A, in_proj_bias)), 0};
    Tensor kv;
    if (cache && cache->memory_kv.defined()) {
      if (!cache->memory.same(key))
        throw std::invalid_argument(
            "MultiheadAttention with a cache: the memory differs from the one whose keys and values the cache holds");
      kv = cache->memory_kv;
    } else {
      kv = ops::linear(key, rows(A, A + Av, in_proj_weight), rows(A, A + Av, in_proj_bias));
      if (cache) {
        cache->memory = key;
        cache->memory_kv = kv;
      }
    }
    k = {kv, 0};
    v = {kv, A};
  } else {  // each input through its rows of in_proj_weight, or its own matrix (separate projections)
    q = {ops::linear(query, separate ? q_proj_weight : rows(0, A, in_proj_weight), rows(0, A, in_proj_bias)), 0};
    k = {ops::linear(key, separate ? k_proj_weight : rows(A, A, in_proj_weight), rows(A, A, in_proj_bias)), 0};
    v = {ops::linear(value, separate ? v_proj_weight : rows(2 * A, Av, in_proj_weight), rows(2 * A, Av, in_proj_bias)),
         0};
  }
  ops::AttentionMasks padded;  // with added positions: the masks padded for them
  const ops::AttentionMasks* use = &masks;
  if (added > 0 && q.src.dim() == 3 && k.src.dim() == 3 && v.src.dim() == 3) {
    // k (B, S, A) → (B, S + added, A), v likewise (other ranks: ops::attention's error)
    const int64_t L = q.src.size(batch_first ? 1 : 0), S = k.src.size(batch_first ? 1 : 0);
    padded = ops::pad_key_masks(masks, L, S, added);
    use = &padded;
    k = {ops::append_positions(k.src, bias_k, add_zero_attn ? 1 : 0, batch_first), 0};
    v = {ops::append_positions(v.src, bias_v, add_zero_attn ? 1 : 0, batch_first), 0};
  }
  const Tensor o = cache ? forward_step(query, q, k, v, self, *cache)
                         : ops::attention(q, k, v, heads_, batch_first, *use, dropout, is_training(), *gen_);
  return out_proj.forward(o);
}

// One position per row: query (N, 1, E) batch_first or (1, N, E), the same N rows in memory either
// way, so the projections are viewed as (N, 1, C) and the result is returned in query's layout.
// A prefill: self-attention, batch_first, an empty cache and a query (N, T, E) of T > 1 positions runs
// the causal attention of the T positions at once (what T steps compute, in one ops::attention) and
// appends their keys and values to the cache.
Tensor MultiheadAttention::forward_step(const Tensor& query, const ops::AttentionInput& q,
                                        const ops::AttentionInput& k, const ops::AttentionInput& v, bool self,
                                        AttentionCache& cache) const {
  const int64_t A = proj_dim(), Av = v_proj_dim();
  if (self && batch_first && query.dim() == 3 && query.size(1) > 1 && cache.kv.length == 0) {
    const int64_t N = query.size(0), T = query.size(1);
    cache.kv.reset(N, std::max(cache.capacity, T), A, Av);
    cache.kv.append(q.src, k.col, v.col);  // q.src is the (N, T, 2A+Av) projection
    ops::AttentionMasks causal;
    causal.is_causal = true;
    return ops::attention(q, k, v, heads_, /*batch_first=*/true, causal, 0.0f, /*training=*/false, *gen_);
  }
  if (query.dim() != 3 || query.size(batch_first ? 1 : 0) != 1)
    throw std::invalid_argument(std::string("MultiheadAttention with a cache: query must hold one position per row, ") +
                                (batch_first ? "(N, 1, E)" : "(1, N, E)") + ", got " + shape_str(query.shape()));
  const int64_t N = query.size(batch_first ? 0 : 1);
  auto as_rows = [&](const Tensor& t) { return batch_first ? t : t.reshape({N, 1, t.size(2)}); };
  Tensor o;  // (N, 1, Av)
  if (self) {
    const Tensor qkv = as_rows(q.src);  // (N, 1, 2A+Av)
    if (!cache.kv.k.defined()) cache.kv.reset(N, cache.capacity, A, Av);
    cache.kv.append(qkv, k.col, v.col);
    o = ops::attention_step({qkv, q.col}, cache.kv, heads_);
  } else {
    const int64_t Bm = k.src.size(batch_first ? 0 : 1), S = k.src.size(batch_first ? 1 : 0);
    if (cache.row_source.empty()) {
      cache.row_source.resize(static_cast<size_t>(N));
      std::iota(cache.row_source.begin(), cache.row_source.end(), int64_t{0});
    }
    if (cache.memory_len.empty()) cache.memory_len.assign(static_cast<size_t>(Bm), S);
    o = ops::attention_memory({as_rows(q.src), q.col}, k, v, cache.row_source, cache.memory_len, heads_,
                              batch_first);
  }
  return batch_first ? o : o.reshape({1, N, Av});
}

}  // namespace tfm
