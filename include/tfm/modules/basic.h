// tfm/modules/basic.h — Linear, LayerNorm, RMSNorm, Norm (either, chosen by NormType), Dropout,
// DropPath, Embedding and the sinusoidal positional encoding, with PyTorch's constructor arguments,
// defaults, initialisers and state_dict keys.
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "tfm/enum_names.h"
#include "tfm/modules/module.h"
#include "tfm/random.h"

namespace tfm {

// The normalisation of every layer and stack. LAYER_NORM: nn.LayerNorm (keys weight [, bias]);
// RMS_NORM: RMSNorm (key weight).
enum class NormType { LAYER_NORM, RMS_NORM };
template <>
struct EnumNames<NormType> {
  static constexpr const char* noun = "norm type";
  static constexpr std::array<std::pair<NormType, std::string_view>, 2> names{
      {{NormType::LAYER_NORM, "layer_norm"}, {NormType::RMS_NORM, "rms_norm"}}};
};

// nn.Linear: weight (out, in), bias (out). Init: U(−1/√in, 1/√in) for both (kaiming_uniform a=√5).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const;  // (..., in) → (..., out)
  Tensor weight, bias;                    // bias undefined when bias = false
  int64_t in_features, out_features;
};

class Dropout;

// nn.LayerNorm(normalized_shape = D, eps, elementwise_affine = true): weight ones, bias zeros; bias = false drops the
// bias (PyTorch ≥ 2.1's argument; torch 1.13's LayerNorm always has one).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t d, float eps = 1e-5f, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor forward_add(const Tensor& x, const Tensor& r) const;  // LayerNorm(x + r), fused
  // LayerNorm(x + r_dropout(r)), the dropout fused into the same pass (same numbers and draw).
  Tensor forward_add(const Tensor& x, const Tensor& r, const Dropout& r_dropout) const;
  Tensor weight, bias;
  float eps;
};

// RMSNorm over the last dim (D): y = x / sqrt(mean(x²) + eps) · weight, weight (D) ones, no bias
// (state_dict key `weight` only). PyTorch 1.13 has no nn.RMSNorm; this is later versions'
// nn.RMSNorm(D, eps) with elementwise_affine. eps defaults to LayerNorm's 1e-5 (the layers pass their
// layer_norm_eps), not to torch's None (the dtype's machine epsilon).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t d, float eps = 1e-5f);
  Tensor forward(const Tensor& x) const;  // (..., D) → (..., D)
  Tensor weight;                          // (D)
  float eps;
};

// The norm of a Transformer layer or stack: LayerNorm or RMSNorm over the last dim (D), with
// LayerNorm's or RMSNorm's keys and numbers (the same ops). weight (D) ones; bias (D) zeros, present
// only for LAYER_NORM with `bias` (RMS_NORM with `bias` throws std::invalid_argument).
class Norm : public Module {
 public:
  Norm(NormType type, int64_t d, float eps = 1e-5f, bool bias = true);
  Tensor forward(const Tensor& x) const;                       // (..., D) → (..., D)
  Tensor forward_add(const Tensor& x, const Tensor& r) const;  // norm(x + r); LayerNorm's fused op
  // norm(x + r_dropout(r)): for LAYER_NORM the dropout fused into LayerNorm's pass, for RMS_NORM
  // rms_norm(r_dropout.forward_add(x, r)) (the same numbers and draw as the composition either way).
  Tensor forward_add(const Tensor& x, const Tensor& r, const Dropout& r_dropout) const;
  NormType type;
  Tensor weight, bias;  // (D); bias undefined without one
  float eps;
};

// nn.Dropout(p): active only in training mode.
class Dropout : public Module {
 public:
  explicit Dropout(float probability = 0.5f, Generator& gen = default_generator()) : p(probability), gen_(&gen) {}
  Tensor forward(const Tensor& x) const;
  // x + forward(r) in one pass (the residual add of a dropped-out branch; same numbers and draw).
  Tensor forward_add(const Tensor& x, const Tensor& r) const;
  Generator& generator() const { return *gen_; }
  float p;

 private:
  Generator* gen_;
};

// Stochastic depth (timm's DropPath, "Deep Networks with Stochastic Depth"): in training each sample
// of x, indexed along sample_dim, is multiplied by 0 with probability p and by 1/(1−p) otherwise
// (ops::drop_path); an identity with no generator draw in eval mode or with p = 0.
class DropPath : public Module {
 public:
  explicit DropPath(float probability = 0.0f, int64_t sample_dimension = 0, Generator& gen = default_generator())
      : p(probability), sample_dim(sample_dimension), gen_(&gen) {}
  Tensor forward(const Tensor& x) const;
  bool active() const { return is_training() && p > 0.0f; }  // false: forward returns x itself
  float p;
  int64_t sample_dim;

 private:
  Generator* gen_;
};

// nn.Embedding(num_embeddings, embedding_dim, padding_idx): weight (V, D) ~ N(0, 1), padding row 0.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1,
            Generator& gen = default_generator());
  Tensor forward(const std::vector<int32_t>& ids, const Shape& shape) const;  // → (shape..., D)
  Tensor weight;
  int64_t padding_idx;
};

// The sinusoidal table of "Attention Is All You Need": pe[t, 2i] = sin(t / 10000^(2i/D)),
// pe[t, 2i+1] = cos(t / 10000^(2i/D)). A constant buffer, not a parameter (not in state_dict).
class PositionalEncoding : public Module {
 public:
  PositionalEncoding(int64_t d_model, int64_t max_len = 5000);
  Tensor forward(const Tensor& x, bool batch_first) const;  // x + pe[:T], x (B,T,D) or (T,B,D)
  Tensor table;                                             // (max_len, D)
};

// PyTorch's initialisers over our generator (nn.init.uniform_, normal_, xavier_uniform_). With a
// no_draws generator they leave t's values unset (a model whose weights are loaded next: its fresh pages
// are never touched).
void init_uniform(Tensor& t, float low, float high, Generator& gen);
void init_normal(Tensor& t, float std, Generator& gen);  // N(0, std²): gen.normal()·std each
void init_xavier_uniform(Tensor& t, Generator& gen);  // U(±√(6/(fan_in+fan_out))), t (out, in)

}  // namespace tfm
