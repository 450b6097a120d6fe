// src/models/model.cc — Model: its parts built from the ModelConfig, and the teacher-forced forward.
//
// Reference models: tools/torch_models.py holds the same architectures in PyTorch with the same
// attribute names, hence the same state_dict keys; tests/models/model_test.cc checks logits and a
// training curve against them.
#include "tfm/models/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tfm/ops/linear.h"
#include "tfm/ops/loss.h"

namespace tfm {

// nn.Linear(D, V) whose weight may be tied to an embedding matrix (V, D). When tied, `weight` is a
// second handle to the embedding's tensor and is not registered, so the key generator.weight is
// absent and the optimizer sees the matrix once; both uses accumulate into the same .grad.
// Without `bias` (DECODER): nn.Linear(D, V, bias=False), no generator.bias key.
class OutputProjection : public Module {
 public:
  OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, bool with_bias, Generator& gen) {
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
  Tensor forward(const Tensor& x) const { return ops::linear(x, weight, bias); }  // (..., D) → (..., V)
  Tensor weight, bias;                                                            // (V, D), (V) or undefined
};

Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id) {
  std::vector<uint8_t> m(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) m[i] = ids[i] == pad_id ? 1 : 0;
  return Tensor::from_bool({B, T}, m);
}

namespace {

// The config validated, with its architecture's defaults made explicit (config() then shows what
// the model is, and a config.json written from it means the same whatever the defaults).
ModelConfig validated(const ModelConfig& c) {
  c.validate();
  return c.with_arch_defaults();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
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
// DECODER (GPT-2 / nanoGPT): nn.Embedding → nn.TransformerEncoder (final norm always) → nn.Linear
//   without bias (or tied) → the position table; then, over the parameters in key order, N(0, 0.02)
//   for every matrix (embeddings and position table included), N(0, 0.02/√(2·L)) for the residual
//   output projections out_proj.weight and linear2.weight (each adds to the residual stream L times
//   twice), zero biases; the norms keep their ones and zeros.
Model::Model(const ModelConfig& config, Generator& gen)
    : config_(validated(config)),
      pe_(config_.positional == Positional::SINUSOIDAL ? config_.d_model : 0,
          config_.positional == Positional::SINUSOIDAL ? config_.max_len : 0),
      dropout_(config_.dropout, gen) {
  const ModelConfig& c = config_;
  const TransformerLayerOptions o = c.layer_options();
  if (c.is_lm()) {
    src_embedding_ = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    encoder_ = std::make_unique<TransformerEncoder>(o, c.num_encoder_layers, /*final_norm=*/true, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                    *c.tie_embeddings ? &src_embedding_->weight : nullptr,
                                                    /*with_bias=*/false, gen);
    register_module("embedding", *src_embedding_);
    register_module("decoder", *encoder_);
  } else if (has_decoder()) {
    transformer_ = std::make_unique<Transformer>(o, c.num_encoder_layers, c.num_decoder_layers, gen);
    if (!c.share_embeddings) src_embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    tgt_embedding_ = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                    *c.tie_embeddings ? &tgt_embedding_->weight : nullptr,
                                                    /*with_bias=*/true, gen);
    if (src_embedding_) register_module("src_embedding", *src_embedding_);
    register_module("tgt_embedding", *tgt_embedding_);
    register_module("transformer", *transformer_);
  } else {
    src_embedding_ = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    encoder_ = std::make_unique<TransformerEncoder>(o, c.num_encoder_layers, *c.norm_first, gen);
    generator_ = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size, nullptr, /*with_bias=*/true, gen);
    register_module("embedding", *src_embedding_);
    register_module("encoder", *encoder_);
  }
  src_embed_ = src_embedding_ ? src_embedding_.get() : tgt_embedding_.get();
  register_module("generator", *generator_);
  register_module("positional_encoding", pe_);  // no parameters: only for train()/eval()
  register_module("dropout", dropout_);
  // √D as PyTorch computes `x * math.sqrt(D)`: the double rounded to float once.
  if (c.scales_embeddings()) embed_scale_ = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
  if (c.arch == Arch::SEQ2SEQ)
    visit_parameters([&](const std::string&, Tensor& t) {
      if (t.dim() > 1) init_xavier_uniform(t, gen);
    });
  if (*c.positional == Positional::LEARNED) {
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
  if (c.is_lm()) {
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_encoder_layers));
    visit_parameters([&](const std::string& key, Tensor& t) {
      float* p = t.data();
      if (t.dim() > 1) {
        const bool residual = ends_with(key, "out_proj.weight") || ends_with(key, "linear2.weight");
        const float std = static_cast<float>(residual ? residual_std : 0.02);
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal() * std;
      } else if (ends_with(key, "bias") && key.find("norm") == std::string::npos) {
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.0f;
      }
    });
  }
}

Model::~Model() = default;

const TransformerEncoder& Model::encoder() const { return transformer_ ? transformer_->encoder : *encoder_; }

const TransformerDecoder& Model::decoder() const {
  if (!transformer_)
    throw std::invalid_argument("model: arch " + std::string(enum_name(config_.arch)) +
                                (config_.is_lm() ? " has no encoder–decoder TransformerDecoder (its causal stack is a "
                                                   "TransformerEncoder: lm_logits runs it)"
                                                 : " has no decoder"));
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
  switch (*config_.positional) {
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

namespace {

[[noreturn]] void fail_lm(const char* what) {
  throw std::invalid_argument(std::string("model: arch decoder is a language model: ") + what +
                              " does not apply (lm_logits, tfm generate and tfm eval --text do)");
}

}  // namespace

Tensor Model::encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask) const {
  if (config_.is_lm()) fail_lm("encode");
  const Tensor kpm = padding_mask(src, B, S, config_.pad_id);            // (B, S)
  if (key_padding_mask) *key_padding_mask = kpm;
  const Tensor x = embed(*src_embed_, src_pos_embedding_.get(), src, B, S, 0);                 // (B, S, D)
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
  if (config_.is_lm()) return lm_logits(b.src, b.B, b.S);  // (B, T, V), S = T
  const int32_t pad = config_.pad_id;
  const Tensor src_kpm = padding_mask(b.src, b.B, b.S, pad);  // (B, S)
  if (!has_decoder()) {
    const Tensor x = embed(*src_embed_, src_pos_embedding_.get(), b.src, b.B, b.S, 0);        // (B, S, D)
    const Tensor h = encoder_->forward(x, Tensor(), src_kpm, false);   // (B, S, D)
    return generator_->forward(h);                                      // (B, S, V)
  }
  const Tensor src = embed(*src_embed_, src_pos_embedding_.get(), b.src, b.B, b.S, 0);     // (B, S, D)
  const Tensor tgt = embed(*tgt_embedding_, tgt_pos_embedding_.get(), b.tgt_in, b.B, b.T, 0);  // (B, T, D)
  const Tensor tgt_kpm = padding_mask(b.tgt_in, b.B, b.T, pad);      // (B, T)
  const Tensor h = transformer_->forward(src, tgt, Tensor(), Tensor(), Tensor(), src_kpm, tgt_kpm, src_kpm,
                                         /*src_is_causal=*/false, /*tgt_is_causal=*/true);  // (B, T, D)
  return generator_->forward(h);  // (B, T, V)
}

Tensor Model::lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset,
                        TransformerEncoderCache* cache) const {
  if (!config_.is_lm())
    throw std::invalid_argument("model: lm_logits needs arch decoder, got " + std::string(enum_name(config_.arch)));
  const auto fail = [](const std::string& m) { throw std::invalid_argument("model: lm_logits: " + m); };
  if (B <= 0 || T <= 0) fail("B and T must be positive (got " + std::to_string(B) + ", " + std::to_string(T) + ")");
  if (static_cast<int64_t>(ids.size()) != B * T)
    fail("ids has " + std::to_string(ids.size()) + " entries, expected B·T = " + std::to_string(B * T));
  if (offset < 0) fail("offset must be non-negative, got " + std::to_string(offset));
  if (!cache) {
    const Tensor x = embed(*src_embed_, src_pos_embedding_.get(), ids, B, T, offset);  // (B, T, D)
    const Tensor h = encoder_->forward(x, Tensor(), Tensor(), /*is_causal=*/true);       // (B, T, D)
    return generator_->forward(h);                                                      // (B, T, V)
  }
  if (cache->length() != offset)
    fail("offset " + std::to_string(offset) + " must be the cache's length " + std::to_string(cache->length()));
  // One position per step (the cache's rule); T > 1 prefills step by step.
  const int64_t V = config_.tgt_vocab_size;
  Tensor out;  // (B, T, V) when T > 1
  std::vector<int32_t> column(static_cast<size_t>(B));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) column[static_cast<size_t>(b)] = ids[static_cast<size_t>(b * T + t)];
    const Tensor x = embed(*src_embed_, src_pos_embedding_.get(), column, B, 1, offset + t);  // (B, 1, D)
    const Tensor h = encoder_->forward(x, Tensor(), Tensor(), /*is_causal=*/true, cache);        // (B, 1, D)
    const Tensor step = generator_->forward(h);                                                  // (B, 1, V)
    if (T == 1) return step;
    if (!out.defined()) out = Tensor::empty({B, T, V});
    const float* src = step.data();
    float* dst = out.data();
    for (int64_t b = 0; b < B; ++b) std::copy(src + b * V, src + (b + 1) * V, dst + (b * T + t) * V);
  }
  return out;
}

TransformerEncoderCache Model::make_lm_cache(int64_t rows, int64_t capacity) const {
  if (!config_.is_lm())
    throw std::invalid_argument("model: make_lm_cache needs arch decoder, got " + std::string(enum_name(config_.arch)));
  if (rows < 1 || capacity < 1)
    throw std::invalid_argument("model: make_lm_cache: rows and capacity must be positive (got " +
                                std::to_string(rows) + ", " + std::to_string(capacity) + ")");
  return TransformerEncoderCache(static_cast<size_t>(encoder_->num_layers()), capacity);
}

Tensor Model::loss(const data::TokenBatch& b, float label_smoothing, int64_t normalizer) const {
  const Tensor logits = forward(b);  // (B, T|S, V)
  const int64_t rows = logits.size(0) * logits.size(1);
  if (static_cast<int64_t>(b.tgt_out.size()) != rows)
    throw std::invalid_argument("TokenBatch: tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected " +
                                std::to_string(rows));
  Tensor mean = ops::cross_entropy(logits.reshape({rows, config_.tgt_vocab_size}), b.tgt_out, config_.pad_id,
                                   label_smoothing);
  if (normalizer == 0) return mean;
  if (normalizer < 0) throw std::invalid_argument("model: loss normalizer must be ≥ 0, got " + std::to_string(normalizer));
  // Σ token losses / normalizer = mean · (n / normalizer), n the batch's own target tokens.
  const int64_t n = data::count_target_tokens(b, config_.pad_id);
  return ops::mul_scalar(mean, static_cast<float>(static_cast<double>(n) / static_cast<double>(normalizer)));
}

}  // namespace tfm
