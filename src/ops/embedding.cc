// src/ops/embedding.cc — embedding lookup and its scatter-add backward.
#include "tfm/ops/embedding.h"

#include <cstring>

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tensor_impl.h"
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
  // A table stored as int8 rows whose float32 values are not computed yet (an int8 directory's, read only):
  // each looked-up row computed alone (q·scale, the values the table would hold), the table left as it is.
  const Int8Rows* rows = materialized(weight) ? nullptr : weight.impl()->storage->int8_rows.get();
  const int64_t at = weight.impl()->offset;
  if (rows && (rows->cols != D || at % D != 0)) rows = nullptr;
  const float* pw = rows ? nullptr : weight.data();
  for (size_t n = 0; n < ids.size(); ++n) {
    check(ids[n] >= 0 && ids[n] < V,
          [&] { return "embedding: id " + std::to_string(ids[n]) + " out of range [0, " + std::to_string(V) + ")"; });
    float* dst = py + static_cast<int64_t>(n) * D;
    if (rows) {
      const int64_t r = at / D + ids[n];
      kernels::dequantize_rows_s8(rows->q + r * D, 1, D, D, rows->scale + r, dst);
    } else {
      std::memcpy(dst, pw + static_cast<int64_t>(ids[n]) * D, sizeof(float) * D);
    }
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
