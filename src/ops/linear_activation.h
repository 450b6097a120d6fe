// src/ops/linear_activation.h — internal fused ops used by the modules (not public API): the FFN
// input projection with its bias and activation in one pass after the GEMM, and the whole feed-forward
// (one node in bfloat16 training). Defined in linear_activation.cc over the Linear pieces of
// ops/linear_impl.h (checks, product, backward), which linear.cc defines.
#pragma once

#include "tfm/ops/activation.h"
#include "tfm/random.h"
#include "tfm/tensor.h"

namespace tfm::ops {

// y = act(x·Wᵀ + b)  — torch: F.<act>(F.linear(x, W, b)) (nn.TransformerEncoderLayer's
// activation(linear1(x))). x (..., in), weight (Fin, in), bias (Fin) or undefined; y (..., F) with
// Fin = F (plain) or 2F (gated: [a | b] halves, y = a ⊙ g(b)).
// Inference, and training with ReLU: the GEMM writes x·Wᵀ, then one pass adds the bias and applies
// the activation in place (no bias broadcast pass, no second buffer); training keeps only y, since
// relu's backward selects on y as on z (y ≤ 0 ⇔ z ≤ 0; NaN ⇔ NaN). GELU and GELU_TANH in training: the composition
// activation(linear(x, W, b)) bit for bit, but in one node: x·Wᵀ summed onto the bias (gemm_bias, as ops::linear),
// then y = act(z) and d = act'(z) in one pass (kernels::activation_forward_grad), keeping d (N, F) where the
// composition keeps z, so the backward does not evaluate act' again. The gated kinds in training take the
// composition itself.
// Backward: dz = y ≤ 0 ? 0 : dy (ReLU) or dy ⊙ d;  dx = dz·W;  dW += dzᵀ·x;  db += Σ_rows dz.
Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation kind);

// dropout(relu(x·Wᵀ + b), p, training, gen) — nn.TransformerEncoderLayer's dropout(activation(
// linear1(x))) with ReLU — with the dropout applied in the bias + ReLU pass after the GEMM
// (kernels::bias_relu_dropout_forward): the same numbers and the same generator draw as
// ops::dropout(linear_activation(x, W, b, RELU), p, training, gen), one pass and one (N, F) buffer
// fewer. Backward from the output y alone: dz = y ≤ 0 ? 0 : dy/(1 − p), then the Linear backward.
// Not training, or p ∉ (0, 1): exactly that composition.
Tensor linear_relu_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, float p, bool training,
                           Generator& gen);

// A Transformer layer's feed-forward, nn.TransformerEncoderLayer's linear2(dropout(act(linear1(x)))):
//   ReLU:   linear(linear_relu_dropout(x, W1, b1, p, training, gen), W2, b2)
//   others: linear(dropout(linear_activation(x, W1, b1, act), p, training, gen), W2, b2)
// with the same numbers and the same generator draw. Under Autocast(BFLOAT16) with a tape to record, one node
// keeps the hidden y (N, F) the second Linear multiplies only as bf16(y) — the operand its weight gradient
// multiplies anyway — instead of the float32 y (and, with dropout, the y before it) the composition's nodes keep:
//   ReLU, with dropout or without: nothing else; the ReLU/dropout backward needs only y's sign, which rounding
//     keeps (kernels::relu_dropout_backward_bf16; without dropout p = 0 there, and no draw is taken).
//   other activations: what the derivative reads too, in float32: a plain kind's act'(z), computed in the
//     forward's pass over z (kernels::activation_forward_grad), a gated kind's pre-activation z.
// Backward, g (N, out), rounded once for both products: dW2 += bf16(g)ᵀ·bf16(y); db2 += Σ_rows g; dy =
// bf16(g)·bf16(W2); dy masked as the dropout's backward does; dz = act'(z)·dy (ReLU: y ≤ 0 ? 0 : dy/(1 − p)); then the
// first Linear's backward of dz (linear_backward with W1's bfloat16 copy). Otherwise, and for p = 1 in training,
// exactly the composition.
Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    Activation act, float p, bool training, Generator& gen);

}  // namespace tfm::ops
