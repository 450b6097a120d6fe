// tfm/autograd.h — the define-by-run tape.
//
// Each differentiable op (tfm/ops/*.h) computes its forward and, only when gradient mode is on and
// some input requires a gradient, attaches a Node to its output holding what the backward needs.
// With gradients off (NoGradGuard, or no input requiring grad) nothing is recorded, so inference
// pays nothing for the tape. Nodes are coarse fused ops (linear, layer_norm, attention, ...), each
// with a hand-written backward beside its forward in src/ops/.
//
// Gradient rule: the engine hands each node one accumulator slot per input. A node either sets an
// empty slot (first contribution) or adds into it (fan-out, e.g. the residual stream). Leaves'
// slots are their .grad, so parameter gradients accumulate across backward calls until zero_grad.
#pragma once

#include <memory>
#include <vector>

#include "tfm/tensor.h"

namespace tfm {

class Node {
 public:
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // dout: gradient of the loss w.r.t. this node's output (output's shape).
  // dinputs[i]: accumulator for inputs[i], or nullptr when that input needs no gradient.
  virtual void backward(const Tensor& dout, const std::vector<Tensor*>& dinputs) = 0;
  // What the engine calls: it hands dout over, as it drops it after the call. A node whose input
  // gradient is dout itself seen in another shape (reshape) overrides this to pass dout's storage on
  // without a copy (accumulate_grad takes a gradient nobody else holds); the rest compute from dout.
  virtual void backward_taking(Tensor dout, const std::vector<Tensor*>& dinputs) { backward(dout, dinputs); }

  std::vector<Tensor> inputs;  // the tensors gradients flow to (kept alive by the tape)
};

// Sets the slot if empty, else adds g into it (g's shape must match). An empty slot takes g's
// storage without a copy when nobody else holds it, so a gradient handed over here must not be
// written afterwards by the caller.
void accumulate_grad(Tensor* slot, const Tensor& g);

bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when an op with these inputs must record a node (grad mode on and some input requires grad).
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Attach `node` (whose inputs are set) to `out`.
void record(Tensor& out, std::shared_ptr<Node> node);

}  // namespace tfm
