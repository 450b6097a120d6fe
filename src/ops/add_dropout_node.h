// src/ops/add_dropout_node.h — the autograd record of z = x + dropout(r) (ops::add_dropout's node, defined
// in src/ops/dropout.cc), for an op that computes z inside a fused pass: ops::add_dropout_and_layer_norm
// (src/ops/layer_norm.cc), a pre-norm layer's residual stream and the LayerNorm that reads it.
#pragma once

#include "kernels/kernels.h"
#include "tfm/tensor.h"

namespace tfm::ops {

// Records on z (x's shape) its node: dx = dz; dr = dropout(dz) with drop's mask (the forward's), or
// dr = dz when drop is null (no active dropout).
void record_add_dropout(Tensor& z, const Tensor& x, const Tensor& r, const kernels::DropoutSpec* drop);

}  // namespace tfm::ops
