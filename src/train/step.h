// src/train/step.h — one optimisation step: forward, loss, backward, clipping, optimizer. Internal.
#pragma once

#include <memory>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/models/model.h"
#include "tfm/optim.h"
#include "tfm/train/config.h"

namespace tfm::train {

struct StepOutcome {
  float loss = 0;            // the batch's mean loss (label smoothing included)
  bool loss_finite = true;   // the loss is finite
  bool finite = true;        // the loss and the gradient are finite: the step was taken
};

// loss = model.loss(batch, label_smoothing); backward; clip the gradient norm to clip_norm (0: only
// check that it is finite); then, when everything is finite, opt.step(). Gradients are zeroed after
// (a non-finite step changes nothing). `params` are the model's parameters, in the optimizer's order.
// The run's optimizer over model.named_parameters(): Adam or AdamW with c.lr, β1 c.beta1, β2 c.beta2,
// eps 1e-8 (torch's default), weight decay c.weight_decay on the parameters c.decay_params_value()
// selects (MATRICES: those with two or more dimensions).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Model& model);

StepOutcome train_step(Model& model, Optimizer& opt, const std::vector<Tensor>& params, const data::TokenBatch& batch,
                       float label_smoothing, float clip_norm);

}  // namespace tfm::train
