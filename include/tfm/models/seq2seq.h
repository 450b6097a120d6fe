// tfm/models/seq2seq.h — the two sequence models of tfm train, built from the torch.nn modules.
//
// arch "encoder" (the "reverse a sequence" notebook):  ids (B,S) → embedding (unscaled, as in that notebook)
//   → + sinusoidal PE → dropout → TransformerEncoder → generator Linear → logits (B, S, V_tgt);
//   one prediction per source position (source and target have the same length).
//   Keys: embedding.weight, encoder.layers.N.*, [encoder.norm.*], generator.weight, generator.bias.
// arch "seq2seq" (the "build_transformer" notebook): src/tgt embeddings scaled by √D, + PE, dropout,
//   nn.Transformer (both final norms) with a causal target mask and padding masks, generator Linear;
//   Xavier-uniform initialisation of every matrix. Optional tied target embedding and generator.
//   Keys: src_embedding.weight, tgt_embedding.weight, transformer.encoder.*, transformer.decoder.*,
//   generator.weight (absent when tied), generator.bias.
// Token conventions: pad_id is ignored everywhere (padding masks, loss). Sources carry no bos/eos;
// the decoder input is bos + target, the decoder output target + eos.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tfm/modules/transformer.h"

namespace tfm {

struct ModelConfig {
  std::string arch = "seq2seq";  // "encoder" or "seq2seq"
  int64_t src_vocab_size = 0, tgt_vocab_size = 0;
  int64_t d_model = 128, nhead = 4, num_encoder_layers = 3, num_decoder_layers = 3, dim_feedforward = 512;
  float dropout = 0.1f;
  std::string activation = "relu";
  bool norm_first = false;
  float layer_norm_eps = 1e-5f;
  bool tie_embeddings = false;  // seq2seq only: generator.weight shares tgt_embedding.weight
  int64_t max_len = 512;        // positional table length
  int32_t pad_id = 0, bos_id = 1, eos_id = 2;

  std::string to_json() const;  // pretty JSON object
  static ModelConfig from_json(const std::string& text);  // throws naming the bad key
  void validate() const;
};

// A batch of token ids, row-major, padded with pad_id.
struct TokenBatch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> src;      // (B, S)
  std::vector<int32_t> tgt_in;   // (B, T): bos + target (seq2seq); unused by "encoder"
  std::vector<int32_t> tgt_out;  // (B, T): target + eos (seq2seq); (B, S) targets for "encoder"
};

class Seq2SeqModel : public Module {
 public:
  explicit Seq2SeqModel(const ModelConfig& config, Generator& gen = default_generator());
  const ModelConfig& config() const { return config_; }
  // Teacher-forced logits: (B, T, V_tgt) for seq2seq, (B, S, V_tgt) for encoder.
  Tensor forward(const TokenBatch& batch) const;
  // Mean cross-entropy of forward(batch) against tgt_out, ignoring pad_id, with label smoothing.
  Tensor loss(const TokenBatch& batch, float label_smoothing = 0.0f) const;

  // Implementation detail exposed for decoding (tfm/models/decode.h).
  struct Impl;
  Impl& impl() const { return *impl_; }
  ~Seq2SeqModel() override;

 private:
  ModelConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
