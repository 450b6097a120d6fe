// tfm/ops/activation.h — the FFN activations, plain and gated.
#pragma once
#include <string>

#include "tfm/tensor.h"

namespace tfm::ops {
enum class Activation { RELU, GELU, GELU_TANH, GLU, GEGLU, SWIGLU };
// "relu", "gelu", "gelu_tanh", "glu", "geglu", "swiglu"; throws naming the value otherwise.
Activation activation_from_string(const std::string& name);
const char* activation_name(Activation a);
bool activation_is_gated(Activation a);
// Plain: x (..., F) → (..., F). Gated: x (..., 2F) = [a | b] → a ⊙ g(b) (..., F).
Tensor activation(const Tensor& x, Activation kind);
}  // namespace tfm::ops
