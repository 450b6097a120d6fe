// tfm/ops/layer_norm.h — torch.nn.functional.layer_norm over the last dimension.
#pragma once
#include <utility>

#include "tfm/random.h"
#include "tfm/tensor.h"

namespace tfm::ops {
// x (..., D), weight (D), bias (D) or undefined → (..., D). Saves only x: the backward recomputes the
// row moments in double.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
// layer_norm(x + r, ...) in one pass (the post-norm residual): returns the normalized sum.
Tensor add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias,
                      float eps);
// layer_norm(x + dropout(r, p, training, gen), ...) — PyTorch's post-norm residual
// norm(x + dropout(sublayer(x))) — with the dropout applied inside the same pass. The same numbers
// (bitwise) and the same generator draw as the composition; the mask is recomputed in the backward.
Tensor add_dropout_layer_norm(const Tensor& x, const Tensor& r, float p, bool training, Generator& gen,
                              const Tensor& weight, const Tensor& bias, float eps);
// {z, y} with z = x + dropout(r, p, training, gen) and y = layer_norm(z, ...) — a pre-norm layer's
// residual stream and the next sublayer's input — in one pass. Bitwise, with the same generator draw
// and the same gradients as z = add_dropout(x, r, ...), y = layer_norm(z, ...) (tfm/ops/dropout.h).
std::pair<Tensor, Tensor> add_dropout_and_layer_norm(const Tensor& x, const Tensor& r, float p, bool training,
                                                     Generator& gen, const Tensor& weight, const Tensor& bias,
                                                     float eps);
}  // namespace tfm::ops
