// src/train/step.cc — the run's optimizer and one optimisation step (src/train/step.h).
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

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Model& model) {
  const NamedTensors params = model.named_parameters();
  std::vector<bool> decayed;  // empty: every parameter
  if (c.decay_params_value() == DecayParams::MATRICES)
    for (const auto& [key, p] : params) decayed.push_back(p.dim() >= 2);
  return std::make_unique<Adam>(params, c.lr, c.beta1, c.beta2, 1e-8f, c.weight_decay,
                                c.optimizer == OptimizerKind::ADAMW, std::move(decayed));
}

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
