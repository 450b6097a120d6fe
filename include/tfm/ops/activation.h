// tfm/ops/activation.h — the FFN activations, plain and gated.
#pragma once
#include <string>

#include "tfm/activation.h"
#include "tfm/tensor.h"

namespace tfm::ops {
// The enum and its predicate live in tfm/activation.h (shared with the kernels); ops::Activation and
// ops::activation_is_gated name the same entities.
using Activation = tfm::Activation;
using tfm::activation_is_gated;
// "relu", "gelu", "gelu_tanh", "glu", "geglu", "swiglu"; throws naming the value otherwise.
Activation activation_from_string(const std::string& name);
const char* activation_name(Activation a);
// Plain: x (..., F) → (..., F). Gated: x (..., 2F) = [a | b] → a ⊙ g(b) (..., F).
Tensor activation(const Tensor& x, Activation kind);
}  // namespace tfm::ops
