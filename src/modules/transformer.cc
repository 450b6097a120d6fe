// src/modules/transformer.cc — encoder/decoder layers and stacks, their decoding caches, and
// nn.Transformer. Each layer's forward is written once: a cache changes what its attention modules
// read (tfm/modules/attention.h), not the residual and norm order around them.
#include "tfm/modules/transformer.h"

#include <algorithm>
#include <stdexcept>

#include "ops/linear_activation.h"
#include "quote.h"
#include "tfm/ops/layer_norm.h"

namespace tfm {

void LayerOptions::validate() const {
  if (d_model <= 0 || nhead <= 0 || dim_feedforward <= 0)
    throw std::invalid_argument("d_model, nhead and dim_feedforward must be positive (got " + std::to_string(d_model) +
                                ", " + std::to_string(nhead) + ", " + std::to_string(dim_feedforward) + ")");
  if (d_model % nhead != 0 && !attention.head_dim)
    throw std::invalid_argument("d_model " + std::to_string(d_model) + " is not divisible by nhead " +
                                std::to_string(nhead) + " (or set head_dim)");
  attention.validate(d_model, nhead);
  if (!(dropout >= 0.0f && dropout <= 1.0f))
    throw std::invalid_argument("dropout must be in [0, 1], got " + number_text(dropout));
  if (!(layer_norm_eps > 0.0f))
    throw std::invalid_argument("layer_norm_eps must be positive, got " + number_text(layer_norm_eps));
  if (norm_type == NormType::RMS_NORM && norm_bias.value_or(false))
    throw std::invalid_argument("norm_bias: rms_norm has no bias (expected norm_bias false or unset)");
  if (!(drop_path >= 0.0f && drop_path < 1.0f))
    throw std::invalid_argument("drop_path must be in [0, 1), got " + number_text(drop_path));
}

void TransformerLayerOptions::validate() const {
  LayerOptions::validate();
  enum_name(activation);  // a value outside the enum throws
}

static const TransformerLayerOptions& validated(const TransformerLayerOptions& o) {
  o.validate();
  return o;
}
static int64_t ffn_in(const TransformerLayerOptions& o) {
  return activation_is_gated(o.activation) ? 2 * o.dim_feedforward : o.dim_feedforward;
}
static ops::AttentionMasks masks_of(const Tensor& attn_mask, const Tensor& kpm, bool causal) {
  ops::AttentionMasks m;
  m.attn_mask = attn_mask;
  m.key_padding_mask = kpm;
  m.is_causal = causal;
  return m;
}

// x + drop_path(r_dropout(r)), the pre-norm residual. Without an active drop_path this is the fused
// ops::add_dropout (the same numbers and draw as ops::add(x, dropout(r))).
static Tensor residual(const Tensor& x, const Tensor& r, const Dropout& r_dropout, const DropPath& drop_path) {
  if (!drop_path.active()) return r_dropout.forward_add(x, r);
  return ops::add(x, drop_path.forward(r_dropout.forward(r)));
}
// {x + drop_path(r_dropout(r)), norm(that)}: a pre-norm layer's residual stream and its next
// sublayer's input; with a LayerNorm and without an active drop_path both in one pass
// (ops::add_dropout_and_layer_norm: the numbers, draw and gradients of residual() then norm.forward()).
static std::pair<Tensor, Tensor> residual_and_norm(const Norm& norm, const Tensor& x, const Tensor& r,
                                                   const Dropout& r_dropout, const DropPath& drop_path) {
  if (drop_path.active() || norm.type != NormType::LAYER_NORM) {
    Tensor z = residual(x, r, r_dropout, drop_path);
    return {z, norm.forward(z)};
  }
  return ops::add_dropout_and_layer_norm(x, r, r_dropout.p, r_dropout.is_training(), r_dropout.generator(),
                                         norm.weight, norm.bias, norm.eps);
}
// norm(x + drop_path(r_dropout(r))), the post-norm residual; without an active drop_path Norm's
// fused forward_add.
static Tensor norm_residual(const Norm& norm, const Tensor& x, const Tensor& r, const Dropout& r_dropout,
                            const DropPath& drop_path) {
  if (!drop_path.active()) return norm.forward_add(x, r, r_dropout);
  return norm.forward(ops::add(x, drop_path.forward(r_dropout.forward(r))));
}

// ---- encoder layer --------------------------------------------------------------------------------
TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o, Generator& gen)
    : options(validated(o)),
      self_attn(o.d_model, o.nhead, o.dropout, o.bias, o.batch_first, o.attention, gen),
      linear1(o.d_model, ffn_in(o), o.has_ffn_bias(), gen),
      dropout(o.dropout, gen),
      linear2(o.dim_feedforward, o.d_model, o.has_ffn_bias(), gen),
      norm1(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias()),
      norm2(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias()),
      dropout1(o.dropout, gen),
      dropout2(o.dropout, gen),
      drop_path(o.drop_path, o.sample_dim(), gen) {
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("drop_path", drop_path);
}

// ff(x) = linear2(dropout(act(linear1(x))))   (the residual's dropout applied by the caller), as
// ops::feed_forward (ops/linear_activation.h): act(linear1(x)) is one fused op (the bias and
// activation in one pass after the GEMM); with ReLU the dropout joins that pass too; bfloat16
// training keeps the hidden activation the second Linear multiplies in bfloat16 only. Inside
// InferenceMode, where decoding runs, the packed Linear adds its bias after the GEMM too (oneDNN's
// bias epilogue), so this is bitwise activation(linear1(x)); outside, ops::linear sums the GEMM onto
// rows preset to the bias (kernels::gemm_bias), and the bias enters the sum where the GEMM adds C
// (gemm_scalar: after the whole sum; oneDNN: in its own blocking, which differs from that once K is past
// a few hundred), which may round differently.
static Tensor feed_forward_of(const Tensor& x, const Linear& linear1, const Dropout& dropout,
                              const Linear& linear2, Activation act) {
  return ops::feed_forward(x, linear1.weight, linear1.bias, linear2.weight, linear2.bias, act, dropout.p,
                           dropout.is_training(), dropout.generator());
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) const {
  return feed_forward_of(x, linear1, dropout, linear2, options.activation);
}

// In eval mode the dropouts and drop_path are identities, with or without a cache. Pre-norm: the
// residual before norm2 and norm2 are one op, ops::add_dropout_and_layer_norm (with an RMSNorm, the
// add, then the norm), the last residual ops::add_dropout (residual(): ops::add of the dropped branch with an
// active drop_path). Post-norm: each residual and the norm after it is
// Norm::forward_add (with a LayerNorm the fused ops::add_layer_norm, reached through
// ops::add_dropout_layer_norm; with an RMSNorm, the add, then the norm).
Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm,
                                        bool is_causal, AttentionCache* cache) const {
  const auto m = masks_of(src_mask, kpm, is_causal);
  if (options.norm_first) {
    Tensor h = norm1.forward(src);
    const auto [x, h2] = residual_and_norm(norm2, src, self_attn.forward(h, h, h, m, cache), dropout1, drop_path);
    return residual(x, feed_forward(h2), dropout2, drop_path);
  }
  Tensor x = norm_residual(norm1, src, self_attn.forward(src, src, src, m, cache), dropout1, drop_path);
  return norm_residual(norm2, x, feed_forward(x), dropout2, drop_path);
}

TransformerEncoderCache::TransformerEncoderCache(size_t num_layers, int64_t capacity) : layers(num_layers) {
  for (AttentionCache& c : layers) c.capacity = capacity;
}

void TransformerEncoderCache::select_rows(const std::vector<int64_t>& rows) {
  for (AttentionCache& c : layers) c.select_rows(rows);
}

// ---- the stacks -----------------------------------------------------------------------------------
template <typename Layer>
TransformerStack<Layer>::TransformerStack(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                                          Generator& gen)
    : num_layers_(num_layers), shared_(o.share_layers) {
  o.validate();
  if (num_layers < 0) throw std::invalid_argument("num_layers must be ≥ 0, got " + std::to_string(num_layers));
  const int64_t distinct = shared_ ? std::min<int64_t>(num_layers, 1) : num_layers;
  for (int64_t i = 0; i < distinct; ++i) {
    layers.push_back(std::make_unique<Layer>(o, gen));
    register_module("layers." + std::to_string(i), *layers.back());
  }
  if (final_norm) {
    norm = std::make_unique<Norm>(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias());
    register_module("norm", *norm);
  }
}

template <typename Layer>
void TransformerStack<Layer>::check_cache(const char* module, size_t cache_layers) const {
  if (cache_layers != static_cast<size_t>(num_layers_))
    throw std::invalid_argument(std::string(module) + ": the cache has " + std::to_string(cache_layers) +
                                " layers, the module " + std::to_string(num_layers_));
}

template class TransformerStack<TransformerEncoderLayer>;
template class TransformerStack<TransformerDecoderLayer>;

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& kpm, bool is_causal,
                                  TransformerEncoderCache* cache) const {
  if (cache) check_cache("TransformerEncoder", cache->layers.size());
  Tensor x = src;
  for (int64_t l = 0; l < num_layers(); ++l)
    x = layer(l).forward(x, mask, kpm, is_causal, cache ? &cache->layers[static_cast<size_t>(l)] : nullptr);
  return norm ? norm->forward(x) : x;
}

// ---- decoder layer --------------------------------------------------------------------------------
TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o, Generator& gen)
    : options(validated(o)),
      self_attn(o.d_model, o.nhead, o.dropout, o.bias, o.batch_first, o.attention, gen),
      multihead_attn(o.d_model, o.nhead, o.dropout, o.bias, o.batch_first, o.attention, gen),
      linear1(o.d_model, ffn_in(o), o.has_ffn_bias(), gen),
      dropout(o.dropout, gen),
      linear2(o.dim_feedforward, o.d_model, o.has_ffn_bias(), gen),
      norm1(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias()),
      norm2(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias()),
      norm3(o.norm_type, o.d_model, o.layer_norm_eps, o.has_norm_bias()),
      dropout1(o.dropout, gen),
      dropout2(o.dropout, gen),
      dropout3(o.dropout, gen),
      drop_path(o.drop_path, o.sample_dim(), gen) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
  register_module("drop_path", drop_path);
}

Tensor TransformerDecoderLayer::feed_forward(const Tensor& x) const {
  return feed_forward_of(x, linear1, dropout, linear2, options.activation);
}

// Eval mode, with or without a cache: as TransformerEncoderLayer::forward.
Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& memory_kpm,
                                        bool tgt_is_causal, bool memory_is_causal, DecoderLayerCache* cache) const {
  const auto sm = masks_of(tgt_mask, tgt_kpm, tgt_is_causal);
  const auto mm = masks_of(memory_mask, memory_kpm, memory_is_causal);
  AttentionCache* sc = cache ? &cache->self_attn : nullptr;
  AttentionCache* mc = cache ? &cache->multihead_attn : nullptr;
  if (options.norm_first) {
    Tensor h = norm1.forward(tgt);
    Tensor x = residual(tgt, self_attn.forward(h, h, h, sm, sc), dropout1, drop_path);
    x = residual(x, multihead_attn.forward(norm2.forward(x), memory, memory, mm, mc), dropout2, drop_path);
    return residual(x, feed_forward(norm3.forward(x)), dropout3, drop_path);
  }
  Tensor x = norm_residual(norm1, tgt, self_attn.forward(tgt, tgt, tgt, sm, sc), dropout1, drop_path);
  x = norm_residual(norm2, x, multihead_attn.forward(x, memory, memory, mm, mc), dropout2, drop_path);
  return norm_residual(norm3, x, feed_forward(x), dropout3, drop_path);
}

void DecoderLayerCache::select_rows(const std::vector<int64_t>& rows) {
  self_attn.select_rows(rows);
  multihead_attn.select_rows(rows);
}

TransformerDecoderCache::TransformerDecoderCache(size_t num_layers, int64_t capacity,
                                                 const std::vector<int64_t>& row_source,
                                                 const std::vector<int64_t>& memory_len)
    : layers(num_layers) {
  for (DecoderLayerCache& c : layers) {
    c.self_attn.capacity = capacity;
    c.multihead_attn.row_source = row_source;
    c.multihead_attn.memory_len = memory_len;
  }
}

void TransformerDecoderCache::select_rows(const std::vector<int64_t>& rows) {
  for (DecoderLayerCache& c : layers) c.select_rows(rows);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& memory_kpm,
                                   bool tgt_is_causal, bool memory_is_causal, TransformerDecoderCache* cache) const {
  if (cache) check_cache("TransformerDecoder", cache->layers.size());
  Tensor x = tgt;
  for (int64_t l = 0; l < num_layers(); ++l)
    x = layer(l).forward(x, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm, tgt_is_causal, memory_is_causal,
                         cache ? &cache->layers[static_cast<size_t>(l)] : nullptr);
  return norm ? norm->forward(x) : x;
}

// ---- Transformer ----------------------------------------------------------------------------------
Transformer::Transformer(const TransformerLayerOptions& o, int64_t num_encoder_layers, int64_t num_decoder_layers,
                         Generator& gen)
    : encoder(o, num_encoder_layers, true, gen), decoder(o, num_decoder_layers, true, gen) {
  register_module("encoder", encoder);
  register_module("decoder", decoder);
  visit_parameters([&](const std::string&, Tensor& t) {
    if (t.dim() > 1) init_xavier_uniform(t, gen);
  });
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_kpm, const Tensor& tgt_kpm,
                            const Tensor& memory_kpm, bool src_is_causal, bool tgt_is_causal,
                            bool memory_is_causal) const {
  Tensor memory = encoder.forward(src, src_mask, src_kpm, src_is_causal);
  return decoder.forward(tgt, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm, tgt_is_causal, memory_is_causal);
}

}  // namespace tfm
