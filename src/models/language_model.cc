// src/models/language_model.cc — the DECODER family: a decoder-only (GPT-style) language model
// (tfm/models/config.h describes it; tools/torch_models.py holds its twin).
//
//   ids (B, T) → embedding → + positions → dropout → decoder stack run causally (final norm) →
//   generator without bias (tied to the embedding by default) → next-token logits (B, T, V)
//
// The stack is num_decoder_layers causal self-attention layers (nn.TransformerEncoderLayer's under the
// key "decoder.": no cross-attention). Parts, in the twin's order: "embedding" (V, D), "decoder",
// "generator" (absent weight when tied), then with positional LEARNED "pos_embedding" (max_len, D);
// then, as GPT-2 / nanoGPT, over the parameters in key order: N(0, 0.02) for every matrix (embeddings
// and position table included), N(0, 0.02/√(2·L)) for the residual output projections
// out_proj.weight and linear2.weight (each adds to the residual stream L times twice), zero biases; the
// norms keep their ones and zeros.
//
// One function, lm_logits, serves training (through forward), evaluation and generation: without a
// cache the causal forward of the window; with one, a prompt into an empty cache as one causal pass
// (a prefill), later positions one at a time, each appended to the cache. Generation asks for the last
// position's logits only (last_only).
#include <algorithm>
#include <cmath>

#include "models/family_model.h"

namespace tfm::detail {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class LanguageModel : public FamilyModel {
 public:
  LanguageModel(const ModelConfig& c, Generator& gen) : FamilyModel(c, gen) {
    embedding_ = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    decoder_ = std::make_unique<TransformerEncoder>(c.layer_options(), c.num_decoder_layers, /*final_norm=*/true, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                    c.ties_embeddings() ? &embedding_->weight : nullptr,
                                                    /*with_bias=*/false, gen);
    register_module("embedding", *embedding_);
    register_module("decoder", *decoder_);
    register_generator_and_embedder();
    pos_embedding_ = learned_positions("pos_embedding", gen);
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_decoder_layers));
    visit_parameters([&](const std::string& key, Tensor& t) {
      if (t.dim() > 1) {
        const bool residual = ends_with(key, "out_proj.weight") || ends_with(key, "linear2.weight");
        init_normal(t, static_cast<float>(residual ? residual_std : 0.02), gen);
      } else if (ends_with(key, "bias") && key.find("norm") == std::string::npos) {
        float* p = t.data();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.0f;
      }
    });
  }

  // The next-token logits of every position: lm_logits(batch.src, B, S), S = T.
  Tensor forward(const data::TokenBatch& b) const override {
    check_batch(b, config_);
    return lm_logits(b.src, b.B, b.S, 0, nullptr, /*last_only=*/false);
  }

  Tensor lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset,
                   TransformerEncoderCache* cache, bool last_only) const override {
    const auto fail = [](const std::string& m) { throw std::invalid_argument("model: lm_logits: " + m); };
    if (B <= 0 || T <= 0) fail("B and T must be positive (got " + std::to_string(B) + ", " + std::to_string(T) + ")");
    if (static_cast<int64_t>(ids.size()) != B * T)
      fail("ids has " + std::to_string(ids.size()) + " entries, expected B·T = " + std::to_string(B * T));
    if (offset < 0) fail("offset must be non-negative, got " + std::to_string(offset));
    // (B, T, D) → logits (B, T, V), or with last_only of position T − 1 alone (B, 1, V): a copy of those
    // rows, outside the autograd tape (generation runs under InferenceMode).
    const auto head = [&](const Tensor& h) {
      if (!last_only || T == 1) return project(h);
      const int64_t D = h.size(2);
      Tensor last = Tensor::empty({B, 1, D});
      for (int64_t b = 0; b < B; ++b)
        std::copy(h.data() + (b * T + T - 1) * D, h.data() + (b * T + T) * D, last.data() + b * D);
      return project(last);
    };
    if (!cache) {
      const Tensor x = embedder_.embed(*embedding_, pos_embedding_.get(), ids, B, T, offset);  // (B, T, D)
      return head(decoder_->forward(x, Tensor(), Tensor(), /*is_causal=*/true));
    }
    if (cache->length() != offset)
      fail("offset " + std::to_string(offset) + " must be the cache's length " + std::to_string(cache->length()));
    if (offset == 0 && T > 1) {  // a prompt into an empty cache: one causal pass that fills it (a prefill)
      const Tensor x = embedder_.embed(*embedding_, pos_embedding_.get(), ids, B, T, 0);  // (B, T, D)
      return head(decoder_->forward(x, Tensor(), Tensor(), /*is_causal=*/true, cache));
    }
    // Positions after the first step: one per step (the cache's rule), T > 1 fed step by step.
    const int64_t V = config_.tgt_vocab_size;
    Tensor out;  // (B, T, V) when T > 1
    std::vector<int32_t> column(static_cast<size_t>(B));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) column[static_cast<size_t>(b)] = ids[static_cast<size_t>(b * T + t)];
      const Tensor x = embedder_.embed(*embedding_, pos_embedding_.get(), column, B, 1, offset + t);  // (B, 1, D)
      const Tensor h = decoder_->forward(x, Tensor(), Tensor(), /*is_causal=*/true, cache);          // (B, 1, D)
      if (last_only && t < T - 1) continue;
      const Tensor step = project(h);                                                                // (B, 1, V)
      if (T == 1 || last_only) return step;
      if (!out.defined()) out = Tensor::empty({B, T, V});
      const float* src = step.data();
      float* dst = out.data();
      for (int64_t b = 0; b < B; ++b) std::copy(src + b * V, src + (b + 1) * V, dst + (b * T + t) * V);
    }
    return out;
  }

  TransformerEncoderCache make_lm_cache(int64_t rows, int64_t capacity) const override {
    if (rows < 1 || capacity < 1)
      throw std::invalid_argument("model: make_lm_cache: rows and capacity must be positive (got " +
                                  std::to_string(rows) + ", " + std::to_string(capacity) + ")");
    return TransformerEncoderCache(static_cast<size_t>(decoder_->num_layers()), capacity);
  }

 private:
  std::unique_ptr<Embedding> embedding_;        // (V, D)
  std::unique_ptr<TransformerEncoder> decoder_;  // the causal stack (its layers have no cross-attention)
  std::unique_ptr<Embedding> pos_embedding_;    // (max_len, D), positional LEARNED
};

}  // namespace

std::unique_ptr<FamilyModel> make_language_model(const ModelConfig& c, Generator& gen) {
  return std::make_unique<LanguageModel>(c, gen);
}

}  // namespace tfm::detail
