// src/models/model.cc — Model: the handle over the family registered for its Arch
// (src/models/family_model.h), and the loss every family shares.
//
// Reference models: tools/torch_models.py holds the same families in PyTorch with the same attribute
// names, hence the same state_dict keys; tests/models/model_test.cc checks logits and a training curve
// against them.
#include "tfm/models/model.h"

#include <stdexcept>

#include "models/family_model.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/loss.h"

namespace tfm {

Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id) {
  if (B < 0 || T < 0 || static_cast<uint64_t>(B) * static_cast<uint64_t>(T) != ids.size())
    throw std::invalid_argument("padding_mask: ids has " + std::to_string(ids.size()) +
                                " entries, expected B·T = " + std::to_string(B) + "·" + std::to_string(T));
  std::vector<uint8_t> m(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) m[i] = ids[i] == pad_id ? 1 : 0;
  return Tensor::from_bool({B, T}, m);
}

namespace {

// The config validated, with its family's defaults made explicit (config() then shows what the model
// is, and a config.json written from it means the same whatever the defaults).
ModelConfig validated(const ModelConfig& c) {
  c.validate();
  return c.with_arch_defaults();
}

}  // namespace

Model::Model(const ModelConfig& config, Generator& gen)
    : config_(validated(config)), impl_(detail::build_family_model(config_, gen)) {
  register_module("", *impl_);
}

Model::~Model() = default;

Tensor Model::forward(const data::TokenBatch& b) const { return impl_->forward(b); }

Tensor Model::encode(const std::vector<int32_t>& src, int64_t B, int64_t S, Tensor* key_padding_mask) const {
  if (B < 0 || S < 0 || static_cast<uint64_t>(B) * static_cast<uint64_t>(S) != src.size())
    throw std::invalid_argument("encode: src has " + std::to_string(src.size()) +
                                " entries, expected B·S = " + std::to_string(B) + "·" + std::to_string(S));
  return impl_->encode(src, B, S, key_padding_mask);
}

Tensor Model::embed_target(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset) const {
  return impl_->embed_target(ids, B, T, offset);
}

const TransformerDecoder& Model::decoder() const { return impl_->decoder(); }

Tensor Model::project(const Tensor& h) const { return impl_->project(h); }

Tensor Model::lm_logits(const std::vector<int32_t>& ids, int64_t B, int64_t T, int64_t offset,
                        TransformerEncoderCache* cache, bool last_only) const {
  return impl_->lm_logits(ids, B, T, offset, cache, last_only);
}

TransformerEncoderCache Model::make_lm_cache(int64_t rows, int64_t capacity) const {
  return impl_->make_lm_cache(rows, capacity);
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
