// tfm/activation.h — the closed set of FFN activations, shared by every layer from the kernels up.
//
// It sits below everything (no tfm includes) so that the kernels (src/kernels, which never include
// ops headers) and the ops, modules and configs above them name an activation with one enum. The
// names (EnumNames<Activation>: "relu", "gelu", ...) and the activation op itself are in
// tfm/ops/activation.h.
//
// Plain kinds map x (..., F) → (..., F); gated kinds map x (..., 2F) = [a | b] → a ⊙ g(b) (..., F),
// F.glu's convention (the gate is the second half). Formulas: src/kernels/kernels.h.
// To add one: an enumerator here, its row in activation_is_gated, its name in EnumNames<Activation>
// (tfm/ops/activation.h), and its scalar and dispatching kernels (src/kernels/activation*).
#pragma once

namespace tfm {

enum class Activation {
  RELU,       // max(x, 0)
  GELU,       // x·Φ(x), exact (erf)
  GELU_TANH,  // GELU's tanh approximation
  GLU,        // a·σ(b)
  GEGLU,      // a·gelu(b)
  SWIGLU,     // a·silu(b)
};

// True for the gated kinds, whose input rows are twice as wide as their output rows.
constexpr bool activation_is_gated(Activation a) {
  return a == Activation::GLU || a == Activation::GEGLU || a == Activation::SWIGLU;
}

}  // namespace tfm
