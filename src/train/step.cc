// src/train/step.cc — one optimisation step (src/train/step.h).
#include "train/step.h"

#include <cmath>

namespace tfm::train {
namespace {

bool finite_grads(const std::vector<Tensor>& params) {
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const float* d = g.data();
    for (int64_t i = 0, n = g.numel(); i < n; ++i)
      if (!std::isfinite(d[i])) return false;
  }
  return true;
}

}  // namespace

StepOutcome train_step(Model& model, Optimizer& opt, const std::vector<Tensor>& params, const data::TokenBatch& batch,
                       float label_smoothing, float clip_norm) {
  StepOutcome r;
  Tensor loss = model.loss(batch, label_smoothing);
  r.loss = loss.item();
  r.loss_finite = r.finite = std::isfinite(r.loss);
  if (r.finite) {
    loss.backward();
    r.finite = clip_norm > 0 ? std::isfinite(clip_grad_norm(params, clip_norm)) : finite_grads(params);
  }
  if (r.finite) opt.step();
  opt.zero_grad();
  return r;
}

}  // namespace tfm::train
