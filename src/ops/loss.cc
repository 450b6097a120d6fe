// src/ops/loss.cc — cross-entropy (ignore_index, label smoothing) and MSE with mean reduction.
#include "tfm/ops/loss.h"

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

struct CrossEntropyNode : Node {
  std::vector<int32_t> target;
  Tensor lse;  // (N)
  int32_t ignore_index = -100;
  float label_smoothing = 0;
  int64_t count = 0;  // rows not ignored
  const char* name() const override { return "cross_entropy"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    const Tensor& z = inputs[0];
    const int64_t N = z.size(0), V = z.size(1);
    std::vector<float> scale(static_cast<size_t>(N), count ? dy.item() / static_cast<float>(count) : 0.0f);
    Tensor dz = Tensor::empty(z.shape());
    kernels::cross_entropy_backward(z.data(), target.data(), lse.data(), scale.data(), dz.data(), N, V,
                                    ignore_index, label_smoothing);
    accumulate_grad(din[0], dz);
  }
};

struct MseNode : Node {
  Tensor target;
  const char* name() const override { return "mse_loss"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    const Tensor& x = inputs[0];
    Tensor dx = Tensor::empty(x.shape());
    const float s = 2.0f * dy.item() / static_cast<float>(x.numel());
    const float* px = x.data();
    const float* pt = target.data();
    float* d = dx.data();
    for (int64_t i = 0; i < x.numel(); ++i) d[i] = s * (px[i] - pt[i]);
    accumulate_grad(din[0], dx);
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& target, int32_t ignore_index,
                     float label_smoothing) {
  check_float(logits, "cross_entropy", "input");
  check(logits.dim() == 2, "cross_entropy: input must be (N, V), got " + describe(logits));
  const int64_t N = logits.size(0), V = logits.size(1);
  check(static_cast<int64_t>(target.size()) == N,
        "cross_entropy: " + std::to_string(target.size()) + " targets for " + std::to_string(N) + " rows");
  check(label_smoothing >= 0.0f && label_smoothing <= 1.0f, "cross_entropy: label_smoothing must be in [0, 1]");
  int64_t count = 0;
  for (int32_t t : target) {
    if (t == ignore_index) continue;
    check(t >= 0 && t < V, "cross_entropy: target " + std::to_string(t) + " out of range [0, " + std::to_string(V) + ")");
    ++count;
  }
  Tensor lse = Tensor::empty({N});
  std::vector<float> loss(static_cast<size_t>(N));
  kernels::cross_entropy_forward(logits.data(), target.data(), loss.data(), lse.data(), N, V, ignore_index,
                                 label_smoothing);
  double total = 0;
  for (float l : loss) total += l;
  Tensor y = Tensor::full({}, count ? static_cast<float>(total / static_cast<double>(count)) : 0.0f);
  if (needs_grad({&logits})) {
    auto node = std::make_shared<CrossEntropyNode>();
    node->target = target;
    node->lse = lse;
    node->ignore_index = ignore_index;
    node->label_smoothing = label_smoothing;
    node->count = count;
    node->inputs = {logits};
    record(y, node);
  }
  return y;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  check_float(input, "mse_loss", "input");
  check_float(target, "mse_loss", "target");
  check_shape(target, input.shape(), "mse_loss", "target");
  double s = 0;
  const float* a = input.data();
  const float* b = target.data();
  for (int64_t i = 0; i < input.numel(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
  Tensor y = Tensor::full({}, input.numel() ? static_cast<float>(s / static_cast<double>(input.numel())) : 0.0f);
  if (needs_grad({&input})) {
    auto node = std::make_shared<MseNode>();
    node->target = target.detach();
    node->inputs = {input};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
