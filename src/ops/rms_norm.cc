// src/ops/rms_norm.cc — RMSNorm forward and backward (kernels: src/kernels/rms_norm*.{h,cc}).
#include "tfm/ops/rms_norm.h"

#include <algorithm>
#include <string>

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

// inputs: x (N, D), weight (D). The forward's rstd (N) is kept for the backward (kernels.h says why
// its float rounding is harmless here, unlike LayerNorm's).
struct RMSNormNode : Node {
  Tensor rstd;  // (N)
  const char* name() const override { return "rms_norm"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    const Tensor& x = inputs[0];
    const Tensor& w = inputs[1];
    const int64_t D = w.numel(), N = x.numel() / std::max<int64_t>(D, 1);
    Tensor dx = Tensor::empty(x.shape());
    Tensor* dw = din[1];
    if (dw && !dw->defined()) *dw = Tensor::zeros(w.shape());
    Tensor dw_scratch = dw ? Tensor() : Tensor::zeros({D});
    kernels::rms_norm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(),
                               dw ? dw->data() : dw_scratch.data(), N, D);
    if (din[0]) accumulate_grad(din[0], dx);
  }
};

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  const char* op = "rms_norm";
  check_float(x, op, "input");
  check_float(weight, op, "weight");
  const int64_t D = weight.numel();
  check(weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == D, [&] {
    return std::string(op) + ": input " + describe(x) + " does not match normalized shape (" + std::to_string(D) + ",)";
  });
  const int64_t N = x.numel() / std::max<int64_t>(D, 1);
  Tensor y = Tensor::empty(x.shape());
  const bool grad = needs_grad({&x, &weight});
  Tensor rstd = grad ? Tensor::empty({N}) : Tensor();
  kernels::rms_norm_forward(x.data(), weight.data(), y.data(), grad ? rstd.data() : nullptr, N, D, eps);
  if (grad) {
    auto node = std::make_shared<RMSNormNode>();
    node->rstd = rstd;
    node->inputs = {x, weight};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
