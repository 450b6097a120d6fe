// tfm/models/model.h — a trainable sequence model, assembled from its ModelConfig
// (tfm/models/config.h describes the architectures, their keys and token conventions).
//
// Parts, each built when the architecture has it and registered under its PyTorch key:
//   source embedding   Embedding (V_src, D)      "embedding" (ENCODER) or "src_embedding" (SEQ2SEQ;
//                                                with share_embeddings none: the target embedding)
//                      Embedding (V_tgt, D)      "embedding" (DECODER: the one vocabulary)
//   target embedding   Embedding (V_tgt, D)      "tgt_embedding" (SEQ2SEQ)
//   encoder            TransformerEncoder        "encoder" (ENCODER), inside "transformer" (SEQ2SEQ),
//                                                "decoder" (DECODER: run causally, final norm always)
//   decoder            TransformerDecoder        inside "transformer" (SEQ2SEQ)
//   generator          Linear (V_tgt, D), bias   "generator" (weight tied to the target embedding
//                                                when tie_embeddings: no generator.weight key;
//                                                DECODER: no bias)
//   position tables    Embedding (max_len, D)    positional LEARNED: "pos_embedding" (ENCODER,
//                                                DECODER) or "src_pos_embedding" and "tgt_pos_embedding"
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

  // Teacher-forced logits: (B, T, V_tgt) with a decoder, (B, S, V_tgt) without (DECODER:
  // lm_logits(batch.src, B, S), the next-token logits of every position).
  Tensor forward(const data::TokenBatch& batch) const;
  // Mean cross-entropy of forward(batch) against tgt_out, ignoring pad_id, with label smoothing.
  // normalizer > 0: the sum of the token losses divided by `normalizer` instead of by the batch's own
  // target-token count n (computed as the mean times n / normalizer), so that the losses of the parts
  // of a bigger batch, each normalised by the whole batch's count, add up to its mean.
  Tensor loss(const data::TokenBatch& batch, float label_smoothing = 0.0f, int64_t normalizer = 0) const;

  // The pieces of forward(), for decoding (tfm/models/decode.h); each is the code forward() runs.
  // Source ids (B, S), padded with pad_id → encoder output (B, S, D) (the memory); the (B, S) Bool
  // key padding mask (true at pad) is stored in *key_padding_mask when given.
  Tensor encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask = nullptr) const;
  // Target ids (B, T) at positions [offset, offset + T) → dropout(tgt_embedding·scale + pe) (B, T, D).
  Tensor embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset = 0) const;
  const TransformerDecoder& decoder() const;  // throws without a decoder
  Tensor project(const Tensor& h) const;      // the generator: (..., D) → (..., V_tgt)

  // DECODER (a language model; other architectures throw). ids (B, T) at positions
  // [offset, offset + T) → next-token logits (B, T, V), the one function training, evaluation and
  // generation run. Without a cache: the causal forward of the window (no padding mask: windows hold
  // text only); offset + T ≤ max_len. With a cache (eval mode, from make_lm_cache): offset must be
  // the cache's length; the T positions are fed one at a time (the cache takes one position per row
  // and step), each appended to the cache, so T > 1 prefills a prompt step by step; the logits equal
  // the full causal forward's at those positions (to float32 rounding). Growing the cache beyond
  // max_len positions throws (the position table ends there): slide the window by refilling a fresh
  // cache.
  Tensor lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset = 0,
                   TransformerEncoderCache* cache = nullptr) const;
  // An empty cache for lm_logits: one AttentionCache per applied layer (num_layers()), each holding
  // `capacity` positions before it grows; `rows` (B) is the batch lm_logits will feed it.
  TransformerEncoderCache make_lm_cache(int64_t rows, int64_t capacity) const;

 private:
  // ids (B, T) → dropout(emb(ids)·scale + pe[offset : offset + T])   (B, T, D); `pos` the learned
  // table of this embedding (positional LEARNED), else null.
  Tensor embed(const Embedding& emb, const Embedding* pos, const std::vector<int32_t>& ids, int64_t B, int64_t T,
               int64_t offset) const;
  const TransformerEncoder& encoder() const;

  ModelConfig config_;
  std::unique_ptr<Embedding> src_embedding_;     // (V_src, D); DECODER: (V_tgt, D); null when shared
  const Embedding* src_embed_ = nullptr;         // what embeds the source: src_embedding_, or tgt_embedding_
  std::unique_ptr<Embedding> tgt_embedding_;     // (V_tgt, D), with a decoder
  std::unique_ptr<TransformerEncoder> encoder_;  // without a decoder (ENCODER; DECODER's causal stack)
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
