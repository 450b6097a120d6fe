// src/ops/linear_activation.cc — the FFN input projection fused with its bias and activation:
// y = act(x·Wᵀ + b) with the GEMM writing x·Wᵀ and one pass adding b and applying act in place
// (kernels::bias_activation_forward), and with ReLU in training also the FFN's inner dropout
// (kernels::bias_relu_dropout_forward); and the whole feed-forward for bfloat16 training, which keeps the
// hidden activation the second Linear multiplies in bfloat16 only. Contracts and backwards in
// ops/linear_activation.h; the Linear pieces (checks, product, backward) are ops/linear_impl.h's.
#include "ops/linear_activation.h"

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"
#include "ops/bf16_linear.h"
#include "ops/check.h"
#include "ops/linear_impl.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/linear.h"

namespace tfm::ops {
namespace {

// inputs = {x (N, in), weight (F, in), bias (F) or undefined}; y (N, F) = relu(x·Wᵀ + b), kept
// detached (no reference cycle through its grad_fn).
// dz = y ≤ 0 ? 0 : dy  (threshold_backward on relu's output, as PyTorch: y ≤ 0 ⇔ z ≤ 0, and a NaN z gives a NaN
// y, which passes dy), then the Linear backward of dz.
struct LinearReluNode : Node {
  bool has_bias = false;
  Bf16Operands bf16;  // set when the forward ran under Autocast(BFLOAT16)
  Tensor y;  // (N, F)
  const char* name() const override { return "linear_relu"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    const int64_t F = y.size(-1), N = y.numel() / std::max<int64_t>(F, 1);
    Tensor dz = Tensor::empty(y.shape());
    kernels::activation_backward(Activation::RELU, dy.data(), y.data(), dz.data(), N, F);
    linear_backward(dz.data(), inputs[0], inputs[1], has_bias, din, bf16);
  }
};

// inputs as LinearReluNode, for GELU and GELU_TANH in training: the forward ran ops::linear's product
// z = x·Wᵀ + b (kernels::gemm_bias: x·Wᵀ summed onto rows preset to b), then y = act(z) and d = act'(z) in one pass
// (kernels::activation_forward_grad), keeping d instead of z. dz = dy ⊙ d is bitwise activation_backward's
// dx from z, then the Linear backward: activation(linear(x, W, b)) bit for bit, without evaluating act' again.
struct LinearActivationNode : Node {
  Activation kind = Activation::GELU;
  bool has_bias = false;
  Bf16Operands bf16;  // set when the forward ran under Autocast(BFLOAT16)
  Tensor d;        // (N, F) act'(z)
  const char* name() const override { return enum_name(kind).data(); }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    Tensor dz = Tensor::empty(d.shape());
    kernels::mul_forward(dy.data(), d.data(), dz.data(), d.numel());
    linear_backward(dz.data(), inputs[0], inputs[1], has_bias, din, bf16);
  }
};

// inputs as LinearReluNode; y (N, F) = dropout(relu(x·Wᵀ + b)) kept detached.
// dz = y ≤ 0 ? 0 : dy/(1 − p)  (kernels::relu_dropout_backward), then the Linear backward of dz.
struct LinearReluDropoutNode : Node {
  bool has_bias = false;
  Bf16Operands bf16;  // set when the forward ran under Autocast(BFLOAT16)
  float p = 0.0f;
  Tensor y;  // (N, F)
  const char* name() const override { return "linear_relu_dropout"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    Tensor dz = Tensor::empty(y.shape());
    kernels::relu_dropout_backward(dy.data(), y.data(), dz.data(), y.numel(), p);
    linear_backward(dz.data(), inputs[0], inputs[1], has_bias, din, bf16);
  }
};

// The feed-forward's nodes under Autocast(BFLOAT16): inputs = {x (N, in), w1 (Fin, in), b1 (Fin) or undefined,
// w2 (out, F), b2 (out) or undefined}, first = the first Linear's bfloat16 operands (W1's copy and bf16(x)),
// w2_16 the second weight's copy the forward used, and y16 = bf16(y) for
// the hidden y (N, F) the second Linear multiplies: N·F bfloat16 values in the bytes of a float tensor (storage
// from the block cache, reused step to step). Backwards as in linear_activation.h (feed_forward).
struct FeedForwardBf16Node : Node {
  bool has_b1 = false, has_b2 = false;
  int64_t N = 0, F = 0;
  Bf16Operands first;
  Bf16Weight w2_16;
  Tensor y16;

  const uint16_t* hidden() const { return reinterpret_cast<const uint16_t*>(y16.data()); }
  // The second Linear's backward: linear_backward's bf16 branch with the kept y16 as dW2's operand instead of
  // a fresh rounding of its input. Returns dy (N, F) = bf16(g)·w2_16, or an undefined tensor when nothing
  // before the second Linear needs a gradient.
  Tensor second_linear_backward(const Tensor& g, const std::vector<Tensor*>& din) const {
    const int64_t out = inputs[3].size(0);
    const bool dy_needed = din[0] || din[1] || din[2];
    Tensor* db2 = has_b2 ? din[4] : nullptr;  // db2 (out) += Σ_rows g
    std::unique_ptr<uint16_t[]> g16;
    if (din[3] || dy_needed) {
      g16 = round_output_grad(g.data(), N, out, db2);
    } else if (db2) {
      if (!db2->defined()) *db2 = Tensor::zeros({out});
      kernels::bias_grad(g.data(), db2->data(), N, out);
    }
    if (Tensor* slot = din[3]) {  // dW2 (out, F) += bf16(g)ᵀ (out, N) · y16 (N, F)
      const float beta = slot->defined() ? 1.0f : 0.0f;
      if (!slot->defined()) *slot = Tensor::empty(inputs[3].shape());
      kernels::gemm_bf16(true, false, out, F, N, g16.get(), out, hidden(), F, beta, slot->data(), F);
    }
    if (!dy_needed) return Tensor();
    Tensor dy = Tensor::empty({N, F});
    kernels::gemm_bf16(false, false, N, F, out, g16.get(), out, w2_16->data(), F, 0.0f, dy.data(), F);
    return dy;
  }

  // The first Linear's backward when dx or dW1 is needed, from dz rounded by `round(db, dz16)` straight from dy,
  // in the pass that sums db1 (into db: db1's slot, zeroed if empty, or a scratch when there is no bias); dy is
  // freed before the products.
  template <class Round>
  void first_linear_backward(Tensor& dy, const std::vector<Tensor*>& din, Round round) const {
    float* db = nullptr;
    std::vector<float> unused;  // the sums' place when the first Linear has no bias
    if (Tensor* db1 = has_b1 ? din[2] : nullptr) {
      if (!db1->defined()) *db1 = Tensor::zeros({F});
      db = db1->data();
    } else {
      unused.assign(static_cast<size_t>(F), 0.0f);
      db = unused.data();
    }
    std::unique_ptr<uint16_t[]> dz16(new uint16_t[static_cast<size_t>(N * F)]);
    round(db, dz16.get());
    dy = Tensor();
    linear_backward_bf16(dz16.get(), inputs[0], inputs[1], din[0], din[1], first);
  }
};

// ReLU, with dropout (p > 0) or without (p = 0): y16 alone. dz = y ≤ 0 ? 0 : dy/(1 − p) (y read from y16), then
// the first Linear.
struct FeedForwardReluBf16Node : FeedForwardBf16Node {
  float p = 0.0f;
  const char* name() const override { return "feed_forward_relu_bf16"; }
  void backward(const Tensor& g, const std::vector<Tensor*>& din) override {
    Tensor dy = second_linear_backward(g, din);
    if (!dy.defined()) return;
    if (!din[0] && !din[1]) {  // db1 alone
      kernels::relu_dropout_backward_bf16(dy.data(), hidden(), dy.data(), N * F, p);
      linear_backward(dy.data(), inputs[0], inputs[1], has_b1, {nullptr, nullptr, din[2]}, first);
      return;
    }
    // dz rounded straight from dy and y16 (its float32 values never stored), db1 summed in the same pass.
    first_linear_backward(dy, din, [&](float* db, uint16_t* dz16) {
      kernels::relu_dropout_backward_bf16_round(dy.data(), hidden(), p, db, dz16, N, F);
    });
  }
};

// Any other activation: y16 and, in float32, what the activation's derivative needs: for a plain kind (GELU,
// GELU_TANH) d = act'(z) (N, F) from the forward's one evaluation (kernels::activation_forward_grad), for a gated
// kind the pre-activation z (N, Fin). dy masked as the dropout's backward does it (when it dropped), dz = act'(z)·dy
// (dy ⊙ d: bitwise activation_backward's, a NaN's sign aside), then the first Linear.
struct FeedForwardActivationBf16Node : FeedForwardBf16Node {
  Activation kind = Activation::GELU;
  kernels::DropoutSpec drop{0.0f, 0, 0};  // p = 0: no dropout ran
  Tensor d;                               // plain kinds
  Tensor z;                               // gated kinds
  const char* name() const override { return "feed_forward_activation_bf16"; }
  void backward(const Tensor& g, const std::vector<Tensor*>& din) override {
    Tensor dy = second_linear_backward(g, din);
    if (!dy.defined()) return;
    if (drop.p > 0.0f) kernels::dropout_forward(dy.data(), dy.data(), N * F, drop.p, drop.seed, drop.offset);
    if (d.defined() && (din[0] || din[1])) {  // dz = dy ⊙ d rounded in the pass that sums db1, never stored
      first_linear_backward(dy, din, [&](float* db, uint16_t* dz16) {
        kernels::mul_bias_grad_bf16(dy.data(), d.data(), db, dz16, N, F);
      });
      return;
    }
    Tensor dz = dy;  // a plain kind's dz in place of dy; a gated kind's has twice dy's columns
    if (d.defined()) {
      kernels::mul_forward(dy.data(), d.data(), dz.data(), N * F);
    } else {
      dz = Tensor::empty(z.shape());
      kernels::activation_backward(kind, dy.data(), z.data(), dz.data(), N, F);
    }
    dy = Tensor();
    linear_backward(dz.data(), inputs[0], inputs[1], has_b1, {din[0], din[1], din[2]}, first);
  }
};

// A gated kind's weight (Fin, in) holds two halves [a | b] of rows: Fin must be even.
void check_gated_rows(Activation kind, const Tensor& weight) {
  check(!activation_is_gated(kind) || weight.size(0) % 2 == 0, [&] {
    return "linear_activation " + std::string(enum_name(kind)) + ": weight " + describe(weight) +
           " must have an even number of rows (two halves [a | b])";
  });
}

// The feed-forward's composition, which feed_forward runs whenever it does not fuse.
Tensor composed_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                             Activation act, float p, bool training, Generator& gen) {
  if (act == Activation::RELU) return linear(linear_relu_dropout(x, w1, b1, p, training, gen), w2, b2);
  return linear(dropout(linear_activation(x, w1, b1, act), p, training, gen), w2, b2);
}

}  // namespace

Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    Activation act, float p, bool training, Generator& gen) {
  const bool drops = training && p > 0.0f && p < 1.0f;
  Bf16Weight w1_16;
  // p = 1 in training zeroes the hidden: the composition.
  if (!(training && p >= 1.0f) && needs_grad({&x, &w1, &b1, &w2, &b2})) {
    check_linear_args("linear_activation", x, w1, b1);  // before autocast_weight reads w1's shape
    w1_16 = autocast_weight(w1);
  }
  if (!w1_16) return composed_feed_forward(x, w1, b1, w2, b2, act, p, training, gen);

  // z (N, Fin) = bf16(x)·w1_16ᵀ + b1 (linear_matmul); y (N, F) = act(z), then the dropout's mask and draw: the
  // composition's ops::linear, ops::activation and ops::dropout (ReLU: linear_relu_dropout's one pass after the GEMM).
  const bool gated = activation_is_gated(act);
  const int64_t Fin = w1.size(0), N = linear_rows(x), F = gated ? Fin / 2 : Fin;
  check_gated_rows(act, w1);
  Shape zs = x.shape(), ys = x.shape();
  zs.back() = Fin;
  ys.back() = F;
  Tensor z = Tensor::empty(zs), y, d;
  Tensor y16 = Tensor::empty({(N * F + 1) / 2});  // bf16(y), the copy the node keeps
  uint16_t* yb = reinterpret_cast<uint16_t*>(y16.data());
  bool rounded = false;  // y16 written already (y's float32 values never stored)
  kernels::DropoutSpec drop{0.0f, 0, 0};
  Bf16Operands first;  // W1's copy (w1_16 again) and bf16(x), kept for the first Linear's backward
  if (act == Activation::RELU) {
    first = linear_matmul(N, x.data(), w1, nullptr, z.data(), /*may_pack=*/false);
    const float* bias = b1.defined() ? b1.data() : nullptr;
    if (drops) {
      drop = {p, gen.seed, gen.take(static_cast<uint64_t>(z.numel()))};
      kernels::bias_relu_dropout_forward(z.data(), bias, z.data(), N, F, drop);
    } else {  // relu alone: the same bits as the p = 0 dropout pass, no draw taken
      kernels::bias_activation_forward(Activation::RELU, z.data(), bias, z.data(), N, F);
    }
    y = z;
  } else {
    first = linear_matmul(N, x.data(), w1, b1.defined() ? b1.data() : nullptr, z.data(), /*may_pack=*/false);
    if (gated) {
      y = Tensor::empty(ys);
      kernels::activation_forward(act, z.data(), y.data(), N, F);
    } else if (!drops) {  // y16 = bf16(act(z)) and d = act'(z), kept for the backward instead of z, in one pass
      d = Tensor::empty(zs);
      kernels::activation_forward_grad_bf16(act, z.data(), yb, d.data(), N, F);
      rounded = true;
      y = z;  // for its shape
    } else {  // y over z, and d = act'(z)
      d = Tensor::empty(zs);
      kernels::activation_forward_grad(act, z.data(), z.data(), d.data(), N, F);
      y = z;
    }
    if (drops) {
      drop = {p, gen.seed, gen.take(static_cast<uint64_t>(y.numel()))};
      kernels::dropout_forward(y.data(), y.data(), y.numel(), drop.p, drop.seed, drop.offset);
    }
  }
  // out (N, out) = y16 · w2_16ᵀ + b2: ops::linear's bf16 product, with y rounded once, whole, into the copy the
  // node keeps (the same values, panels and primitives as rounding it panel by panel).
  const auto [out, F2] = check_linear_args("linear", y, w2, b2);
  Bf16Weight w2_16 = autocast_weight(w2);
  if (!rounded) kernels::convert_to_bf16(y.data(), N * F, yb);
  Shape os = x.shape();
  os.back() = out;
  Tensor o = Tensor::empty(os);
  kernels::gemm_bf16(false, true, N, out, F2, yb, F2, w2_16->data(), F2, 0.0f, o.data(), out,
                     b2.defined() ? b2.data() : nullptr);
  std::shared_ptr<FeedForwardBf16Node> node;
  if (act == Activation::RELU) {
    auto relu = std::make_shared<FeedForwardReluBf16Node>();
    relu->p = drop.p;
    node = relu;
  } else {
    auto other = std::make_shared<FeedForwardActivationBf16Node>();
    other->kind = act;
    other->drop = drop;
    if (gated) {
      other->z = std::move(z);
    } else {
      other->d = std::move(d);
    }
    node = other;
  }
  node->has_b1 = b1.defined();
  node->has_b2 = b2.defined();
  node->N = N;
  node->F = F;
  node->first = std::move(first);
  node->w2_16 = std::move(w2_16);
  node->y16 = std::move(y16);
  node->inputs = {x, w1, b1, w2, b2};
  record(o, node);
  return o;
}

Tensor linear_relu_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, float p, bool training,
                           Generator& gen) {
  if (!training || !(p > 0.0f && p < 1.0f))
    return dropout(linear_activation(x, weight, bias, Activation::RELU), p, training, gen);
  const int64_t out = check_linear_args("linear_relu_dropout", x, weight, bias).first;
  const int64_t N = linear_rows(x);
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = Tensor::empty(ys);  // x·Wᵀ (Autocast(BFLOAT16): bf16(x)·bf16(W)ᵀ), then dropout(relu(· + b)) in place
  Bf16Operands bf16 = linear_matmul(N, x.data(), weight, nullptr, y.data(), /*may_pack=*/false);
  const uint64_t offset = gen.take(static_cast<uint64_t>(y.numel()));  // ops::dropout's draw
  kernels::bias_relu_dropout_forward(y.data(), bias.defined() ? bias.data() : nullptr, y.data(), N, out,
                                     {p, gen.seed, offset});
  if (needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearReluDropoutNode>();
    node->bf16 = std::move(bf16);
    node->has_bias = bias.defined();
    node->p = p;
    node->y = y.detach();
    node->inputs = {x, weight, bias};
    record(y, node);
  }
  return y;
}

Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation kind) {
  const int64_t out = check_linear_args("linear_activation", x, weight, bias).first;
  const bool gated = activation_is_gated(kind);
  check_gated_rows(kind, weight);
  const bool grad = needs_grad({&x, &weight, &bias});
  if (grad && gated) return activation(linear(x, weight, bias), kind);

  const int64_t N = linear_rows(x), F = gated ? out / 2 : out;
  Shape zs = x.shape();
  zs.back() = out;
  if (grad && kind != Activation::RELU) {  // GELU, GELU_TANH: LinearActivationNode
    Tensor y = Tensor::empty(zs), d = Tensor::empty(zs);
    Bf16Operands bf16 = linear_matmul(N, x.data(), weight, bias.defined() ? bias.data() : nullptr, y.data(),
                                      /*may_pack=*/false);
    kernels::activation_forward_grad(kind, y.data(), y.data(), d.data(), N, F);
    auto node = std::make_shared<LinearActivationNode>();
    node->kind = kind;
    node->bf16 = std::move(bf16);
    node->has_bias = bias.defined();
    node->d = std::move(d);
    node->inputs = {x, weight, bias};
    record(y, node);
    return y;
  }
  Tensor z = Tensor::empty(zs);  // (N, Fin) = x·Wᵀ (K = 0 gives zeros, kernels::gemm's contract)
  Bf16Operands bf16 = linear_matmul(N, x.data(), weight, nullptr, z.data(), /*may_pack=*/!grad);
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
    node->bf16 = std::move(bf16);
    node->has_bias = bias.defined();
    node->y = y.detach();
    node->inputs = {x, weight, bias};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
