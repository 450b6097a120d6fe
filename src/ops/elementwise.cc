// src/ops/elementwise.cc — add, scale, positional-table add, sum.
#include "tfm/ops/elementwise.h"

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

struct AddNode : Node {
  const char* name() const override { return "add"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], dy);
    if (din[1]) accumulate_grad(din[1], dy);
  }
};
struct ScaleNode : Node {
  float s = 1;
  const char* name() const override { return "mul_scalar"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], mul_scalar(dy, s));
  }
};
struct PassNode : Node {  // gradient passes through unchanged (positional add)
  const char* name() const override { return "add_positional"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], dy);
  }
};
struct SumNode : Node {
  const char* name() const override { return "sum"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], Tensor::full(inputs[0].shape(), dy.item()));
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_float(a, "add", "a");
  check_float(b, "add", "b");
  check_shape(b, a.shape(), "add", "b");
  Tensor y = Tensor::empty(a.shape());
  kernels::add_forward(a.data(), b.data(), y.data(), a.numel());
  if (needs_grad({&a, &b})) {
    auto node = std::make_shared<AddNode>();
    node->inputs = {a, b};
    record(y, node);
  }
  return y;
}

Tensor mul_scalar(const Tensor& x, float s) {
  check_float(x, "mul_scalar", "input");
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data();
  float* py = y.data();
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] * s;
  if (needs_grad({&x})) {
    auto node = std::make_shared<ScaleNode>();
    node->s = s;
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

Tensor add_positional(const Tensor& x, const Tensor& table, bool batch_first) {
  check_float(x, "add_positional", "input");
  check(x.dim() == 3, [&] { return "add_positional: input must be 3-D, got " + describe(x); });
  const int64_t B = batch_first ? x.size(0) : x.size(1), T = batch_first ? x.size(1) : x.size(0), D = x.size(2);
  check(table.dim() == 2 && table.size(1) == D && table.size(0) >= T,
        [&] { return "add_positional: table " + describe(table) + " too short or wrong width for " + describe(x); });
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.data();
  const float* pe = table.data();
  float* py = y.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = batch_first ? b * T + t : t * B + b;
      for (int64_t d = 0; d < D; ++d) py[row * D + d] = px[row * D + d] + pe[t * D + d];
    }
  if (needs_grad({&x})) {
    auto node = std::make_shared<PassNode>();
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

Tensor sum(const Tensor& x) {
  check_float(x, "sum", "input");
  double s = 0;
  const float* p = x.data();
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  Tensor y = Tensor::full({}, static_cast<float>(s));
  if (needs_grad({&x})) {
    auto node = std::make_shared<SumNode>();
    node->inputs = {x};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
