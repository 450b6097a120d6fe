// tfm/models/model.h — a trainable sequence model, assembled from its ModelConfig
// (tfm/models/config.h describes the architectures, their keys and token conventions).
//
// Model is the one interface to every model family (tfm/models/family.h): it builds the family
// registered for config.arch (its class in src/models/<family>.cc) and holds it as its only child, so
// state_dict keys, parameters, train()/eval() are the family's own. What every family answers:
// forward (teacher-forced logits), loss, the family's description (family(): the data it takes, its
// target layout). The decoding entry points belong to one family each and throw, naming the family,
// on the others: encode / embed_target / decoder for an encoder–decoder (decode.h), lm_logits /
// make_lm_cache for a language model (generate.h, text_eval.h); project (the generator) is every family's.
//
// Every family's parts share the embedding rule dropout(embedding(ids)·scale + pe[t]) with scale √D
// when scale_embeddings, else 1, and pe[t] the row t of the sinusoidal or learned table (nothing with
// positional NONE).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/models/config.h"
#include "tfm/modules/transformer.h"

namespace tfm {

namespace detail {
class FamilyModel;
}

class Model : public Module {
 public:
  // Initial weights draw from `gen`; the dropouts keep a reference to it for their masks. Throws
  // std::invalid_argument naming the field when the config is not valid.
  explicit Model(const ModelConfig& config, Generator& gen);
  ~Model() override;
  // The config as built: validated, with the family's defaults made explicit.
  const ModelConfig& config() const { return config_; }
  const ModelFamily& family() const { return config_.family(); }

  // Teacher-forced logits: (B, T, V_tgt) for a SHIFTED target layout, (B, S, V_tgt) for PER_POSITION
  // (a language model: the next-token logits of every position, lm_logits(batch.src, B, S)).
  Tensor forward(const data::TokenBatch& batch) const;
  // Mean cross-entropy of forward(batch) against tgt_out, ignoring pad_id, with label smoothing.
  // normalizer > 0: the sum of the token losses divided by `normalizer` instead of by the batch's own
  // target-token count n (computed as the mean times n / normalizer), so that the losses of the parts
  // of a bigger batch, each normalised by the whole batch's count, add up to its mean.
  Tensor loss(const data::TokenBatch& batch, float label_smoothing = 0.0f, int64_t normalizer = 0) const;

  // An encoder–decoder's pieces of forward(), for decoding (tfm/models/decode.h); each is the code
  // forward() runs. Source ids (B, S), padded with pad_id → encoder output (B, S, D) (the memory); the
  // (B, S) Bool key padding mask (true at pad) is stored in *key_padding_mask when given.
  Tensor encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask = nullptr) const;
  // Target ids (B, T) at positions [offset, offset + T) → dropout(tgt_embedding·scale + pe) (B, T, D).
  Tensor embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset = 0) const;
  const TransformerDecoder& decoder() const;
  Tensor project(const Tensor& h) const;  // the generator, every family: (..., D) → (..., V_tgt)

  // A language model's next-token logits. ids (B, T) at positions [offset, offset + T) → (B, T, V),
  // the one function training, evaluation and generation run. Without a cache: the causal forward of
  // the window (no padding mask: windows hold text only); offset + T ≤ max_len. With a cache (eval
  // mode, from make_lm_cache): offset must be the cache's length; into an empty cache, T > 1 positions
  // (a prompt) run as one causal pass that fills the cache (a prefill); later, positions are fed one
  // at a time, each appended to the cache; the logits equal the full causal forward's at those
  // positions (to float32 rounding). Growing the cache beyond max_len positions throws (the position
  // table ends there): slide the window by refilling a fresh cache.
  // With last_only the result is (B, 1, V): the last position's logits alone (what generation needs;
  // the output projection, V·D per position, is not run for the others).
  Tensor lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset = 0,
                   TransformerEncoderCache* cache = nullptr, bool last_only = false) const;
  // An empty cache for lm_logits: one AttentionCache per applied layer, each holding `capacity`
  // positions before it grows; `rows` (B) is the batch lm_logits will feed it.
  TransformerEncoderCache make_lm_cache(int64_t rows, int64_t capacity) const;

 private:
  ModelConfig config_;
  std::unique_ptr<detail::FamilyModel> impl_;  // the family's parts, registered under no name
};

// Bool (B, T): true where ids == pad (PyTorch's key_padding_mask convention).
Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id);

}  // namespace tfm
