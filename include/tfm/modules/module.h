// tfm/modules/module.h — the Module base: parameters registered once under their PyTorch names,
// one recursive visitor reused by state_dict, load_state_dict, zero_grad and the optimizers.
//
// Modules are neither copyable nor movable (registrations point at members); hold them by value
// inside their parent or by std::unique_ptr.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm {

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Visits every parameter with its full dotted key ("layers.0.self_attn.in_proj_weight"),
  // in registration order (PyTorch's state_dict order).
  void visit_parameters(const std::function<void(const std::string&, Tensor&)>& fn,
                        const std::string& prefix = "");
  // The parameters themselves (not copies) under their keys, in registration order: what the
  // optimizers take. state_dict() is the same list, under the name PyTorch's save/load use.
  NamedTensors named_parameters();
  std::vector<Tensor> parameters();
  NamedTensors state_dict();
  int64_t num_parameters();

  // Strict load: every key must be present with the right shape, and no key may be left over.
  // Values are copied into the existing parameters; with assign (PyTorch's load_state_dict(...,
  // assign=True)) each parameter views the state's tensor instead (Tensor::set_, no copy), which
  // then holds its storage: a zero-copy load keeps the file's mapping. `source` names the file in messages.
  void load_state_dict(const NamedTensors& state, const std::string& source = "state_dict", bool assign = false);

  void zero_grad();
  void train(bool on = true);  // recursive, like torch
  void eval() { train(false); }
  bool is_training() const { return training_; }
  bool any_training() const;  // this module or one below it in training mode

 protected:
  // Parameters are leaves that require grad.
  void register_parameter(const std::string& name, Tensor& t);
  // `name` prefixes the child's keys ("name.key"); an empty name adds them unprefixed (a handle whose
  // parts are its implementation's, as tfm::Model's family).
  void register_module(const std::string& name, Module& m);

 private:
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// The one way library code enters eval mode: the module (recursively) in eval mode for the guard's
// scope, training mode restored at its end if the module was training when the guard began —
// PyTorch's `was_training = m.training; m.eval(); ...; m.train(was_training)`, exception-safe.
// Inference functions take their model const (decode, generate, evaluate_text); the training flag is
// a mode, not a weight, so the guard sets it through a const reference — only when some module of the
// tree is in training mode: a model already in eval mode (every loaded one) is only read, so any number
// of threads may decode with it at once. A model guarded here must not be trained on another thread at
// the same time.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(const Module& m)
      : m_(const_cast<Module&>(m)), was_training_(m.is_training()), changed_(m.any_training()) {
    if (changed_) m_.eval();
  }
  ~EvalModeGuard() {
    if (changed_ && was_training_) m_.train(true);
  }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& m_;
  bool was_training_, changed_;
};

}  // namespace tfm
