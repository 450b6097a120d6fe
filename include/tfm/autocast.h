// tfm/autocast.h — Autocast: the scope in which training runs its matmuls in bfloat16.
//
// PyTorch analog: `with torch.autocast("cpu", dtype=torch.bfloat16):` around the forward and the
// backward, restricted to the matmuls, with float32 master weights. The Linear layers:
//   forward   y  = bf16(x)·bf16(W)ᵀ + b
//   backward  dx = bf16(g)·bf16(W),   dW = bf16(g)ᵀ·bf16(x)      (g = dL/dy; db = Σ_rows g in float32)
// and, where the CPU has AVX512-BF16, attention's products: the scores bf16(q)·bf16(k)ᵀ, the output
// bf16(drop(p))·bf16(v), and their backward (dp, dv, dq, dk with bf16(dout) and bf16(scale·ds)), as
// autocast runs PyTorch's bmm. Products are exact and sums float32, the results float32 (PyTorch's are
// rounded to bfloat16 once more). Everything else — softmax and its log-sum-exp, LayerNorm, activations,
// dropout, residual adds, embedding lookups, the loss, the optimizer and the weights themselves — stays
// float32. The Linear matmuls run through oneDNN on AMX-BF16 tiles or AVX512-BF16 (src/kernels/gemm_bf16.h);
// on a CPU with neither they still run, emulated (bf16_matmul_accelerated() says which), and attention
// keeps float32 products there.
//
// Each weight is rounded to bfloat16 once per scope, on its first use (the backward reuses the
// forward's copy), so a training step opens one scope around all its forward and backward passes and
// the copies are made once per optimizer step. The contract: weights must not change while the scope
// is alive (the optimizer steps after it ends). Scopes are per thread and nest (the innermost
// precision applies; the weight copies belong to the outermost). An InferenceMode scope inside takes
// precedence for what runs inside it. A scope opened with a Bf16WeightCache (below) keeps its copies
// there, where the writer of the weights can refresh them in its own pass (tfm's trainer: Adam's update).
// Results are bitwise identical for any thread count. Error against float64 and what it means for
// training: docs/bf16.md, "Training".
//
//   {
//     tfm::Autocast scope(tfm::Precision::BFLOAT16);
//     tfm::Tensor loss = model.loss(batch);
//     loss.backward();
//   }
//   optimizer.step();
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tfm/inference.h"

namespace tfm {

// bfloat16 weight copies kept beyond one scope, for a training loop whose optimizer rounds each weight in the
// pass that updates it: that pass reads and writes every weight anyway, while rounding it at the next scope's
// first use would read it from memory once more. tfm's trainer keeps one (src/train/step.cc) and its Adam step
// refreshes the copies (detail::OptimizerShards::step_scaled).
//
// An outermost Autocast(BFLOAT16) scope opened with a cache rounds each weight into it on first use, as a scope
// without one does, unless the weight's copy is current: refreshed by its writer since the last such scope
// ended. When the scope ends every copy stops being current, since the weights may change after it. Whoever
// changes a weight after its writer refreshed the copy (loading a state dict into it, say) calls clear() before
// the next scope. A cache holds the copies and keeps the weights' storage alive until clear(); it belongs to one
// thread at a time.
class Bf16WeightCache {
 public:
  Bf16WeightCache();
  ~Bf16WeightCache();
  Bf16WeightCache(const Bf16WeightCache&) = delete;
  Bf16WeightCache& operator=(const Bf16WeightCache&) = delete;
  size_t size() const;  // weights with a copy
  void clear();         // drops the copies, and the weights' storage they keep alive
  // For the writer of a weight, outside any scope using this cache, once it has changed it: where the
  // bfloat16 copy of the n floats at data lives, when an earlier scope rounded a weight whose data is exactly
  // those n floats; null otherwise. The copy then counts as current: the writer must store there, before the
  // next scope, float_to_bf16 of each of the n values as they are then (kernels::adam_update's p16 does).
  uint16_t* refresh(const float* data, int64_t n);

 private:
  friend class Autocast;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Autocast {
 public:
  // FLOAT32 (plain float32, e.g. to turn an outer scope off) or BFLOAT16; INT8 throws
  // std::invalid_argument (int8 is for inference: InferenceMode).
  explicit Autocast(Precision precision);
  // A scope whose weight copies go into, and are reused from, `copies` (see Bf16WeightCache). Nested
  // scopes use the outermost scope's copies: an inner scope given another cache throws std::invalid_argument.
  Autocast(Precision precision, Bf16WeightCache& copies);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

  // The innermost scope's precision on this thread; FLOAT32 outside any scope.
  static Precision current_precision();
  // bfloat16 weight copies held by the outermost scope (for tests and diagnostics).
  static size_t cached_weights();

 private:
  Precision previous_;
};

// True when bfloat16 matmuls run on bf16 dot-product instructions (AVX512-BF16 or AMX-BF16); false when
// they are emulated (the same numbers up to summation order, slower). For front ends to say so.
bool bf16_matmul_accelerated();

}  // namespace tfm
