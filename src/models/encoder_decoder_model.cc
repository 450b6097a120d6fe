// src/models/encoder_decoder_model.cc — the SEQ2SEQ family: nn.Transformer between two embeddings, as
// the "build_transformer" notebook (tfm/models/config.h describes it; tools/torch_models.py holds its
// twin).
//
//   src (B, S) → src embedding (·√D) + positions → dropout ─┐
//   tgt_in (B, T) → tgt embedding (·√D) + positions → dropout → nn.Transformer (both final norms,
//   causal target mask, padding masks) → generator → logits (B, T, V_tgt)
//
// Parts, built in the twin's attribute order: "transformer", "src_embedding" (V_src, D; absent with
// share_embeddings, where the encoder reads the target embedding), "tgt_embedding" (V_tgt, D),
// "generator" (V_tgt, D) with bias (its weight tied to the target embedding with tie_embeddings: no
// generator.weight key); registered (so listed by state_dict and parameters(), and visited by the loop below)
// embeddings first: src_embedding, tgt_embedding, transformer, generator, where the twin's parameters() lists
// transformer first. Then xavier_uniform_ on every parameter with more than one dimension (embeddings and
// generator included), as the notebook does over model.parameters(); then with
// positional LEARNED "src_pos_embedding" and "tgt_pos_embedding" (max_len, D), N(0, 0.02) — after
// that loop: the notebook has none, so their init is GPT-2's wpe.
// Decoding (src/models/decode.cc) runs encode, embed_target, decoder() and project: the pieces of
// forward().
#include "models/family_model.h"

namespace tfm::detail {
namespace {

class EncoderDecoderModel : public FamilyModel {
 public:
  EncoderDecoderModel(const ModelConfig& c, Generator& gen) : FamilyModel(c, gen) {
    transformer_ = std::make_unique<Transformer>(c.layer_options(), c.num_encoder_layers, c.num_decoder_layers, gen);
    if (!c.share_embeddings) src_embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    tgt_embedding_ = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                    c.ties_embeddings() ? &tgt_embedding_->weight : nullptr,
                                                    /*with_bias=*/true, gen);
    if (src_embedding_) register_module("src_embedding", *src_embedding_);
    register_module("tgt_embedding", *tgt_embedding_);
    register_module("transformer", *transformer_);
    register_generator_and_embedder();
    src_embed_ = src_embedding_ ? src_embedding_.get() : tgt_embedding_.get();
    visit_parameters([&](const std::string&, Tensor& t) {
      if (t.dim() > 1) init_xavier_uniform(t, gen);
    });
    src_pos_embedding_ = learned_positions("src_pos_embedding", gen);
    tgt_pos_embedding_ = learned_positions("tgt_pos_embedding", gen);
  }

  Tensor forward(const data::TokenBatch& b) const override {
    check_batch(b, config_);
    const int32_t pad = config_.pad_id;
    const Tensor src_kpm = padding_mask(b.src, b.B, b.S, pad);                                          // (B, S)
    const Tensor src = embedder_.embed(*src_embed_, src_pos_embedding_.get(), b.src, b.B, b.S, 0);      // (B, S, D)
    const Tensor tgt = embedder_.embed(*tgt_embedding_, tgt_pos_embedding_.get(), b.tgt_in, b.B, b.T, 0);  // (B, T, D)
    const Tensor tgt_kpm = padding_mask(b.tgt_in, b.B, b.T, pad);                                       // (B, T)
    const Tensor h = transformer_->forward(src, tgt, Tensor(), Tensor(), Tensor(), src_kpm, tgt_kpm, src_kpm,
                                           /*src_is_causal=*/false, /*tgt_is_causal=*/true);  // (B, T, D)
    return project(h);                                                                       // (B, T, V)
  }

  Tensor encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask) const override {
    const Tensor kpm = padding_mask(src, B, S, config_.pad_id);  // (B, S)
    if (key_padding_mask) *key_padding_mask = kpm;
    const Tensor x = embedder_.embed(*src_embed_, src_pos_embedding_.get(), src, B, S, 0);  // (B, S, D)
    return transformer_->encoder.forward(x, Tensor(), kpm, /*is_causal=*/false);         // (B, S, D)
  }

  Tensor embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset) const override {
    return embedder_.embed(*tgt_embedding_, tgt_pos_embedding_.get(), ids, B, T, offset);  // (B, T, D)
  }

  const TransformerDecoder& decoder() const override { return transformer_->decoder; }

 private:
  std::unique_ptr<Transformer> transformer_;      // encoder and decoder, both final norms
  std::unique_ptr<Embedding> src_embedding_;      // (V_src, D); null when shared
  std::unique_ptr<Embedding> tgt_embedding_;      // (V_tgt, D)
  const Embedding* src_embed_ = nullptr;          // what embeds the source: src_embedding_, or tgt_embedding_
  std::unique_ptr<Embedding> src_pos_embedding_;  // (max_len, D), positional LEARNED
  std::unique_ptr<Embedding> tgt_pos_embedding_;  // (max_len, D), positional LEARNED
};

}  // namespace

std::unique_ptr<FamilyModel> make_encoder_decoder_model(const ModelConfig& c, Generator& gen) {
  return std::make_unique<EncoderDecoderModel>(c, gen);
}

}  // namespace tfm::detail
