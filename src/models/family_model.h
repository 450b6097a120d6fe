// src/models/family_model.h — what a model family implements behind tfm::Model, and the parts the
// families build from. Internal to src/models.
//
// Model (tfm/models/model.h) is the handle code above models/ holds; it owns one FamilyModel, built by
// the builder registered for the config's Arch (src/models/family.cc), and registered as its child
// under no name, so the family's parts keep their PyTorch keys ("embedding.weight", ...).
//
// A family implements forward() (teacher-forced logits) and the decoding entry points it supports; the
// others throw naming the family. Its constructor builds its parts from the shared components below in
// its PyTorch twin's attribute order (tools/torch_models.py), each drawing its initialisation as the twin's
// module does, and registers them under the twin's attribute names (the order it registers them in is the order
// state_dict lists them: each family's file says it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/models/config.h"
#include "tfm/models/model.h"
#include "tfm/modules/transformer.h"

namespace tfm::detail {

// nn.Linear(D, V) whose weight may be tied to an embedding matrix (V, D). When tied, `weight` is a
// second handle to the embedding's tensor and is not registered, so the key generator.weight is
// absent and the optimizer sees the matrix once; both uses accumulate into the same .grad.
// Without `bias` (DECODER): nn.Linear(D, V, bias=False), no generator.bias key.
class OutputProjection : public Module {
 public:
  OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, bool with_bias, Generator& gen);
  Tensor forward(const Tensor& x) const;  // (..., D) → (..., V)
  Tensor weight, bias;                    // (V, D), (V) or undefined
};

// What every embedding of a model shares: the scale (√D or 1), the positions (a sinusoidal table, a
// buffer; or each embedding's learned table) and the dropout after them:
//   embed(ids) = dropout(emb(ids)·scale + pe[offset : offset + T])   (B, T, D)
// Registered by FamilyModel::register_generator_and_embedder as "positional_encoding" (no parameters: only
// for train()/eval()) and "dropout".
class Embedder {
 public:
  Embedder(const ModelConfig& c, Generator& gen);
  // ids (B, T) at positions [offset, offset + T); `pos` the embedding's learned table (positional
  // LEARNED), else null. Throws when offset + T exceeds max_len.
  Tensor embed(const Embedding& emb, const Embedding* pos, const std::vector<int32_t>& ids, int64_t B, int64_t T,
               int64_t offset) const;
  // A learned position table nn.Embedding(max_len, D) then normal_(std=0.02): N(0, 1) draws scaled once.
  static std::unique_ptr<Embedding> learned_table(const ModelConfig& c, Generator& gen);

  PositionalEncoding pe;  // (max_len, D) with positional SINUSOIDAL, else empty
  Dropout dropout;

 private:
  Positional positional_;
  int64_t max_len_;
  float scale_ = 1.0f;  // √D or 1
};

// Checks a teacher-forced batch against the family's target layout and the model's max_len.
void check_batch(const data::TokenBatch& b, const ModelConfig& c);

class FamilyModel : public Module {
 public:
  FamilyModel(const ModelConfig& config, Generator& gen) : config_(config), embedder_(config, gen) {}
  const ModelConfig& config() const { return config_; }

  // Teacher-forced logits of a batch laid out as the family's target layout: (B, T|S, V_tgt).
  virtual Tensor forward(const data::TokenBatch& batch) const = 0;

  // Encoder–decoder decoding (tfm/models/model.h says what each computes); others throw.
  virtual Tensor encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask) const;
  virtual Tensor embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset) const;
  virtual const TransformerDecoder& decoder() const;
  // Language-model decoding; others throw.
  virtual Tensor lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset,
                           TransformerEncoderCache* cache, bool last_only) const;
  virtual TransformerEncoderCache make_lm_cache(int64_t rows, int64_t capacity) const;

  Tensor project(const Tensor& h) const { return generator_->forward(h); }  // (..., D) → (..., V_tgt)

 protected:
  [[noreturn]] void unsupported(const char* what, const char* instead) const;
  // What every family registers after its stacks, in this order: "generator", and the embedder's
  // "positional_encoding" and "dropout" (no parameters: only for train()/eval()).
  void register_generator_and_embedder();
  // With positional LEARNED, a learned position table registered under `key`; else null.
  std::unique_ptr<Embedding> learned_positions(const char* key, Generator& gen);

  ModelConfig config_;
  Embedder embedder_;
  std::unique_ptr<OutputProjection> generator_;  // (V_tgt, D)
};

// The builders registered in src/models/family.cc, one per family file.
std::unique_ptr<FamilyModel> make_encoder_model(const ModelConfig& c, Generator& gen);
std::unique_ptr<FamilyModel> make_encoder_decoder_model(const ModelConfig& c, Generator& gen);
std::unique_ptr<FamilyModel> make_language_model(const ModelConfig& c, Generator& gen);
// The builder of c.arch's family.
std::unique_ptr<FamilyModel> build_family_model(const ModelConfig& c, Generator& gen);

}  // namespace tfm::detail
