// src/ops/linear.cc — Linear forward and backward over the GEMM kernels, and the pieces every
// Linear-shaped op shares (declared in ops/linear_impl.h: checks, rows, product, backward).
#include "tfm/ops/linear.h"

#include <algorithm>
#include <string>

#include "kernels/kernels.h"
#include "kernels/gemm_bf16.h"
#include "ops/bf16_linear.h"
#include "ops/check.h"
#include "ops/linear_impl.h"
#include "ops/packed_linear.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

// rows (N) of x (N, in), weight (out, in), bias (out); bf16: the operands' bfloat16 copies when the
// forward ran under Autocast(BFLOAT16), then the backward's matmuls are bfloat16 too.
struct LinearNode : Node {
  bool has_bias = false;
  Bf16Operands bf16;
  const char* name() const override { return "linear"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    linear_backward(dy.data(), inputs[0], inputs[1], has_bias, din, bf16);
  }
};

}  // namespace

int64_t linear_rows(const Tensor& x) {
  int64_t n = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) n *= x.size(d);
  return n;
}

// dx (N, in) = g (N, out) · W (out, in);  dW (out, in) += gᵀ (out, N) · x (N, in);  db (out) += Σ_rows g.
// bfloat16 (bf16.w16 set): dx = bf16(g)·w16, dW += bf16(g)ᵀ·bf16(x), float32 sums; db from g in float32.
void linear_backward(const float* g, const Tensor& x, const Tensor& w, bool has_bias, const std::vector<Tensor*>& din,
                     const Bf16Operands& bf16) {
  const int64_t in = w.size(1), out = w.size(0), N = linear_rows(x);
  const std::vector<uint16_t>* w16 = bf16.w16.get();
  Tensor* db = has_bias ? din[2] : nullptr;
  if (w16 && (din[0] || din[1])) {  // g rounded once, whole, for both products (and db in that pass)
    linear_backward_bf16(round_output_grad(g, N, out, db).get(), x, w, din[0], din[1], bf16);
    db = nullptr;
  }
  if (!w16 && din[0]) {
    Tensor* slot = din[0];
    const float beta = slot->defined() ? 1.0f : 0.0f;
    if (!slot->defined()) *slot = Tensor::empty(x.shape());
    kernels::gemm(false, false, N, in, out, 1.0f, g, out, w.data(), in, beta, slot->data(), in);
  }
  if (!w16 && din[1]) {
    Tensor* slot = din[1];
    const float beta = slot->defined() ? 1.0f : 0.0f;
    if (!slot->defined()) *slot = Tensor::empty(w.shape());
    kernels::gemm(true, false, out, in, N, 1.0f, g, out, x.data(), in, beta, slot->data(), in);
  }
  if (db) {
    if (!db->defined()) *db = Tensor::zeros({out});
    kernels::bias_grad(g, db->data(), N, out);
  }
}

void linear_backward_bf16(const uint16_t* g16, const Tensor& x, const Tensor& w, Tensor* dx, Tensor* dw,
                          const Bf16Operands& bf16) {
  const int64_t in = w.size(1), out = w.size(0), N = linear_rows(x);
  if (dx) {  // dx (N, in) (+)= g16 (N, out) · w16 (out, in)
    const float beta = dx->defined() ? 1.0f : 0.0f;
    if (!dx->defined()) *dx = Tensor::empty(x.shape());
    kernels::gemm_bf16(false, false, N, in, out, g16, out, bf16.w16->data(), in, beta, dx->data(), in);
  }
  if (dw) {  // dW (out, in) (+)= g16ᵀ (out, N) · bf16(x) (N, in)
    const float beta = dw->defined() ? 1.0f : 0.0f;
    if (!dw->defined()) *dw = Tensor::empty(w.shape());
    std::unique_ptr<uint16_t[]> rounded;  // x rounded here when the forward kept no copy
    const uint16_t* x16 = bf16.x16.defined() ? bf16_data(bf16.x16) : (rounded = bf16_rounded(x.data(), N * in)).get();
    kernels::gemm_bf16(true, false, out, in, N, g16, out, x16, in, beta, dw->data(), in);
  }
}

std::pair<int64_t, int64_t> check_linear_args(const char* op, const Tensor& x, const Tensor& weight,
                                              const Tensor& bias) {
  check_float(x, op, "input");
  check_float(weight, op, "weight");
  check(weight.dim() == 2, [&] { return std::string(op) + ": weight must be 2-D (out, in), got " + describe(weight); });
  const int64_t out = weight.size(0), in = weight.size(1);
  check(x.dim() >= 1 && x.size(-1) == in, [&] {
    return std::string(op) + ": input " + describe(x) + " does not match weight " + describe(weight) + " (last dim " +
           std::to_string(in) + ")";
  });
  if (bias.defined()) {
    check_float(bias, op, "bias");
    check_shape(bias, {out}, op, "bias");
  }
  return {out, in};
}

Bf16Operands linear_matmul(int64_t N, const float* x, const Tensor& weight, const float* bias, float* y,
                           bool may_pack) {
  const int64_t out = weight.size(0), in = weight.size(1);
  if (may_pack && linear_forward_packed(N, x, weight, bias, y)) return {};  // InferenceMode
  Bf16Operands bf16{autocast_weight(weight), Tensor()};
  if (!bf16) {
    kernels::gemm_bias(false, true, N, out, in, x, in, weight.data(), in, bias, y, out);
  } else if (may_pack) {
    linear_forward_bf16(N, in, out, x, *bf16.w16, bias, y);
  } else {  // y = x16 · w16ᵀ + bias, x16 kept for dW
    bf16.x16 = bf16_copy(x, N * in);
    kernels::gemm_bf16(false, true, N, out, in, bf16_data(bf16.x16), in, bf16.w16->data(), in, 0.0f, y, out, bias);
  }
  return bf16;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t out = check_linear_args("linear", x, weight, bias).first;
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = Tensor::empty(ys);
  const bool grad = needs_grad({&x, &weight, &bias});
  // y = x·Wᵀ + b (broadcast over rows); in = 0 gives y = b, or zeros without bias. Inside an
  // InferenceMode scope the packed weight, bias added by the GEMM itself; under Autocast(BFLOAT16)
  // bf16(x)·bf16(W)ᵀ + b.
  Bf16Operands bf16 = linear_matmul(linear_rows(x), x.data(), weight, bias.defined() ? bias.data() : nullptr, y.data(),
                                    /*may_pack=*/!grad);
  if (grad) {
    auto node = std::make_shared<LinearNode>();
    node->bf16 = std::move(bf16);
    node->has_bias = bias.defined();
    node->inputs = {x, weight, bias};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
