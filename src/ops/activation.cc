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
  const char* name() const override { return activation_name(kind); }
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

Activation activation_from_string(const std::string& name) {
  if (name == "relu") return Activation::RELU;
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_tanh") return Activation::GELU_TANH;
  if (name == "glu") return Activation::GLU;
  if (name == "geglu") return Activation::GEGLU;
  if (name == "swiglu") return Activation::SWIGLU;
  throw std::invalid_argument("unknown activation " + quote_name(name) +
                              " (expected relu, gelu, gelu_tanh, glu, geglu or swiglu)");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::RELU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELU_TANH: return "gelu_tanh";
    case Activation::GLU: return "glu";
    case Activation::GEGLU: return "geglu";
    case Activation::SWIGLU: return "swiglu";
  }
  return "?";
}

Tensor activation(const Tensor& x, Activation kind) {
  check_float(x, "activation", "input");
  check(x.dim() >= 1, "activation: input must have at least one dimension");
  const bool gated = activation_is_gated(kind);
  int64_t F = x.size(-1);
  if (gated) {
    check(F % 2 == 0, std::string("activation ") + activation_name(kind) + ": last dim of " + describe(x) +
                          " must be even (two halves [a | b])");
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
