// tfm/optim.h — optimizers (torch.optim.SGD, Adam, AdamW) and gradient clipping
// (torch.nn.utils.clip_grad_norm_), with PyTorch's update rules and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm {

// tfm/autocast.h: bf16 training's weight copies, which Adam::step(Bf16WeightCache&) refreshes. An ops-layer
// type named by this tensor-layer header, the one dependency upward (docs/ARCHITECTURE.md, "ops").
class Bf16WeightCache;

namespace detail {
struct OptimizerShards;  // the data-parallel step's way into SGD and Adam (src/optim_shards.h)
}

// torch.optim.Optimizer: the parameters given at construction (Module::named_parameters(): the
// tensors themselves, updated in place) and one learning rate. An optimizer of your own implements
// step(), state_dict() and load_state_dict(); it runs in one process. Across processes
// (mpirun, src/train/step.cc) each rank updates only the elements it owns, which only tfm's SGD and
// Adam can do.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;  // parameters with an undefined grad are skipped, as PyTorch
  void zero_grad();         // set_to_none semantics
  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  // The per-parameter state, for checkpoints: tensors named "<param key>.<slot>" (e.g.
  // "...weight.exp_avg"), torch's state_dict()["state"] with parameter keys for indices. Slots follow
  // torch: SGD "momentum_buffer"; Adam/AdamW "exp_avg", "exp_avg_sq" and "step" (a 0-dim tensor:
  // torch counts steps per parameter, so bias corrections use that count). A parameter that never
  // had a gradient has no entries. The slots are the optimizer's own tensors, not copies (torch's
  // state_dict() returns references too): the next step() changes them, so clone what must outlive
  // it (a checkpoint writes them before the next step). The hyperparameters (torch's "param_groups")
  // are not in it: they are the constructor's, and the learning rate is whatever set_lr gave last.
  // There is no optimizer-wide step count: torch keeps none, no update reads one, and a training
  // loop counts its own steps (src/train/checkpoint.h, State::step).
  virtual NamedTensors state_dict() const = 0;
  // Restores state_dict()'s tensors exactly (resume equals uninterrupted). Strict: a misshapen or
  // unexpected key throws std::invalid_argument, naming it, and leaves the optimizer unchanged.
  virtual void load_state_dict(const NamedTensors& state) = 0;

 protected:
  friend struct detail::OptimizerShards;
  Optimizer(const NamedTensors& params, float lr);
  std::vector<std::string> keys_;  // parameter keys, for state_dict() and load_state_dict()
  std::vector<Tensor> params_;     // the parameters, in the order of keys_
  float lr_;
};

// torch.optim.SGD: g = grad + wd·p; with momentum: buf = μ·buf + g (buf = g on the first step); p −= lr·buf.
class SGD : public Optimizer {
 public:
  SGD(const NamedTensors& params, float lr, float momentum = 0, float weight_decay = 0);
  void step() override;
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;

 private:
  friend struct detail::OptimizerShards;
  float momentum_, weight_decay_;
  std::vector<Tensor> buf_;
};

// torch.optim.Adam / AdamW. Adam: g += wd·p (L2). AdamW: p *= 1 − lr·wd (decoupled).
// m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;  p −= lr · (m/(1−β1ᵗ)) / (sqrt(v/(1−β2ᵗ)) + eps)
// `decayed` (one flag per parameter, in params' order; empty: every one) limits weight decay to the
// flagged parameters, the others updating with wd 0: torch's two parameter groups
// [{params: flagged, weight_decay: wd}, {params: others, weight_decay: 0}].
struct AdamScalars;  // the coefficients of one update (src/optim.cc)

class Adam : public Optimizer {
 public:
  Adam(const NamedTensors& params, float lr = 1e-3f, float beta1 = 0.9f,
       float beta2 = 0.999f, float eps = 1e-8f, float weight_decay = 0, bool decoupled = false,
       std::vector<bool> decayed = {});
  void step() override;
  // step(), writing in the same pass the bfloat16 copy `copies` holds of each parameter it updates
  // (Bf16WeightCache::refresh, tfm/autocast.h): a bf16 training loop that opens its Autocast scopes with
  // `copies` then never reads a weight again just to round it.
  void step(Bf16WeightCache& copies);
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;

 private:
  friend struct detail::OptimizerShards;
  AdamScalars scalars() const;                  // the coefficients every parameter shares
  int begin_param_step(size_t i, AdamScalars& s);  // see src/optim.cc

  float beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<bool> decayed_;   // (params) or empty: every parameter decays
  std::vector<Tensor> m_, v_;   // exp_avg, exp_avg_sq per parameter (undefined until its first grad)
  std::vector<int64_t> step_;   // per-parameter step count t (torch's state['step'])
};

// torch.nn.utils.clip_grad_norm_: total 2-norm over all grads; if > max_norm, scale every grad by
// max_norm / (total + 1e-6) (torch's float32 bits: (1 / (total + 1e-6)) · max_norm). Non-finite grads
// as torch: a NaN element makes the total and every grad NaN; an infinite one makes the total inf and
// the factor 0 (the other elements 0, the infinite ones NaN). Returns the total norm before clipping.
// Each tensor's sum of squares is accumulated in double in fixed blocks (src/optim_shards.h), so
// processes holding different parts of the gradient compute the same norm bit for bit.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);

}  // namespace tfm
