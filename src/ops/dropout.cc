// src/ops/dropout.cc — dropout and drop_path with counter-based masks, recomputed in the backward.
#include "tfm/ops/dropout.h"

#include "kernels/kernels.h"
#include "ops/add_dropout_node.h"
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

// y = x + dropout(r): dx = dy, dr = dropout(dy) with the forward's mask (masked), or dr = dy (not
// masked: no active dropout).
struct AddDropoutNode : Node {
  float p = 0;
  uint64_t seed = 0, offset = 0;
  bool masked = true;
  const char* name() const override { return "add_dropout"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], dy);
    if (din[1] && !masked) accumulate_grad(din[1], dy);
    if (din[1] && masked) {
      Tensor dr = Tensor::empty(dy.shape());
      apply_mask(dy.data(), dr.data(), dy.numel(), p, seed, offset);
      accumulate_grad(din[1], dr);
    }
  }
};

// A per-sample scale: y = x ⊙ s_j, j the element's index along the sample dim, s_j = keep_j/(1 − p).
// x viewed as (outer, n, inner) with n samples. y may alias x.
void apply_sample_mask(const float* in, float* out, int64_t outer, int64_t n, int64_t inner, float p, uint64_t seed,
                       uint64_t offset) {
  const float scale = kernels::dropout_scale(p);
  for (int64_t s = 0; s < n; ++s) {
    const float m = kernels::dropout_keep(seed, offset + static_cast<uint64_t>(s), p) ? scale : 0.0f;
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t base = (o * n + s) * inner;
      for (int64_t i = 0; i < inner; ++i) out[base + i] = in[base + i] * m;
    }
  }
}

// y = x ⊙ m/(1 − p) per sample: dx = dy ⊙ m/(1 − p).
struct DropPathNode : Node {
  float p = 0;
  uint64_t seed = 0, offset = 0;
  int64_t outer = 0, n = 0, inner = 0;
  const char* name() const override { return "drop_path"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    Tensor dx = Tensor::empty(dy.shape());
    apply_sample_mask(dy.data(), dx.data(), outer, n, inner, p, seed, offset);
    accumulate_grad(din[0], dx);
  }
};

}  // namespace

Tensor drop_path(const Tensor& x, float p, int64_t sample_dim, bool training, Generator& gen) {
  check(p >= 0.0f && p < 1.0f, [&] { return "drop_path: probability must be in [0, 1), got " + std::to_string(p); });
  if (!training || p == 0.0f) return x;
  check_float(x, "drop_path", "input");
  check(sample_dim >= 0 && sample_dim < x.dim(), [&] {
    return "drop_path: sample dim " + std::to_string(sample_dim) + " out of range for a tensor of rank " +
           std::to_string(x.dim());
  });
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < sample_dim; ++d) outer *= x.size(d);
  for (int64_t d = sample_dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(sample_dim);
  const uint64_t offset = gen.take(static_cast<uint64_t>(n));
  Tensor y = Tensor::empty(x.shape());
  apply_sample_mask(x.data(), y.data(), outer, n, inner, p, gen.seed, offset);
  if (needs_grad({&x})) {
    auto node = std::make_shared<DropPathNode>();
    node->p = p;
    node->seed = gen.seed;
    node->offset = offset;
    node->outer = outer;
    node->n = n;
    node->inner = inner;
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  check(p >= 0.0f && p <= 1.0f, [&] { return "dropout: probability must be in [0, 1], got " + std::to_string(p); });
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

void record_add_dropout(Tensor& z, const Tensor& x, const Tensor& r, const kernels::DropoutSpec* drop) {
  auto node = std::make_shared<AddDropoutNode>();
  node->masked = drop != nullptr;
  if (drop) {
    node->p = drop->p;
    node->seed = drop->seed;
    node->offset = drop->offset;
  }
  node->inputs = {x, r};
  record(z, node);
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
