// tfm/models/model.h — a trainable sequence model, assembled from its ModelConfig
// (tfm/models/config.h describes the architectures, their keys and token conventions).
//
// Parts, each built when the architecture has it and registered under its PyTorch key:
//   source embedding   Embedding (V_src, D)      "embedding" (ENCODER) or "src_embedding"
//   target embedding   Embedding (V_tgt, D)      "tgt_embedding" (SEQ2SEQ)
//   encoder            TransformerEncoder        "encoder" (ENCODER), inside "transformer" (SEQ2SEQ)
//   decoder            TransformerDecoder        inside "transformer" (SEQ2SEQ)
//   generator          Linear (V_tgt, D), bias   "generator" (weight tied to the target embedding
//                                                when tie_embeddings: no generator.weight key)
//   position tables    Embedding (max_len, D)    positional LEARNED: "pos_embedding" (ENCODER) or
//                                                "src_pos_embedding" and "tgt_pos_embedding"
// plus one dropout shared by every embedding, and with positional SINUSOIDAL one fixed table shared
// by every embedding (a buffer, no parameters).
// Each embedding computes dropout(embedding(ids)·scale + pe[t]) with scale √D when
// scale_embeddings, else 1, and pe[t] the row t of the sinusoidal or learned table (nothing with
// positional NONE).
//
// To add an architecture: its Arch and defaults (config.h), the parts it needs built in the
// constructor, its path through forward(), and its twin in tools/torch_models.py.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/models/config.h"
#include "tfm/modules/transformer.h"

namespace tfm {

class OutputProjection;

class Model : public Module {
 public:
  // Initial weights draw from `gen`; the dropouts keep a reference to it for their masks.
  explicit Model(const ModelConfig& config, Generator& gen);
  ~Model() override;
  const ModelConfig& config() const { return config_; }
  bool has_decoder() const { return config_.has_decoder(); }

  // Teacher-forced logits: (B, T, V_tgt) with a decoder, (B, S, V_tgt) without.
  Tensor forward(const data::TokenBatch& batch) const;
  // Mean cross-entropy of forward(batch) against tgt_out, ignoring pad_id, with label smoothing.
  Tensor loss(const data::TokenBatch& batch, float label_smoothing = 0.0f) const;

  // The pieces of forward(), for decoding (tfm/models/decode.h); each is the code forward() runs.
  // Source ids (B, S), padded with pad_id → encoder output (B, S, D) (the memory); the (B, S) Bool
  // key padding mask (true at pad) is stored in *key_padding_mask when given.
  Tensor encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask = nullptr) const;
  // Target ids (B, T) at positions [offset, offset + T) → dropout(tgt_embedding·scale + pe) (B, T, D).
  Tensor embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset = 0) const;
  const TransformerDecoder& decoder() const;  // throws without a decoder
  Tensor project(const Tensor& h) const;      // the generator: (..., D) → (..., V_tgt)

 private:
  // ids (B, T) → dropout(emb(ids)·scale + pe[offset : offset + T])   (B, T, D); `pos` the learned
  // table of this embedding (positional LEARNED), else null.
  Tensor embed(const Embedding& emb, const Embedding* pos, const std::vector<int32_t>& ids, int64_t B, int64_t T,
               int64_t offset) const;
  const TransformerEncoder& encoder() const;

  ModelConfig config_;
  std::unique_ptr<Embedding> src_embedding_;     // (V_src, D)
  std::unique_ptr<Embedding> tgt_embedding_;     // (V_tgt, D), with a decoder
  std::unique_ptr<TransformerEncoder> encoder_;  // without a decoder
  std::unique_ptr<Transformer> transformer_;     // with a decoder: encoder and decoder, both final norms
  std::unique_ptr<OutputProjection> generator_;  // (V_tgt, D)
  std::unique_ptr<Embedding> src_pos_embedding_; // (max_len, D), positional LEARNED
  std::unique_ptr<Embedding> tgt_pos_embedding_; // (max_len, D), positional LEARNED with a decoder
  PositionalEncoding pe_;                        // table (max_len, D) with positional SINUSOIDAL, a buffer
  Dropout dropout_;                              // after the positional encoding
  float embed_scale_ = 1.0f;                     // √D or 1
};

// Bool (B, T): true where ids == pad (PyTorch's key_padding_mask convention).
Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id);

}  // namespace tfm
