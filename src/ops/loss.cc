// src/ops/loss.cc — cross-entropy (ignore_index, label smoothing) and MSE with mean reduction.
#include "tfm/ops/loss.h"

#include <algorithm>
#include <vector>

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

// Σ (a_i − b_i)² in double, over fixed chunks summed in chunk order: the same bits for any thread
// count (and no serial dependency chain through one accumulator).
double squared_error_sum(const float* a, const float* b, int64_t n) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i1 = std::min(n, (c + 1) * kChunk);
    double acc[4] = {0, 0, 0, 0};  // four interleaved sums, added in a fixed order
    int64_t i = c * kChunk;
    for (; i + 4 <= i1; i += 4)
      for (int k = 0; k < 4; ++k) {
        const double d = static_cast<double>(a[i + k]) - b[i + k];
        acc[k] += d * d;
      }
    for (; i < i1; ++i) {
      const double d = static_cast<double>(a[i]) - b[i];
      acc[0] += d * d;
    }
    part[static_cast<size_t>(c)] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  double s = 0;
  for (double v : part) s += v;
  return s;
}

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
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) d[i] = s * (px[i] - pt[i]);
    accumulate_grad(din[0], dx);
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& target, int32_t ignore_index,
                     float label_smoothing) {
  check_float(logits, "cross_entropy", "input");
  check(logits.dim() == 2, [&] { return "cross_entropy: input must be (N, V), got " + describe(logits); });
  const int64_t N = logits.size(0), V = logits.size(1);
  check(static_cast<int64_t>(target.size()) == N, [&] {
    return "cross_entropy: " + std::to_string(target.size()) + " targets for " + std::to_string(N) + " rows";
  });
  check(label_smoothing >= 0.0f && label_smoothing <= 1.0f, "cross_entropy: label_smoothing must be in [0, 1]");
  int64_t count = 0;
  for (int32_t t : target) {
    if (t == ignore_index) continue;
    check(t >= 0 && t < V, [&] {
      return "cross_entropy: target " + std::to_string(t) + " out of range [0, " + std::to_string(V) + ")";
    });
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
  const int64_t n = input.numel();
  const double s = squared_error_sum(input.data(), target.data(), n);
  Tensor y = Tensor::full({}, n ? static_cast<float>(s / static_cast<double>(n)) : 0.0f);
  if (needs_grad({&input})) {
    auto node = std::make_shared<MseNode>();
    node->target = target.detach();
    node->inputs = {input};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
