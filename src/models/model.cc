// src/models/model.cc — Model: its parts built from the ModelConfig, and the teacher-forced forward.
//
// Reference models: tools/torch_models.py holds the same architectures in PyTorch with the same
// attribute names, hence the same state_dict keys; tests/models/model_test.cc checks logits and a
// training curve against them.
#include "tfm/models/model.h"

#include <cmath>
#include <stdexcept>

#include "tfm/ops/linear.h"
#include "tfm/ops/loss.h"

namespace tfm {

// nn.Linear(D, V) whose weight may be tied to an embedding matrix (V, D). When tied, `weight` is a
// second handle to the embedding's tensor and is not registered, so the key generator.weight is
// absent and the optimizer sees the matrix once; both uses accumulate into the same .grad.
class OutputProjection : public Module {
 public:
  OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, Generator& gen) {
    // nn.Linear's initialisation, U(±1/√D) for weight and bias, drawn in that order.
    const float bound = 1.0f / std::sqrt(static_cast<float>(d_model));
    if (tied) {
      weight = *tied;
    } else {
      weight = Tensor::empty({vocab, d_model});
      init_uniform(weight, -bound, bound, gen);
      register_parameter("weight", weight);
    }
    bias = Tensor::empty({vocab});
    init_uniform(bias, -bound, bound, gen);
    register_parameter("bias", bias);
  }
  Tensor forward(const Tensor& x) const { return ops::linear(x, weight, bias); }  // (..., D) → (..., V)
  Tensor weight, bias;                                                            // (V, D), (V)
};

Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id) {
  std::vector<uint8_t> m(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) m[i] = ids[i] == pad_id ? 1 : 0;
  return Tensor::from_bool({B, T}, m);
}

namespace {

const ModelConfig& validated(const ModelConfig& c) {
  c.validate();
  return c;
}

}  // namespace

// Construction order = the PyTorch reference's attribute order, so that both draw their
// initialisation in a comparable order (the weights are compared through checkpoints anyway).
//
// Without a decoder (ENCODER): nn.Embedding → PositionalEncoding (with dropout) →
//   nn.TransformerEncoder → nn.Linear, PyTorch's default initialisation for each. The stack has a
//   final norm (key encoder.norm.*, of the layers' norm_type) only with norm_first, where the residual
//   stream is otherwise never normalised; post-norm layers end normalised already
//   (nn.TransformerEncoder's default norm=None).
// With a decoder (SEQ2SEQ): nn.Transformer, the two embeddings, the generator nn.Linear; then
//   xavier_uniform_ on every parameter with more than one dimension (embeddings and generator
//   included), as the build_transformer notebook does over model.parameters().
// Learned position tables come last, after that loop, N(0, 0.02) in both architectures: the
//   notebooks have none, so the init is GPT-2's wpe, a table that starts near zero (the model
//   starts nearly position-blind) and learns its own scale; tools/torch_models.py does the same.
Model::Model(const ModelConfig& config, Generator& gen)
    : config_(validated(config)),
      pe_(config.positional == Positional::SINUSOIDAL ? config.d_model : 0,
          config.positional == Positional::SINUSOIDAL ? config.max_len : 0),
      dropout_(config.dropout, gen) {
  const ModelConfig& c = config_;
  const TransformerLayerOptions o = c.layer_options();
  if (has_decoder()) {
    transformer_ = std::make_unique<Transformer>(o, c.num_encoder_layers, c.num_decoder_layers, gen);
    src_embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    tgt_embedding_ = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                    c.tie_embeddings ? &tgt_embedding_->weight : nullptr, gen);
    register_module("src_embedding", *src_embedding_);
    register_module("tgt_embedding", *tgt_embedding_);
    register_module("transformer", *transformer_);
  } else {
    src_embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    encoder_ = std::make_unique<TransformerEncoder>(o, c.num_encoder_layers, c.norm_first, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size, nullptr, gen);
    register_module("embedding", *src_embedding_);
    register_module("encoder", *encoder_);
  }
  register_module("generator", *generator_);
  register_module("positional_encoding", pe_);  // no parameters: only for train()/eval()
  register_module("dropout", dropout_);
  // √D as PyTorch computes `x * math.sqrt(D)`: the double rounded to float once.
  if (c.scales_embeddings()) embed_scale_ = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
  if (c.arch == Arch::SEQ2SEQ)
    visit_parameters([&](const std::string&, Tensor& t) {
      if (t.dim() > 1) init_xavier_uniform(t, gen);
    });
  if (c.positional == Positional::LEARNED) {
    // nn.Embedding(max_len, D) then normal_(std=0.02): N(0, 1) draws scaled once.
    auto table = [&](const char* key) {
      auto e = std::make_unique<Embedding>(c.max_len, c.d_model, -1, gen);
      float* p = e->weight.data();
      for (int64_t i = 0; i < e->weight.numel(); ++i) p[i] *= 0.02f;
      register_module(key, *e);
      return e;
    };
    src_pos_embedding_ = table(has_decoder() ? "src_pos_embedding" : "pos_embedding");
    if (has_decoder()) tgt_pos_embedding_ = table("tgt_pos_embedding");
  }
}

Model::~Model() = default;

const TransformerEncoder& Model::encoder() const { return transformer_ ? transformer_->encoder : *encoder_; }

const TransformerDecoder& Model::decoder() const {
  if (!transformer_) throw std::invalid_argument("model: arch " + std::string(enum_name(config_.arch)) + " has no decoder");
  return transformer_->decoder;
}

Tensor Model::project(const Tensor& h) const { return generator_->forward(h); }

Tensor Model::embed(const Embedding& emb, const Embedding* pos, const std::vector<int32_t>& ids, int64_t B, int64_t T,
                    int64_t offset) const {
  if (offset + T > config_.max_len)
    throw std::invalid_argument("model: position " + std::to_string(offset + T - 1) + " beyond max_len " +
                                std::to_string(config_.max_len));
  Tensor x = emb.forward(ids, {B, T});  // (B, T, D)
  if (embed_scale_ != 1.0f) x = ops::mul_scalar(x, embed_scale_);
  switch (config_.positional) {
    case Positional::SINUSOIDAL:
      return dropout_.forward(ops::add_positional(x, pe_.table.narrow0(offset, T), /*batch_first=*/true));
    case Positional::LEARNED: {
      // The table's rows offset .. offset + T − 1 for every row of the batch, looked up like ids so
      // that the gradient of each row accumulates over the batch.
      std::vector<int32_t> positions(static_cast<size_t>(B * T));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) positions[b * T + t] = static_cast<int32_t>(offset + t);
      return dropout_.forward(ops::add(x, pos->forward(positions, {B, T})));  // (B, T, D)
    }
    case Positional::NONE:
      return dropout_.forward(x);
  }
  throw std::logic_error("model: unhandled positional encoding");
}

Tensor Model::encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask) const {
  const Tensor kpm = padding_mask(src, B, S, config_.pad_id);            // (B, S)
  if (key_padding_mask) *key_padding_mask = kpm;
  const Tensor x = embed(*src_embedding_, src_pos_embedding_.get(), src, B, S, 0);                 // (B, S, D)
  return encoder().forward(x, Tensor(), kpm, /*is_causal=*/false);      // (B, S, D)
}

Tensor Model::embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset) const {
  if (!tgt_embedding_) throw std::invalid_argument("model: arch " + std::string(enum_name(config_.arch)) + " has no target embedding");
  return embed(*tgt_embedding_, tgt_pos_embedding_.get(), ids, B, T, offset);
}

namespace {

void check_batch(const data::TokenBatch& b, const ModelConfig& c, bool shifted) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("TokenBatch: " + m); };
  if (b.B <= 0 || b.S <= 0) fail("B and S must be positive (got " + std::to_string(b.B) + ", " + std::to_string(b.S) + ")");
  if (static_cast<int64_t>(b.src.size()) != b.B * b.S)
    fail("src has " + std::to_string(b.src.size()) + " ids, expected B·S = " + std::to_string(b.B * b.S));
  if (b.S > c.max_len) fail("source length " + std::to_string(b.S) + " exceeds max_len " + std::to_string(c.max_len));
  if (!shifted) {
    if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.S)
      fail("encoder arch: tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected B·S = " +
           std::to_string(b.B * b.S) + " (one target per source position)");
    return;
  }
  if (b.T <= 0) fail("T must be positive for arch seq2seq");
  if (b.T > c.max_len) fail("target length " + std::to_string(b.T) + " exceeds max_len " + std::to_string(c.max_len));
  if (static_cast<int64_t>(b.tgt_in.size()) != b.B * b.T)
    fail("tgt_in has " + std::to_string(b.tgt_in.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
  if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.T)
    fail("tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
}

}  // namespace

Tensor Model::forward(const data::TokenBatch& b) const {
  check_batch(b, config_, has_decoder());
  const int32_t pad = config_.pad_id;
  const Tensor src_kpm = padding_mask(b.src, b.B, b.S, pad);  // (B, S)
  if (!has_decoder()) {
    const Tensor x = embed(*src_embedding_, src_pos_embedding_.get(), b.src, b.B, b.S, 0);        // (B, S, D)
    const Tensor h = encoder_->forward(x, Tensor(), src_kpm, false);   // (B, S, D)
    return generator_->forward(h);                                      // (B, S, V)
  }
  const Tensor src = embed(*src_embedding_, src_pos_embedding_.get(), b.src, b.B, b.S, 0);     // (B, S, D)
  const Tensor tgt = embed(*tgt_embedding_, tgt_pos_embedding_.get(), b.tgt_in, b.B, b.T, 0);  // (B, T, D)
  const Tensor tgt_kpm = padding_mask(b.tgt_in, b.B, b.T, pad);      // (B, T)
  const Tensor h = transformer_->forward(src, tgt, Tensor(), Tensor(), Tensor(), src_kpm, tgt_kpm, src_kpm,
                                         /*src_is_causal=*/false, /*tgt_is_causal=*/true);  // (B, T, D)
  return generator_->forward(h);  // (B, T, V)
}

Tensor Model::loss(const data::TokenBatch& b, float label_smoothing) const {
  const Tensor logits = forward(b);  // (B, T|S, V)
  const int64_t rows = logits.size(0) * logits.size(1);
  if (static_cast<int64_t>(b.tgt_out.size()) != rows)
    throw std::invalid_argument("TokenBatch: tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected " +
                                std::to_string(rows));
  return ops::cross_entropy(logits.reshape({rows, config_.tgt_vocab_size}), b.tgt_out, config_.pad_id,
                            label_smoothing);
}

}  // namespace tfm
