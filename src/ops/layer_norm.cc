// src/ops/layer_norm.cc — LayerNorm (and residual-add + LayerNorm) forward and backward.
#include "tfm/ops/layer_norm.h"

#include <optional>

#include "kernels/kernels.h"
#include "ops/add_dropout_node.h"
#include "ops/check.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"

namespace tfm::ops {
namespace {

// inputs: x (N, D), weight, bias[, r]. The normalized input z is inputs[0], or saved_sum = x + r
// (x + dropout(r)) when fused; the gradient to x and r is then the same dz (r's masked by the dropout).
// The backward recomputes each row's mean and rstd from z in double (kernels.h says why), so
// nothing but z is saved.
struct LayerNormNode : Node {
  float eps = 0;
  bool fused = false;
  std::optional<kernels::DropoutSpec> r_drop;  // fused with dropout on r: dr = dropout(dz), same mask
  const char* name() const override { return fused ? "add_layer_norm" : "layer_norm"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    const Tensor& z = fused ? saved_sum : inputs[0];
    const Tensor& w = inputs[1];
    const int64_t D = w.numel(), N = z.numel() / D;
    Tensor* dw = din[1];
    Tensor* db = din[2];
    if (dw && !dw->defined()) *dw = Tensor::zeros(w.shape());
    if (db && !db->defined()) *db = Tensor::zeros({D});
    Tensor dw_scratch = dw ? Tensor() : Tensor::zeros({D});
    // A plain LayerNorm whose input's gradient already holds another branch's part (the residual
    // stream of a pre-norm layer) adds its dx into it in the kernel's pass: bitwise accumulate_grad's
    // add, without a dz tensor and a second pass.
    const bool into_slot = !fused && din[0] && din[0]->defined() && din[0]->shape() == z.shape();
    Tensor dz = into_slot ? *din[0] : Tensor::empty(z.shape());
    kernels::layer_norm_backward(dy.data(), z.data(), w.data(), dz.data(), dw ? dw->data() : dw_scratch.data(),
                                 db ? db->data() : nullptr, N, D, eps, into_slot);
    if (din[0] && !into_slot) accumulate_grad(din[0], dz);
    if (fused && din[3]) {
      if (r_drop) {
        Tensor dr = Tensor::empty(dz.shape());
        kernels::dropout_forward(dz.data(), dr.data(), dz.numel(), r_drop->p, r_drop->seed, r_drop->offset);
        accumulate_grad(din[3], dr);
      } else {
        accumulate_grad(din[3], dz);
      }
    }
  }
  Tensor saved_sum;
};

void check_args(const char* op, const Tensor& x, const Tensor* r, const Tensor& weight, const Tensor& bias) {
  check_float(x, op, "input");
  check_float(weight, op, "weight");
  const int64_t D = weight.numel();
  check(weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == D, [&] {
    return std::string(op) + ": input " + describe(x) + " does not match normalized shape (" + std::to_string(D) + ",)";
  });
  if (bias.defined()) check_shape(bias, {D}, op, "bias");
  if (r) {
    check_float(*r, op, "residual");
    check_shape(*r, x.shape(), op, "residual");
  }
}

// The backward of y = layer_norm(z) recorded on y (z a plain input, not a fused sum).
void record_layer_norm(Tensor& y, const Tensor& z, const Tensor& weight, const Tensor& bias, float eps) {
  auto node = std::make_shared<LayerNormNode>();
  node->eps = eps;
  node->inputs = {z, weight, bias};
  record(y, node);
}

Tensor layer_norm_impl(const Tensor& x, const Tensor* r, const Tensor& weight, const Tensor& bias, float eps,
                       const kernels::DropoutSpec* r_drop = nullptr) {
  check_args(r ? "add_layer_norm" : "layer_norm", x, r, weight, bias);
  const int64_t D = weight.numel();
  const int64_t N = x.numel() / std::max<int64_t>(D, 1);
  Tensor y = Tensor::empty(x.shape());
  const bool grad = r ? needs_grad({&x, r, &weight, &bias}) : needs_grad({&x, &weight, &bias});
  const float* b = bias.defined() ? bias.data() : nullptr;
  Tensor z = x;  // the normalized input: x, or the sum x + r (kept for the backward when training)
  if (r) {
    z = grad ? Tensor::empty(x.shape()) : Tensor();
    kernels::add_layer_norm_forward(x.data(), r->data(), weight.data(), b, grad ? z.data() : nullptr, y.data(),
                                    nullptr, nullptr, N, D, eps, r_drop);
  } else {
    kernels::layer_norm_forward(x.data(), weight.data(), b, y.data(), nullptr, nullptr, N, D, eps);
  }
  if (grad && !r) record_layer_norm(y, x, weight, bias, eps);
  if (grad && r) {
    auto node = std::make_shared<LayerNormNode>();
    node->eps = eps;
    if (r_drop) node->r_drop = *r_drop;
    node->fused = true;
    node->saved_sum = z;
    node->inputs = {x, weight, bias, *r};
    record(y, node);
  }
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  return layer_norm_impl(x, nullptr, weight, bias, eps);
}
Tensor add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, float eps) {
  return layer_norm_impl(x, &r, weight, bias, eps);
}
Tensor add_dropout_layer_norm(const Tensor& x, const Tensor& r, float p, bool training, Generator& gen,
                              const Tensor& weight, const Tensor& bias, float eps) {
  // Only a real dropout (training, 0 < p < 1) is fused; the rest is what ops::dropout does.
  if (!training || !(p > 0.0f && p < 1.0f)) return add_layer_norm(x, dropout(r, p, training, gen), weight, bias, eps);
  check_float(r, "dropout", "input");
  const kernels::DropoutSpec spec{p, gen.seed, gen.take(static_cast<uint64_t>(r.numel()))};
  return layer_norm_impl(x, &r, weight, bias, eps, &spec);
}

std::pair<Tensor, Tensor> add_dropout_and_layer_norm(const Tensor& x, const Tensor& r, float p, bool training,
                                                     Generator& gen, const Tensor& weight, const Tensor& bias,
                                                     float eps) {
  check_args("add_dropout_and_layer_norm", x, &r, weight, bias);
  const int64_t D = weight.numel();
  const int64_t N = x.numel() / std::max<int64_t>(D, 1);
  // Only a real dropout (training, 0 < p < 1) draws, as ops::add_dropout.
  const bool drop = training && p > 0.0f && p < 1.0f;
  // The generator is read only when it draws: out of training it may be gone (a model built with a temporary one).
  kernels::DropoutSpec spec{p, 0, 0};
  if (drop) spec = {p, gen.seed, gen.take(static_cast<uint64_t>(r.numel()))};
  Tensor z = Tensor::empty(x.shape()), y = Tensor::empty(x.shape());
  kernels::add_layer_norm_forward(x.data(), r.data(), weight.data(), bias.defined() ? bias.data() : nullptr, z.data(),
                                  y.data(), nullptr, nullptr, N, D, eps, drop ? &spec : nullptr);
  if (needs_grad({&x, &r})) record_add_dropout(z, x, r, drop ? &spec : nullptr);
  if (needs_grad({&z, &weight, &bias})) record_layer_norm(y, z, weight, bias, eps);
  return {z, y};
}

}  // namespace tfm::ops
