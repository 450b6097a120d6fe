// src/ops/embedding.cc — embedding lookup and its scatter-add backward.
#include "tfm/ops/embedding.h"

#include <cstring>

#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

struct EmbeddingNode : Node {
  std::vector<int32_t> ids;
  int64_t padding_idx = -1;
  const char* name() const override { return "embedding"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    const Tensor& w = inputs[0];
    const int64_t D = w.size(1);
    if (!din[0]->defined()) *din[0] = Tensor::zeros(w.shape());
    float* dw = din[0]->data();
    const float* g = dy.data();
    for (size_t n = 0; n < ids.size(); ++n) {  // sequential: fixed order for repeated ids
      if (ids[n] == padding_idx) continue;
      float* row = dw + static_cast<int64_t>(ids[n]) * D;
      for (int64_t d = 0; d < D; ++d) row[d] += g[static_cast<int64_t>(n) * D + d];
    }
  }
};

}  // namespace

Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& shape, int64_t padding_idx) {
  check_float(weight, "embedding", "weight");
  check(weight.dim() == 2, [&] { return "embedding: weight must be (V, D), got " + describe(weight); });
  check(shape_numel(shape) == static_cast<int64_t>(ids.size()),
        [&] { return "embedding: " + std::to_string(ids.size()) + " ids for shape " + shape_str(shape); });
  const int64_t V = weight.size(0), D = weight.size(1);
  Shape ys = shape;
  ys.push_back(D);
  Tensor y = Tensor::empty(ys);
  float* py = y.data();
  const float* pw = weight.data();
  for (size_t n = 0; n < ids.size(); ++n) {
    check(ids[n] >= 0 && ids[n] < V,
          [&] { return "embedding: id " + std::to_string(ids[n]) + " out of range [0, " + std::to_string(V) + ")"; });
    std::memcpy(py + static_cast<int64_t>(n) * D, pw + static_cast<int64_t>(ids[n]) * D, sizeof(float) * D);
  }
  if (needs_grad({&weight})) {
    auto node = std::make_shared<EmbeddingNode>();
    node->ids = ids;
    node->padding_idx = padding_idx;
    node->inputs = {weight};
    record(y, node);
  }
  return y;
}

}  // namespace tfm::ops
