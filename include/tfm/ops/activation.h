// tfm/ops/activation.h — the FFN activations, plain and gated.
#pragma once
#include "tfm/activation.h"
#include "tfm/enum_names.h"
#include "tfm/tensor.h"

namespace tfm {
// The enum and its predicate live in tfm/activation.h (shared with the kernels); their names here.
template <>
struct EnumNames<Activation> {
  static constexpr const char* noun = "activation";
  static constexpr std::array<std::pair<Activation, std::string_view>, 6> names{
      {{Activation::RELU, "relu"},
       {Activation::GELU, "gelu"},
       {Activation::GELU_TANH, "gelu_tanh"},
       {Activation::GLU, "glu"},
       {Activation::GEGLU, "geglu"},
       {Activation::SWIGLU, "swiglu"}}};
};
}  // namespace tfm

namespace tfm::ops {
// Plain: x (..., F) → (..., F). Gated: x (..., 2F) = [a | b] → a ⊙ g(b) (..., F).
Tensor activation(const Tensor& x, Activation kind);
}  // namespace tfm::ops
