// src/models/encoder_model.cc — the ENCODER family: one prediction per source position, as the "reverse
// a sequence" notebook (tfm/models/config.h describes it; tools/torch_models.py holds its twin).
//
//   ids (B, S) → embedding → + positions → dropout → TransformerEncoder → generator → logits (B, S, V_tgt)
//
// Parts, in the twin's attribute order (nn.Embedding → PositionalEncoding (with dropout) →
// nn.TransformerEncoder → nn.Linear, PyTorch's default initialisation for each): "embedding"
// (V_src, D), "encoder" (a final norm, of the layers' norm_type, only with norm_first, where the
// residual stream is otherwise never normalised; post-norm layers end normalised already, as
// nn.TransformerEncoder's default norm=None), "generator" (V_tgt, D) with bias, then with positional
// LEARNED "pos_embedding" (max_len, D), N(0, 0.02).
#include "models/family_model.h"

namespace tfm::detail {
namespace {

class EncoderModel : public FamilyModel {
 public:
  EncoderModel(const ModelConfig& c, Generator& gen) : FamilyModel(c, gen) {
    embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    encoder_ = std::make_unique<TransformerEncoder>(c.layer_options(), c.num_encoder_layers, c.norm_first_value(), gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size, nullptr, /*with_bias=*/true, gen);
    register_module("embedding", *embedding_);
    register_module("encoder", *encoder_);
    register_generator_and_embedder();
    pos_embedding_ = learned_positions("pos_embedding", gen);
  }

  Tensor forward(const data::TokenBatch& b) const override {
    check_batch(b, config_);
    const Tensor kpm = padding_mask(b.src, b.B, b.S, config_.pad_id);                               // (B, S)
    const Tensor x = embedder_.embed(*embedding_, pos_embedding_.get(), b.src, b.B, b.S, 0);        // (B, S, D)
    return project(encoder_->forward(x, Tensor(), kpm, /*is_causal=*/false));                       // (B, S, V)
  }

 private:
  std::unique_ptr<Embedding> embedding_;          // (V_src, D)
  std::unique_ptr<TransformerEncoder> encoder_;
  std::unique_ptr<Embedding> pos_embedding_;      // (max_len, D), positional LEARNED
};

}  // namespace

std::unique_ptr<FamilyModel> make_encoder_model(const ModelConfig& c, Generator& gen) {
  return std::make_unique<EncoderModel>(c, gen);
}

}  // namespace tfm::detail
