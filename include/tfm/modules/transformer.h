// tfm/modules/transformer.h — TransformerEncoderLayer/Encoder, TransformerDecoderLayer/Decoder and
// Transformer, exactly as torch.nn (arguments, defaults, state_dict keys, post-/pre-norm order).
//
// Post-norm (norm_first=false):  x = norm1(x + sa(x));  x = norm2(x + ff(x))
// Pre-norm  (norm_first=true):   x = x + sa(norm1(x));  x = x + ff(norm2(x))
// sa(x) = dropout1(self_attn(x, x, x)),  ff(x) = dropout2(linear2(dropout(act(linear1(x)))))
// Decoder adds mha(x, mem) = dropout2(multihead_attn(x, mem, mem)) between them, and norm3/dropout3.
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
  std::string activation = "relu";  // relu, gelu, gelu_tanh, glu, geglu, swiglu
  float layer_norm_eps = 1e-5f;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;  // false: no bias in any Linear, attention projection or LayerNorm
  void validate() const;  // throws on d_model % nhead != 0, unknown activation, bad sizes
};

// Gated activations double linear1's outputs: (2·dim_feedforward, d_model).
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& o, Generator& gen = default_generator());
  // src (B, S, D) / (S, B, D); mask: attn_mask rules; src_key_padding_mask (B, S).
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false) const;
  TransformerLayerOptions options;
  ops::Activation act;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x) const;
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator());
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false) const;
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;  // null when final_norm is false
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& o, Generator& gen = default_generator());
  // tgt (B, T, D) / (T, B, D); memory (B, S, D) / (S, B, D).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;
  TransformerLayerOptions options;
  ops::Activation act;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  Tensor feed_forward(const Tensor& x) const;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm,
                     Generator& gen = default_generator());
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;
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
