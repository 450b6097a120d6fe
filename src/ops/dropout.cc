// src/ops/dropout.cc — dropout with a counter-based mask, recomputed in the backward.
#include "tfm/ops/dropout.h"

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"
#include "tfm/ops/elementwise.h"

namespace tfm::ops {
namespace {

// y = x ⊙ keep / (1 − p);  dx = dy ⊙ keep / (1 − p)  (kernels::dropout_forward, mask recomputed).
void apply_mask(const float* in, float* out, int64_t n, float p, uint64_t seed, uint64_t offset) {
  kernels::dropout_forward(in, out, n, p, seed, offset);
}

struct DropoutNode : Node {
  float p = 0;
  uint64_t seed = 0, offset = 0;
  const char* name() const override { return "dropout"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    Tensor dx = Tensor::empty(dy.shape());
    apply_mask(dy.data(), dx.data(), dy.numel(), p, seed, offset);
    accumulate_grad(din[0], dx);
  }
};

// y = x + dropout(r): dx = dy, dr = dropout(dy) with the forward's mask.
struct AddDropoutNode : Node {
  float p = 0;
  uint64_t seed = 0, offset = 0;
  const char* name() const override { return "add_dropout"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], dy);
    if (din[1]) {
      Tensor dr = Tensor::empty(dy.shape());
      apply_mask(dy.data(), dr.data(), dy.numel(), p, seed, offset);
      accumulate_grad(din[1], dr);
    }
  }
};

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  check(p >= 0.0f && p <= 1.0f, "dropout: probability must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0.0f) return x;
  check_float(x, "dropout", "input");
  if (p == 1.0f) return Tensor::zeros(x.shape());  // PyTorch: everything dropped
  const uint64_t offset = gen.take(static_cast<uint64_t>(x.numel()));
  Tensor y = Tensor::empty(x.shape());
  apply_mask(x.data(), y.data(), x.numel(), p, gen.seed, offset);
  if (needs_grad({&x})) {
    auto node = std::make_shared<DropoutNode>();
    node->p = p;
    node->seed = gen.seed;
    node->offset = offset;
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

Tensor add_dropout(const Tensor& x, const Tensor& r, float p, bool training, Generator& gen) {
  if (!training || !(p > 0.0f && p < 1.0f)) return add(x, dropout(r, p, training, gen));
  check_float(x, "add_dropout", "x");
  check_float(r, "add_dropout", "r");
  check_shape(r, x.shape(), "add_dropout", "r");
  const uint64_t offset = gen.take(static_cast<uint64_t>(r.numel()));
  Tensor y = Tensor::empty(x.shape());
  kernels::add_dropout_forward(x.data(), r.data(), y.data(), x.numel(), p, gen.seed, offset);
  if (needs_grad({&x, &r})) {
    auto node = std::make_shared<AddDropoutNode>();
    node->p = p;
    node->seed = gen.seed;
    node->offset = offset;
    node->inputs = {x, r};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
