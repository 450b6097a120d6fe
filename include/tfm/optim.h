// tfm/optim.h — optimizers (torch.optim.SGD, Adam, AdamW), gradient clipping and learning-rate
// schedules, with PyTorch's update rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm {

// Elements [begin, end) of parameter `param` (an index in the optimizer's order), with their gradient:
// grad[k] is the gradient of element begin + k.
struct ParamRange {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  const float* grad = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;  // parameters with an undefined grad are skipped, as PyTorch
  // The part of a step() in which every parameter has a gradient that updates only the elements of
  // `owned` (ranges of distinct elements), reading their gradients from the ranges, not from grad():
  // every parameter counts the step (its state is created and its step count advances as in step()),
  // and each owned element gets the bits step() would give it, the update being element-wise. Processes
  // that each own a part of the elements and exchange the results take the same step together
  // (src/train/step.cc).
  virtual void step(const std::vector<ParamRange>& owned) = 0;
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
  // The element-wise state: per slot (SGD: momentum_buffer; Adam: exp_avg then exp_avg_sq), one
  // tensor per parameter in the optimizer's order, undefined where the parameter has no state yet.
  // The tensors share the optimizer's storage: writing into them changes its state (processes that
  // stepped different elements gather each other's slices into them before a checkpoint).
  virtual std::vector<std::vector<Tensor>> state_slots() = 0;

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
  void step(const std::vector<ParamRange>& owned) override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& s, int64_t steps) override;
  std::vector<std::vector<Tensor>> state_slots() override;

 private:
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
  void step(const std::vector<ParamRange>& owned) override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& s, int64_t steps) override;
  std::vector<std::vector<Tensor>> state_slots() override;

 private:
  AdamScalars scalars() const;                  // the coefficients every parameter shares
  int begin_param_step(size_t i, AdamScalars& s);  // see src/optim.cc

  float beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<bool> decayed_;   // (params) or empty: every parameter decays
  std::vector<Tensor> m_, v_;   // exp_avg, exp_avg_sq per parameter (undefined until its first grad)
  std::vector<int64_t> step_;   // per-parameter step count t (torch's state['step'])
};

// torch.nn.utils.clip_grad_norm_: total 2-norm over all grads; if > max_norm, scale every grad by
// max_norm / (total + 1e-6). Returns the total norm before clipping.
//
// The norm is defined blockwise, so that processes holding different parts of the gradient compute
// it bitwise alike: each grad is cut into blocks of kNormBlock elements (the last one shorter); a
// block's partial is the sequential sum in double of its g² (norm_block_partials); a tensor's sum of
// squares sq_i is the left fold in double of its blocks' partials in order; then total_grad_norm.
// A non-finite element makes its block's partial, and the total, non-finite.
float clip_grad_norm(const std::vector<Tensor>& params, float max_norm);

inline constexpr int64_t kNormBlock = 16384;
// The partials of the blocks x[0, n) is cut into (kNormBlock elements each, the last one shorter):
// out[b] = Σ_k x[k]² over block b, in double, in order. Several blocks are summed at once (their
// chains are independent), each block's sum in its own order.
void norm_block_partials(const float* x, int64_t n, double* out);
// The total norm from the tensors' sums of squares, in the grads' order: norm_i = (float)√sq_i,
// total = (float)√(Σ_i (double)norm_i²), the sum in order (torch's float32 per-tensor norms).
float total_grad_norm(const std::vector<double>& tensor_sq);
// The factor clip_grad_norm scales every grad by when it is below 1: max_norm / (total + 1e-6).
// Throws unless max_norm > 0.
float clip_coefficient(float total, float max_norm);

}  // namespace tfm
