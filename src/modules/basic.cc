// src/modules/basic.cc — Linear, LayerNorm, RMSNorm, Norm, Dropout, DropPath, Embedding,
// PositionalEncoding.
#include "tfm/modules/basic.h"

#include <cmath>
#include <stdexcept>

#include "kernels/kernels.h"
#include "tfm/ops/dropout.h"
#include <algorithm>

#include "tfm/ops/elementwise.h"
#include "tfm/ops/embedding.h"
#include "tfm/ops/layer_norm.h"
#include "tfm/ops/linear.h"
#include "tfm/ops/rms_norm.h"

namespace tfm {

void init_uniform(Tensor& t, float low, float high, Generator& gen) {
  if (gen.no_draws) return;  // a model about to be loaded: its values are left unset
  float* p = t.data();
  const uint64_t base = gen.take(static_cast<uint64_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = low + (high - low) * kernels::uniform01(gen.seed, base + static_cast<uint64_t>(i));
}

void init_normal(Tensor& t, float std, Generator& gen) {
  if (gen.no_draws) return;  // a model about to be loaded: its values are left unset
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal() * std;
}

void init_xavier_uniform(Tensor& t, Generator& gen) {
  const int64_t fan_out = t.size(0), fan_in = t.numel() / std::max<int64_t>(fan_out, 1);
  const float a = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  init_uniform(t, -a, a, gen);
}

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator& gen) : in_features(in), out_features(out) {
  weight = Tensor::empty({out, in});
  const float bound = in > 0 ? 1.0f / std::sqrt(static_cast<float>(in)) : 0.0f;
  init_uniform(weight, -bound, bound, gen);
  if (has_bias) {
    bias = Tensor::empty({out});
    init_uniform(bias, -bound, bound, gen);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}
Tensor Linear::forward(const Tensor& x) const { return ops::linear(x, weight, bias); }

LayerNorm::LayerNorm(int64_t d, float eps_, bool has_bias) : eps(eps_) {
  weight = Tensor::full({d}, 1.0f);
  if (has_bias) bias = Tensor::zeros({d});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}
Tensor LayerNorm::forward(const Tensor& x) const { return ops::layer_norm(x, weight, bias, eps); }
Tensor LayerNorm::forward_add(const Tensor& x, const Tensor& r) const {
  return ops::add_layer_norm(x, r, weight, bias, eps);
}

Tensor LayerNorm::forward_add(const Tensor& x, const Tensor& r, const Dropout& r_dropout) const {
  return ops::add_dropout_layer_norm(x, r, r_dropout.p, r_dropout.is_training(), r_dropout.generator(), weight, bias,
                                     eps);
}

RMSNorm::RMSNorm(int64_t d, float eps_) : eps(eps_) {
  weight = Tensor::full({d}, 1.0f);
  register_parameter("weight", weight);
}
Tensor RMSNorm::forward(const Tensor& x) const { return ops::rms_norm(x, weight, eps); }

Norm::Norm(NormType type_, int64_t d, float eps_, bool has_bias) : type(type_), eps(eps_) {
  if (type == NormType::RMS_NORM && has_bias) throw std::invalid_argument("Norm: rms_norm has no bias");
  weight = Tensor::full({d}, 1.0f);
  if (has_bias) bias = Tensor::zeros({d});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}
Tensor Norm::forward(const Tensor& x) const {
  return type == NormType::RMS_NORM ? ops::rms_norm(x, weight, eps) : ops::layer_norm(x, weight, bias, eps);
}
Tensor Norm::forward_add(const Tensor& x, const Tensor& r) const {
  if (type == NormType::RMS_NORM) return ops::rms_norm(ops::add(x, r), weight, eps);
  return ops::add_layer_norm(x, r, weight, bias, eps);
}
Tensor Norm::forward_add(const Tensor& x, const Tensor& r, const Dropout& r_dropout) const {
  if (type == NormType::RMS_NORM) return ops::rms_norm(r_dropout.forward_add(x, r), weight, eps);
  return ops::add_dropout_layer_norm(x, r, r_dropout.p, r_dropout.is_training(), r_dropout.generator(), weight, bias,
                                     eps);
}

Tensor DropPath::forward(const Tensor& x) const { return ops::drop_path(x, p, sample_dim, is_training(), *gen_); }

Tensor Dropout::forward(const Tensor& x) const { return ops::dropout(x, p, is_training(), *gen_); }
Tensor Dropout::forward_add(const Tensor& x, const Tensor& r) const {
  return ops::add_dropout(x, r, p, is_training(), *gen_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx_, Generator& gen)
    : padding_idx(padding_idx_) {
  weight = Tensor::empty({num_embeddings, dim});
  init_normal(weight, 1.0f, gen);
  float* p = weight.data();
  if (padding_idx >= 0 && padding_idx < num_embeddings)
    for (int64_t d = 0; d < dim; ++d) p[padding_idx * dim + d] = 0.0f;
  register_parameter("weight", weight);
}
Tensor Embedding::forward(const std::vector<int32_t>& ids, const Shape& shape) const {
  return ops::embedding(weight, ids, shape, padding_idx);
}

PositionalEncoding::PositionalEncoding(int64_t d_model, int64_t max_len) {
  table = Tensor::empty({max_len, d_model});
  float* p = table.data();
  for (int64_t t = 0; t < max_len; ++t)
    for (int64_t i = 0; i < d_model; i += 2) {
      // div = exp(−ln(10000)·i/D), computed in double then rounded, as the paper's formula.
      const double angle = static_cast<double>(t) * std::exp(-std::log(10000.0) * static_cast<double>(i) /
                                                             static_cast<double>(d_model));
      p[t * d_model + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < d_model) p[t * d_model + i + 1] = static_cast<float>(std::cos(angle));
    }
}
Tensor PositionalEncoding::forward(const Tensor& x, bool batch_first) const {
  return ops::add_positional(x, table, batch_first);
}

}  // namespace tfm
