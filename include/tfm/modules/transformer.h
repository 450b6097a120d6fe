// tfm/modules/transformer.h — TransformerEncoderLayer/Encoder, TransformerDecoderLayer/Decoder and
// Transformer, exactly as torch.nn (arguments, defaults, state_dict keys, post-/pre-norm order).
//
// Post-norm (norm_first=false):  x = norm1(x + sa(x));  x = norm2(x + ff(x))
// Pre-norm  (norm_first=true):   x = x + sa(norm1(x));  x = x + ff(norm2(x))
// sa(x) = dropout1(self_attn(x, x, x)),  ff(x) = dropout2(linear2(dropout(act(linear1(x)))))
// Decoder adds mha(x, mem) = dropout2(multihead_attn(x, mem, mem)) between them, and norm3/dropout3.
//
// Incremental decoding runs the same forward with a cache (AttentionCache per attention module,
// tfm/modules/attention.h): each call feeds one new position per row, in eval mode, and returns
// what the causal full forward returns at that position. The decoder's self-attention reads the
// keys and values of the earlier positions from the cache; its cross-attention projects the memory
// once. An encoder layer with a causal mask and a cache is a decoder-only language model's layer.
// select_rows on a cache reorders its rows between steps (beam search).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tfm/modules/attention.h"
#include "tfm/ops/activation.h"
#include "tfm/ops/elementwise.h"

namespace tfm {

struct TransformerLayerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t dim_feedforward = 2048;
  float dropout = 0.1f;
  Activation activation = Activation::RELU;
  float layer_norm_eps = 1e-5f;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;  // false: no bias in any Linear, attention projection or LayerNorm
  AttentionVariant attention;  // head widths, projection biases and scale of every attention of the layer
  void validate() const;  // throws on d_model % nhead != 0 (head_dim unset), bad sizes or attention variant
};

// Gated activations double linear1's outputs: (2·dim_feedforward, d_model).
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& o, Generator& gen = default_generator());
  // src (B, S, D) / (S, B, D); mask: attn_mask rules; src_key_padding_mask (B, S).
  // With a cache (self-attention): one position per row, src (N, 1, D) / (1, N, D), is_causal set,
  // no masks (MultiheadAttention::forward's rules).
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false, AttentionCache* cache = nullptr) const;
  TransformerLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x) const;
};

// The self-attention caches of an encoder stack run causally, one per layer.
struct TransformerEncoderCache {
  TransformerEncoderCache() = default;
  // capacity: positions each layer's buffers hold before they grow (AttentionCache::capacity).
  TransformerEncoderCache(size_t num_layers, int64_t capacity);
  std::vector<AttentionCache> layers;  // (L)

  int64_t length() const { return layers.empty() ? 0 : layers[0].length(); }  // positions fed
  void select_rows(const std::vector<int64_t>& rows);                         // every layer's rows
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator());
  // With a cache: every layer steps with its own cache (TransformerEncoderLayer::forward's rules);
  // the cache must have one entry per layer.
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false, TransformerEncoderCache* cache = nullptr) const;
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;  // null when final_norm is false
};

// What a TransformerDecoderLayer keeps between decoding steps, named after its attention modules.
struct DecoderLayerCache {
  AttentionCache self_attn;       // keys, values (N, capacity, A) of the positions fed so far
  AttentionCache multihead_attn;  // the memory's keys, values (Bm, S, 2A), row_source (N), memory_len (Bm)
  void select_rows(const std::vector<int64_t>& rows);
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& o, Generator& gen = default_generator());
  // tgt (B, T, D) / (T, B, D); memory (B, S, D) / (S, B, D).
  // With a cache: one position per row, tgt (N, 1, D) / (1, N, D), tgt_is_causal set; memory
  // (Bm, S, D) / (S, Bm, D), the same tensor at every step, row n reading memory row
  // cache->multihead_attn.row_source[n]; no masks (memory_len marks the memory's padding).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false, DecoderLayerCache* cache = nullptr) const;
  TransformerLayerOptions options;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  Tensor feed_forward(const Tensor& x) const;
};

// The caches of a decoder stack, one per layer.
struct TransformerDecoderCache {
  TransformerDecoderCache() = default;
  // Every layer: capacity as AttentionCache::capacity; row n of the N decoded rows reads memory
  // row row_source[n] (N), whose keys [0, memory_len[b]) are real (Bm) — empty: the defaults of
  // AttentionCache (row n reads memory row n, every key real).
  TransformerDecoderCache(size_t num_layers, int64_t capacity, const std::vector<int64_t>& row_source = {},
                          const std::vector<int64_t>& memory_len = {});
  std::vector<DecoderLayerCache> layers;  // (L)

  int64_t length() const { return layers.empty() ? 0 : layers[0].self_attn.length(); }  // positions fed
  void select_rows(const std::vector<int64_t>& rows);  // every layer's rows and row_source
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator());
  // With a cache: every layer steps with its own cache (TransformerDecoderLayer::forward's rules);
  // the cache must have one entry per layer.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false, TransformerDecoderCache* cache = nullptr) const;
  std::vector<std::unique_ptr<TransformerDecoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;
};

// nn.Transformer: encoder.* and decoder.*, both with their final norms. Init: xavier_uniform on every
// matrix (as Transformer._reset_parameters).
class Transformer : public Module {
 public:
  Transformer(const TransformerLayerOptions& o, int64_t num_encoder_layers = 6, int64_t num_decoder_layers = 6,
              Generator& gen = default_generator());
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false) const;
  TransformerEncoder encoder;
  TransformerDecoder decoder;
};

}  // namespace tfm
