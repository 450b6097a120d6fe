// src/ops/linear_activation.cc — the FFN input projection fused with its bias and activation:
// y = act(x·Wᵀ + b) with the GEMM writing x·Wᵀ and one pass adding b and applying act in place
// (kernels::bias_activation_forward), and with ReLU in training also the FFN's inner dropout
// (kernels::bias_relu_dropout_forward). Contracts and backwards in ops/linear_activation.h.
#include "ops/linear_activation.h"

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/kernels.h"
#include "ops/bf16_linear.h"
#include "ops/check.h"
#include "ops/packed_linear.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/linear.h"

namespace tfm::ops {
namespace {

// inputs = {x (N, in), weight (F, in), bias (F) or undefined}; y (N, F) = relu(x·Wᵀ + b), kept
// detached (no reference cycle through its grad_fn).
// dz = dy ⊙ [y > 0]  (= relu'(z) since y > 0 ⇔ z > 0, NaN included: relu(NaN) = 0 here), then the
// Linear backward of dz.
struct LinearReluNode : Node {
  bool has_bias = false;
  Bf16Weight w16;  // set when the forward ran under Autocast(BFLOAT16)
  Tensor y;  // (N, F)
  const char* name() const override { return "linear_relu"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    const int64_t F = y.size(-1), N = y.numel() / std::max<int64_t>(F, 1);
    Tensor dz = Tensor::empty(y.shape());
    kernels::activation_backward(Activation::RELU, dy.data(), y.data(), dz.data(), N, F);
    linear_backward(dz.data(), inputs[0], inputs[1], has_bias, din, w16.get());
  }
};

// inputs as LinearReluNode; y (N, F) = dropout(relu(x·Wᵀ + b)) kept detached.
// dz = y > 0 ? dy/(1 − p) : 0  (kernels::relu_dropout_backward), then the Linear backward of dz.
struct LinearReluDropoutNode : Node {
  bool has_bias = false;
  Bf16Weight w16;  // set when the forward ran under Autocast(BFLOAT16)
  float p = 0.0f;
  Tensor y;  // (N, F)
  const char* name() const override { return "linear_relu_dropout"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    Tensor dz = Tensor::empty(y.shape());
    kernels::relu_dropout_backward(dy.data(), y.data(), dz.data(), y.numel(), p);
    linear_backward(dz.data(), inputs[0], inputs[1], has_bias, din, w16.get());
  }
};

}  // namespace

Tensor linear_relu_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, float p, bool training,
                           Generator& gen) {
  if (!training || !(p > 0.0f && p < 1.0f))
    return dropout(linear_activation(x, weight, bias, Activation::RELU), p, training, gen);
  const auto [out, in] = check_linear_args("linear_relu_dropout", x, weight, bias);
  const int64_t N = linear_rows(x);
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = Tensor::empty(ys);  // x·Wᵀ, then dropout(relu(· + b)) in place
  Bf16Weight w16 = autocast_weight(weight);  // Autocast(BFLOAT16): bf16(x)·bf16(W)ᵀ
  if (w16) linear_forward_bf16(N, in, out, x.data(), *w16, nullptr, y.data());
  else kernels::gemm(false, true, N, out, in, 1.0f, x.data(), in, weight.data(), in, 0.0f, y.data(), out);
  const uint64_t offset = gen.take(static_cast<uint64_t>(y.numel()));  // ops::dropout's draw
  kernels::bias_relu_dropout_forward(y.data(), bias.defined() ? bias.data() : nullptr, y.data(), N, out,
                                     {p, gen.seed, offset});
  if (needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearReluDropoutNode>();
    node->w16 = std::move(w16);
    node->has_bias = bias.defined();
    node->p = p;
    node->y = y.detach();
    node->inputs = {x, weight, bias};
    record(y, node);
  }
  return y;
}

Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation kind) {
  const auto [out, in] = check_linear_args("linear_activation", x, weight, bias);
  const bool gated = activation_is_gated(kind);
  check(!gated || out % 2 == 0, "linear_activation " + std::string(enum_name(kind)) + ": weight " +
                                    describe(weight) + " must have an even number of rows (two halves [a | b])");
  const bool grad = needs_grad({&x, &weight, &bias});
  if (grad && kind != Activation::RELU) return activation(linear(x, weight, bias), kind);

  const int64_t N = linear_rows(x), F = gated ? out / 2 : out;
  Shape zs = x.shape();
  zs.back() = out;
  Tensor z = Tensor::empty(zs);  // (N, Fin) = x·Wᵀ (K = 0 gives zeros, kernels::gemm's contract)
  Bf16Weight w16;
  if (grad || !linear_forward_packed(N, x.data(), weight, nullptr, z.data())) {  // InferenceMode
    w16 = autocast_weight(weight);  // Autocast(BFLOAT16): bf16(x)·bf16(W)ᵀ
    if (w16) linear_forward_bf16(N, in, out, x.data(), *w16, nullptr, z.data());
    else kernels::gemm(false, true, N, out, in, 1.0f, x.data(), in, weight.data(), in, 0.0f, z.data(), out);
  }
  const float* b = bias.defined() ? bias.data() : nullptr;
  Tensor y = z;  // plain activations in place
  if (gated) {
    Shape ys = x.shape();
    ys.back() = F;
    y = Tensor::empty(ys);
  }
  kernels::bias_activation_forward(kind, z.data(), b, y.data(), N, F);
  if (grad) {  // ReLU only (above)
    auto node = std::make_shared<LinearReluNode>();
    node->w16 = std::move(w16);
    node->has_bias = bias.defined();
    node->y = y.detach();
    node->inputs = {x, weight, bias};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
