// tfm/modules/transformer.h — TransformerEncoderLayer/Encoder, TransformerDecoderLayer/Decoder and
// Transformer, exactly as torch.nn (arguments, defaults, state_dict keys, post-/pre-norm order).
//
// Post-norm (norm_first=false):  x = norm1(x + sa(x));  x = norm2(x + ff(x))
// Pre-norm  (norm_first=true):   x = x + sa(norm1(x));  x = x + ff(norm2(x))
// sa(x) = dropout1(self_attn(x, x, x)),  ff(x) = dropout2(linear2(dropout(act(linear1(x)))))
// Decoder adds mha(x, mem) = dropout2(multihead_attn(x, mem, mem)) between them, and norm3; its ff ends in
// dropout3 (torch's _ff_block) instead of dropout2.
// With drop_path p > 0 each residual branch is also dropped per sample in training (stochastic
// depth): x + drop_path(sa(...)), norm1(x + drop_path(sa(x))), and likewise for ff and mha.
// Norms are LayerNorm or RMSNorm (options.norm_type); a stack with share_layers applies one layer,
// registered as layers.0, num_layers times.
//
// Incremental decoding runs the same forward with a cache (AttentionCache per attention module,
// tfm/modules/attention.h): each call feeds one new position per row, in eval mode, and returns
// what the causal full forward returns at that position. The decoder's self-attention reads the
// keys and values of the earlier positions from the cache; its cross-attention projects the memory
// once. An encoder layer with a causal mask and a cache is a decoder-only language model's layer.
// select_rows on a cache reorders its rows between steps (beam search).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tfm/modules/attention.h"
#include "tfm/ops/activation.h"
#include "tfm/ops/elementwise.h"

namespace tfm {

// The options every layer of a stack or model shares, under torch.nn's names: nn.TransformerEncoderLayer's
// sizes, dropout, eps and bias, and the variants beyond torch.nn (each unset or at its default: torch.nn's
// layer exactly). fields() lists each key once, and validate() checks each once with one stated range:
// TransformerLayerOptions adds the arguments a model resolves by its family (activation, norm_first) and
// the layout (batch_first); ModelConfig (tfm/models/config.h) derives from this struct, so its config.json
// keys and `tfm forward`'s config keys are these.
//
// To add a layer option: a member and one line in fields() here, its check in validate(), its use in the
// layers (src/modules/transformer.cc), and its row in `tfm train`'s option table (src/train/options.cc).
struct LayerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t dim_feedforward = 2048;
  float dropout = 0.1f;       // [0, 1], nn.Dropout's range
  float layer_norm_eps = 1e-5f;
  bool bias = true;  // the default of attention.qkv_bias, attention.out_bias, ffn_bias and norm_bias
  AttentionVariant attention;  // head widths, projection biases and scale of every attention of the layer
  std::optional<bool> ffn_bias;   // linear1.bias, linear2.bias present; unset: `bias`
  std::optional<bool> norm_bias;  // every LayerNorm's bias present; unset: `bias` (false for RMS_NORM,
                                  // with which true is an error)
  NormType norm_type = NormType::LAYER_NORM;  // every norm of the layer and of the stacks' final norm
  bool share_layers = false;  // read by the stacks: one layer's weights used num_layers times (keys
                              // once, under layers.0.; the gradients of all uses add up)
  float drop_path = 0.0f;     // stochastic depth on every residual branch, per sample, training only; [0, 1)

  bool has_ffn_bias() const { return ffn_bias.value_or(bias); }
  bool has_norm_bias() const { return norm_bias.value_or(bias && norm_type == NormType::LAYER_NORM); }
  // Throws std::invalid_argument naming the option: sizes not positive, d_model % nhead != 0 (head_dim
  // unset), a bad attention variant, dropout outside [0, 1], layer_norm_eps not positive, norm_bias
  // true with rms_norm, drop_path outside [0, 1).
  void validate() const;

  template <typename Self, typename Visit>
  static void fields(Self& o, Visit&& visit) {
    visit("d_model", o.d_model);
    visit("nhead", o.nhead);
    visit("dim_feedforward", o.dim_feedforward);
    visit("dropout", o.dropout);
    visit("layer_norm_eps", o.layer_norm_eps);
    visit("bias", o.bias);
    AttentionVariant::fields(o.attention, visit);
    visit("ffn_bias", o.ffn_bias);
    visit("norm_bias", o.norm_bias);
    visit("norm_type", o.norm_type);
    visit("share_layers", o.share_layers);
    visit("drop_path", o.drop_path);
  }
};

struct TransformerLayerOptions : LayerOptions {
  Activation activation = Activation::RELU;
  bool batch_first = false;
  bool norm_first = false;

  int64_t sample_dim() const { return batch_first ? 0 : 1; }  // the batch dim of (B, T, D) / (T, B, D)
  void validate() const;  // LayerOptions::validate and the activation

  template <typename Self, typename Visit>
  static void fields(Self& o, Visit&& visit) {
    LayerOptions::fields(o, visit);
    visit("activation", o.activation);
    visit("batch_first", o.batch_first);
    visit("norm_first", o.norm_first);
  }
};

// Gated activations double linear1's outputs: (2·dim_feedforward, d_model).
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& o, Generator& gen = default_generator());
  // src (B, S, D) / (S, B, D); mask: attn_mask rules; src_key_padding_mask (B, S).
  // With a cache (self-attention): one position per row, src (N, 1, D) / (1, N, D), is_causal set (or,
  // batch_first into an empty cache, a prompt (N, T, D): one causal pass that fills the cache),
  // no masks (MultiheadAttention::forward's rules).
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false, AttentionCache* cache = nullptr) const;
  TransformerLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  Norm norm1, norm2;
  Dropout dropout1, dropout2;
  DropPath drop_path;  // of every residual branch; no parameters

 private:
  Tensor feed_forward(const Tensor& x) const;
};

// The self-attention caches of an encoder stack run causally, one per layer.
struct TransformerEncoderCache {
  TransformerEncoderCache() = default;
  // capacity: positions each layer's buffers hold before they grow (AttentionCache::capacity).
  // num_layers: the stack's num_layers() (one cache per application of a shared layer).
  TransformerEncoderCache(size_t num_layers, int64_t capacity);
  std::vector<AttentionCache> layers;  // (L)

  int64_t length() const { return layers.empty() ? 0 : layers[0].length(); }  // positions fed
  void select_rows(const std::vector<int64_t>& rows);                         // every layer's rows
};

// What TransformerEncoder and TransformerDecoder share: num_layers applications of a Layer, each its
// own weights (layers.0 … layers.L−1) or, with o.share_layers, one layer (layers.0) applied
// num_layers times; then the final norm ("norm") when final_norm.
template <typename Layer>
class TransformerStack : public Module {
 public:
  int64_t num_layers() const { return num_layers_; }  // L, the layers applied (layers.size() is 1 when shared)
  const Layer& layer(int64_t l) const { return *layers[shared_ ? 0 : l]; }  // the l-th applied
  std::vector<std::unique_ptr<Layer>> layers;  // (L), or (1) when shared
  std::unique_ptr<Norm> norm;                  // null when final_norm is false

 protected:
  TransformerStack(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm, Generator& gen);
  // Throws unless a cache of cache_layers entries fits (one per application).
  void check_cache(const char* module, size_t cache_layers) const;

 private:
  int64_t num_layers_ = 0;
  bool shared_ = false;
};

class TransformerEncoder : public TransformerStack<TransformerEncoderLayer> {
 public:
  TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator())
      : TransformerStack(o, num_layers, final_norm, gen) {}
  // With a cache: every application of a layer steps with its own cache
  // (TransformerEncoderLayer::forward's rules); the cache must have num_layers() entries.
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false, TransformerEncoderCache* cache = nullptr) const;
};

// What a TransformerDecoderLayer keeps between decoding steps, named after its attention modules.
struct DecoderLayerCache {
  AttentionCache self_attn;       // keys (N, capacity, A), values (N, capacity, Av) of the positions fed so far
  AttentionCache multihead_attn;  // the memory's [keys | values] (Bm, S, A+Av), row_source (N), memory_len (Bm)
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
  Norm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;
  DropPath drop_path;  // of every residual branch; no parameters

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

// As TransformerEncoder: num_layers layers, or one shared layer applied num_layers times.
class TransformerDecoder : public TransformerStack<TransformerDecoderLayer> {
 public:
  TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator())
      : TransformerStack(o, num_layers, final_norm, gen) {}
  // With a cache: every application of a layer steps with its own cache
  // (TransformerDecoderLayer::forward's rules); the cache must have num_layers() entries.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false, TransformerDecoderCache* cache = nullptr) const;
};

// nn.Transformer: encoder.* and decoder.*, both with their final norms; the options (share_layers
// included) apply to both stacks. Init: xavier_uniform on every matrix (as Transformer._reset_parameters).
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
