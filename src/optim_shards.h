// src/optim_shards.h — what a data-parallel step (src/train/step.cc) needs from the optimizers and
// from clip_grad_norm beyond the public tfm/optim.h: the step of SGD and Adam on the element ranges a
// process owns, their element-wise state, and the blockwise pieces of the clip norm. Internal: the
// public Optimizer is torch.optim's (step, zero_grad, state_dict, load_state_dict) and nothing more.
//
// Defined in src/optim.cc, each owned step beside the whole step() whose bits it must give.
// tests/optim_shards_test.cc checks every piece bitwise against its whole-tensor twin. To let another
// tfm optimizer step across processes: declare detail::OptimizerShards its friend (as SGD and Adam
// do) and add its case to both functions below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tfm/autocast.h"
#include "tfm/optim.h"
#include "tfm/tensor.h"

namespace tfm {

// Elements [begin, end) of parameter `param` (an index in the optimizer's order), with their gradient:
// grad[k] is the gradient of element begin + k.
struct ParamRange {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  const float* grad = nullptr;
};

namespace detail {

// A friend of SGD and Adam (tfm/optim.h). Any other optimizer throws std::invalid_argument: an
// optimizer written outside tfm implements only the public interface, which steps whole tensors.
struct OptimizerShards {
  // The part of opt.step() in which every parameter has a gradient that updates only the elements of
  // `owned` (ranges of distinct elements), reading their gradients from the ranges, not from grad():
  // every parameter counts the step (its state is created and its step count advances as in step()),
  // and each owned element gets the bits step() would give it, the update being element-wise. Processes
  // that each own a part of the elements and exchange the results take the same step together.
  // grad_scale multiplies every gradient element as it is read (clip_grad_norm's factor, 1 for none):
  // the bits of scaling the gradient in place first, in the same pass.
  static void step(Optimizer& opt, const std::vector<ParamRange>& owned, float grad_scale = 1.0f);
  // opt.step() on grads multiplied by grad_scale (clip_grad_norm's factor, 1 for none), with the bits of
  // scaling them in place and then calling opt.step(). For Adam one pass over every element in one
  // parallel region (the grads are only read); any other optimizer: the grads scaled in place, then
  // its step(). Adam::step() is this with grad_scale 1.
  // With `copies` (else null), Adam also writes the bfloat16 copy of each parameter `copies` holds one of
  // (Bf16WeightCache::refresh) in the pass that updates it; any other optimizer leaves them to be rounded again.
  static void step_scaled(Optimizer& opt, float grad_scale, Bf16WeightCache* copies = nullptr);
  // The element-wise state: per slot (SGD with momentum: momentum_buffer; Adam: exp_avg then
  // exp_avg_sq), one tensor per parameter in the optimizer's order, undefined where the parameter has
  // no state yet; no slot at all for SGD without momentum. Adam's per-parameter step counts are not
  // slots: every process advances them alike. The tensors share the optimizer's storage: writing into
  // them changes its state (processes that stepped different elements gather each other's slices
  // into them before a checkpoint).
  static std::vector<std::vector<Tensor>> state_slots(Optimizer& opt);

 private:
  static void step(SGD& sgd, const std::vector<ParamRange>& owned, float grad_scale);
  static void step(Adam& adam, const std::vector<ParamRange>& owned, float grad_scale);
  static void step_scaled(Adam& adam, float grad_scale, Bf16WeightCache* copies);
};

}  // namespace detail

// The clip norm of clip_grad_norm (tfm/optim.h) is defined blockwise, so that processes holding
// different parts of the gradient compute it bitwise alike: each grad is cut into blocks of
// kNormBlock elements (the last one shorter); a block's partial is the sequential sum in double of
// its g² (norm_block_partials); a tensor's sum of squares sq_i is the left fold in double of its
// blocks' partials in order; then total_grad_norm. A non-finite element makes its block's partial,
// and the total, non-finite.
inline constexpr int64_t kNormBlock = 16384;
// The partials of the blocks x[0, n) is cut into (kNormBlock elements each, the last one shorter):
// out[b] = Σ_k x[k]² over block b, in double, in order. Several blocks are summed at once (their
// chains are independent), each block's sum in its own order.
void norm_block_partials(const float* x, int64_t n, double* out);
// The total norm from the tensors' sums of squares, in the grads' order: norm_i = (float)√sq_i,
// total = (float)√(Σ_i (double)norm_i²), the sum in order (torch's float32 per-tensor norms).
float total_grad_norm(const std::vector<double>& tensor_sq);
// clip_grad_norm's total norm of the grads of `params` (those without a grad skipped), its blocks'
// partials computed in parallel: the same bits for any thread count, and as clip_grad_norm's.
float grad_norm(const std::vector<Tensor>& params);
// The factor clip_grad_norm scales every grad by when it is below 1: max_norm / (total + 1e-6), as
// torch computes it, (1 / (total + 1e-6)) · max_norm in float32 (Tensor.__rtruediv__ is a reciprocal
// and a multiply).
// Throws unless max_norm > 0.
float clip_coefficient(float total, float max_norm);

}  // namespace tfm
