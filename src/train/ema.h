// src/train/ema.h — the exponential moving average of a run's weights (TrainConfig::ema, `--ema`).
// Internal: the trainer (trainer.cc) owns one, the step (step.cc) updates it after each optimizer step,
// the checkpoint (checkpoint.cc) saves it.
//
// The rule. The average starts as a copy of the weights the run starts from (fresh, --init-from's,
// or a checkpoint's average on --resume). After the optimizer's t-th update of this average (t =
// 1, 2, ..., counted by the average and saved with it; a skipped non-finite batch is no update)
//   d   = min(decay, (1 + t)/(10 + t))                  in double (decay: the float config value)
//   avg = avg·(float)d + w·(float)(1 − d)               in float32, each product rounded, then the sum
// The warm-up (1 + t)/(10 + t) (0.18 at t = 1, 0.5 at t = 8, 0.9 at t = 89, 0.999 at t ≈ 8990) keeps
// the first, random weights from dominating the average of a short run (TensorFlow's
// ExponentialMovingAverage with num_updates uses the same ramp; timm's ModelEmaV2 keeps a constant decay). The float32
// update is PyTorch's `avg.mul_(a).add_(w * b)` element by element: tests/gen/gen_ema.py writes that twin's states, and
// tests/train/ema_test.cc checks them bit for bit.
//
// Under mpirun each rank updates only the elements it owns in the split optimizer step (the ranges of
// detail::OptimizerShards::step); ShardedStep::gather_elements completes the average on every rank
// before it is evaluated or saved. The update is element-wise, so any split gives the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim_shards.h"
#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm::train {

// avg[k] = avg[k]·a + w[k]·b for k in [0, n): both products rounded to float, then their sum (no
// fused multiply-add: the library's portable sources are compiled without -mfma). avg may not alias w.
void ema_update(float* avg, const float* w, int64_t n, float a, float b);

class WeightAverage {
 public:
  // The average of `params` (named as in the model's state_dict), starting as a copy of them.
  WeightAverage(const NamedTensors& params, float decay);

  // d of the rule above for update t (1-based).
  static double decay_at(float decay, int64_t t);

  // One update after an optimizer step, on every element of params (in the order given at
  // construction), or only on `ranges` (the elements this rank owns; the others are left as they are
  // until ShardedStep::gather_elements). Counts the update either way.
  void update(const std::vector<Tensor>& params);
  void update(const std::vector<Tensor>& params, const std::vector<ParamRange>& ranges);

  // Exchanges the values of the average and of params, element by element (no copy): called once, the
  // model holds the average (for evaluation and model.safetensors) and this object the raw weights;
  // called again, both are back. Every element must be current (gathered under mpirun).
  void swap_with(const std::vector<Tensor>& params);

  const NamedTensors& named() const { return avg_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }  // params' order; they share storage with named()
  int64_t updates() const { return updates_; }
  void set_updates(int64_t t) { updates_ = t; }
  float decay() const { return decay_; }

 private:
  void update_range(const Tensor& w, size_t i, int64_t begin, int64_t end, float a, float b);
  NamedTensors avg_;
  std::vector<Tensor> tensors_;
  float decay_;
  int64_t updates_ = 0;
};

}  // namespace tfm::train
