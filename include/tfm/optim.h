// tfm/optim.h — optimizers (torch.optim.SGD, Adam, AdamW), gradient clipping and learning-rate
// schedules, with PyTorch's update rules.
#pragma once

#include <string>
#include <vector>

#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;  // parameters with an undefined grad are skipped, as PyTorch
  void zero_grad();         // set_to_none semantics
  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  int64_t steps() const { return steps_; }
  // Optimizer state for checkpoints: tensors named "<param key>.<slot>" (e.g. "...weight.exp_avg")
  // plus the step count; load_state restores it exactly (resume equals uninterrupted).
  // Slots follow torch's state dict: SGD "momentum_buffer"; Adam/AdamW "exp_avg", "exp_avg_sq" and
  // "step" (a 0-dim tensor: torch counts steps per parameter, so bias corrections use that count).
  // A parameter that never had a gradient has no entries. load_state is strict: a misshapen or
  // unexpected key throws, naming it, and leaves the optimizer unchanged.
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& s, int64_t steps) = 0;

 protected:
  // Takes the parameters (Module::named_parameters(): the tensors themselves, updated in place).
  Optimizer(const NamedTensors& params, float lr);
  std::vector<std::string> keys_;  // parameter keys, for state() and load_state()
  std::vector<Tensor> params_;     // the parameters, in the order of keys_ (and of every slot vector)
  float lr_;
  int64_t steps_ = 0;
};

// torch.optim.SGD: g = grad + wd·p; with momentum: buf = μ·buf + g (buf = g on the first step); p −= lr·buf.
class SGD : public Optimizer {
 public:
  SGD(const NamedTensors& params, float lr, float momentum = 0, float weight_decay = 0);
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& s, int64_t steps) override;

 private:
  float momentum_, weight_decay_;
  std::vector<Tensor> buf_;
};

// torch.optim.Adam / AdamW. Adam: g += wd·p (L2). AdamW: p *= 1 − lr·wd (decoupled).
// m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;  p −= lr · (m/(1−β1ᵗ)) / (sqrt(v/(1−β2ᵗ)) + eps)
// `decayed` (one flag per parameter, in params' order; empty: every one) limits weight decay to the
// flagged parameters, the others updating with wd 0: torch's two parameter groups
// [{params: flagged, weight_decay: wd}, {params: others, weight_decay: 0}].
class Adam : public Optimizer {
 public:
  Adam(const NamedTensors& params, float lr = 1e-3f, float beta1 = 0.9f,
       float beta2 = 0.999f, float eps = 1e-8f, float weight_decay = 0, bool decoupled = false,
       std::vector<bool> decayed = {});
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& s, int64_t steps) override;

 private:
  float beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<bool> decayed_;   // (params) or empty: every parameter decays
  std::vector<Tensor> m_, v_;   // exp_avg, exp_avg_sq per parameter (undefined until its first grad)
  std::vector<int64_t> step_;   // per-parameter step count t (torch's state['step'])
};

// torch.nn.utils.clip_grad_norm_: total 2-norm over all grads; if > max_norm, scale every grad by
// max_norm / (total + 1e-6). Returns the total norm before clipping.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);

}  // namespace tfm
