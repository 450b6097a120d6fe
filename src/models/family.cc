// src/models/family.cc — the registry of model families (tfm/models/family.h) and the parts they share
// (src/models/family_model.h).
#include <cmath>
#include <stdexcept>

#include "models/family_model.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/linear.h"

namespace tfm {
namespace {

// The families, one entry per Arch, each with its builder.
struct Registered {
  ModelFamily family;
  std::unique_ptr<detail::FamilyModel> (*build)(const ModelConfig&, Generator&);
};

const Registered kFamilies[] = {
    {{Arch::ENCODER, "an encoder that predicts one token per source position", DataKind::PAIRS,
      data::TargetLayout::PER_POSITION, /*encoder_layers=*/true, /*decoder_layers=*/false,
      /*can_tie_embeddings=*/false, /*tied_key=*/nullptr,
      FamilyDefaults{/*norm_first=*/false, Activation::RELU, Positional::SINUSOIDAL, /*scale_embeddings=*/false,
                     /*tie_embeddings=*/false, /*decay_matrices_only=*/false}},
     detail::make_encoder_model},
    {{Arch::SEQ2SEQ, "an encoder–decoder that generates a target from a source", DataKind::PAIRS,
      data::TargetLayout::SHIFTED, /*encoder_layers=*/true, /*decoder_layers=*/true, /*can_tie_embeddings=*/true,
      /*tied_key=*/"tgt_embedding.weight",
      FamilyDefaults{/*norm_first=*/false, Activation::RELU, Positional::SINUSOIDAL, /*scale_embeddings=*/true,
                     /*tie_embeddings=*/false, /*decay_matrices_only=*/false}},
     detail::make_encoder_decoder_model},
    {{Arch::DECODER, "a causal language model over one text", DataKind::TEXT, data::TargetLayout::PER_POSITION,
      /*encoder_layers=*/false, /*decoder_layers=*/true, /*can_tie_embeddings=*/true,
      /*tied_key=*/"embedding.weight",
      FamilyDefaults{/*norm_first=*/true, Activation::GELU, Positional::LEARNED, /*scale_embeddings=*/false,
                     /*tie_embeddings=*/true, /*decay_matrices_only=*/true}},
     detail::make_language_model},
};

const Registered& registered(Arch arch) {
  for (const Registered& r : kFamilies)
    if (r.family.arch == arch) return r;
  throw std::invalid_argument("model: unknown architecture value " + std::to_string(static_cast<int>(arch)));
}

}  // namespace

const ModelFamily& model_family(Arch arch) { return registered(arch).family; }

namespace detail {

std::unique_ptr<FamilyModel> build_family_model(const ModelConfig& c, Generator& gen) {
  return registered(c.arch).build(c, gen);
}

OutputProjection::OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, bool with_bias, Generator& gen) {
  // nn.Linear's initialisation, U(±1/√D) for weight and bias, drawn in that order.
  const float bound = 1.0f / std::sqrt(static_cast<float>(d_model));
  if (tied) {
    weight = *tied;
  } else {
    weight = Tensor::empty({vocab, d_model});
    init_uniform(weight, -bound, bound, gen);
    register_parameter("weight", weight);
  }
  if (with_bias) {
    bias = Tensor::empty({vocab});
    init_uniform(bias, -bound, bound, gen);
    register_parameter("bias", bias);
  }
}

Tensor OutputProjection::forward(const Tensor& x) const { return ops::linear(x, weight, bias); }

Embedder::Embedder(const ModelConfig& c, Generator& gen)
    : pe(c.positional_value() == Positional::SINUSOIDAL ? c.d_model : 0,
         c.positional_value() == Positional::SINUSOIDAL ? c.max_len : 0),
      dropout(c.dropout, gen),
      positional_(c.positional_value()),
      max_len_(c.max_len) {
  // √D as PyTorch computes `x * math.sqrt(D)`: the double rounded to float once.
  if (c.scales_embeddings()) scale_ = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
}

std::unique_ptr<Embedding> Embedder::learned_table(const ModelConfig& c, Generator& gen) {
  auto e = std::make_unique<Embedding>(c.max_len, c.d_model, -1, gen);
  if (gen.no_draws) return e;  // its values left unset: loaded next
  float* p = e->weight.data();
  for (int64_t i = 0; i < e->weight.numel(); ++i) p[i] *= 0.02f;
  return e;
}

Tensor Embedder::embed(const Embedding& emb, const Embedding* pos, const std::vector<int32_t>& ids, int64_t B,
                       int64_t T, int64_t offset) const {
  if (offset + T > max_len_)
    throw std::invalid_argument("model: position " + std::to_string(offset + T - 1) + " beyond max_len " +
                                std::to_string(max_len_));
  Tensor x = emb.forward(ids, {B, T});  // (B, T, D)
  if (scale_ != 1.0f) x = ops::mul_scalar(x, scale_);
  switch (positional_) {
    case Positional::SINUSOIDAL:
      return dropout.forward(ops::add_positional(x, pe.table.narrow0(offset, T), /*batch_first=*/true));
    case Positional::LEARNED: {
      // The table's rows offset .. offset + T − 1 for every row of the batch, looked up like ids so
      // that the gradient of each row accumulates over the batch.
      std::vector<int32_t> positions(static_cast<size_t>(B * T));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) positions[b * T + t] = static_cast<int32_t>(offset + t);
      return dropout.forward(ops::add(x, pos->forward(positions, {B, T})));  // (B, T, D)
    }
    case Positional::NONE:
      return dropout.forward(x);
  }
  throw std::logic_error("model: unhandled positional encoding");
}

void check_batch(const data::TokenBatch& b, const ModelConfig& c) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("TokenBatch: " + m); };
  if (b.B <= 0 || b.S <= 0) fail("B and S must be positive (got " + std::to_string(b.B) + ", " + std::to_string(b.S) + ")");
  if (static_cast<int64_t>(b.src.size()) != b.B * b.S)
    fail("src has " + std::to_string(b.src.size()) + " ids, expected B·S = " + std::to_string(b.B * b.S));
  if (b.S > c.max_len) fail("source length " + std::to_string(b.S) + " exceeds max_len " + std::to_string(c.max_len));
  if (c.target_layout() == data::TargetLayout::PER_POSITION) {
    if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.S)
      fail(std::string(enum_name(c.arch)) + " arch: tgt_out has " + std::to_string(b.tgt_out.size()) +
           " ids, expected B·S = " + std::to_string(b.B * b.S) + " (one target per source position)");
    return;
  }
  if (b.T <= 0) fail("T must be positive for arch " + std::string(enum_name(c.arch)));
  if (b.T > c.max_len) fail("target length " + std::to_string(b.T) + " exceeds max_len " + std::to_string(c.max_len));
  if (static_cast<int64_t>(b.tgt_in.size()) != b.B * b.T)
    fail("tgt_in has " + std::to_string(b.tgt_in.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
  if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.T)
    fail("tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
}

void FamilyModel::register_generator_and_embedder() {
  register_module("generator", *generator_);
  register_module("positional_encoding", embedder_.pe);
  register_module("dropout", embedder_.dropout);
}

std::unique_ptr<Embedding> FamilyModel::learned_positions(const char* key, Generator& gen) {
  if (config_.positional_value() != Positional::LEARNED) return nullptr;
  std::unique_ptr<Embedding> table = Embedder::learned_table(config_, gen);
  register_module(key, *table);
  return table;
}

void FamilyModel::unsupported(const char* what, const char* instead) const {
  throw std::invalid_argument("model: " + std::string(what) + " does not apply to arch " +
                              std::string(enum_name(config_.arch)) + " (" + config_.family().summary + "; " +
                              instead + ")");
}

Tensor FamilyModel::encode(const std::vector<int32_t>&, int64_t, int64_t, Tensor*) const {
  unsupported("encode", "decoding a source needs an encoder–decoder");
}
Tensor FamilyModel::embed_target(const std::vector<int32_t>&, int64_t, int64_t, int64_t) const {
  unsupported("embed_target", "it has no target embedding");
}
const TransformerDecoder& FamilyModel::decoder() const {
  unsupported("decoder", "it has no encoder–decoder TransformerDecoder");
}
Tensor FamilyModel::lm_logits(const std::vector<int32_t>&, int64_t, int64_t, int64_t, TransformerEncoderCache*,
                              bool) const {
  unsupported("lm_logits", "a language model's next-token logits need arch decoder: tfm generate and tfm eval --text");
}
TransformerEncoderCache FamilyModel::make_lm_cache(int64_t, int64_t) const {
  unsupported("make_lm_cache", "a language model's cache needs arch decoder");
}

}  // namespace detail
}  // namespace tfm
