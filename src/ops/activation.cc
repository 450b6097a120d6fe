// src/ops/activation.cc — plain and gated activations (relu, gelu, gelu_tanh, glu, geglu, swiglu).
#include "tfm/ops/activation.h"

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"
#include "quote.h"

namespace tfm::ops {

namespace {

struct ActivationNode : Node {
  Activation kind = Activation::RELU;
  const char* name() const override { return enum_name(kind).data(); }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    const Tensor& x = inputs[0];
    const int64_t F = dy.size(-1), N = dy.numel() / std::max<int64_t>(F, 1);
    Tensor dx = Tensor::empty(x.shape());
    kernels::activation_backward(kind, dy.data(), x.data(), dx.data(), N, F);
    accumulate_grad(din[0], dx);
  }
};

}  // namespace

Tensor activation(const Tensor& x, Activation kind) {
  check_float(x, "activation", "input");
  check(x.dim() >= 1, "activation: input must have at least one dimension");
  const bool gated = activation_is_gated(kind);
  int64_t F = x.size(-1);
  if (gated) {
    check(F % 2 == 0, [&] {
      return "activation " + std::string(enum_name(kind)) + ": last dim of " + describe(x) +
             " must be even (two halves [a | b])";
    });
    F /= 2;
  }
  Shape ys = x.shape();
  ys.back() = F;
  Tensor y = Tensor::empty(ys);
  const int64_t N = y.numel() / std::max<int64_t>(F, 1);
  kernels::activation_forward(kind, x.data(), y.data(), N, F);
  if (needs_grad({&x})) {
    auto node = std::make_shared<ActivationNode>();
    node->kind = kind;
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
