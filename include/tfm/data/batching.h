// tfm/data/batching.h — encoded examples, length-bucketed batch plans, and TokenBatch assembly.
//
// An epoch's plan is a pure function of (examples' lengths, batch settings, seed, epoch): shuffle
// the example order (Fisher–Yates from mix_seed(seed, epoch)), cut it into pools of 64 batches'
// worth, sort each pool by length (stable), cut pools into batches, then shuffle the batch order.
// Sorting inside a pool keeps similar lengths together, so padding stays small, while the pools keep
// the order random between epochs. Resuming at (epoch, batch k) recomputes the plan and starts at k.
// Evaluation plans (shuffle = false) sort the whole set by length and keep the indices, so results
// can be put back in file order.
//
// Batch size: by count (batch_size examples) or, when batch_tokens > 0, as many examples as keep
// count · (longest side + 1) ≤ batch_tokens (at least one example per batch).
#pragma once

#include <cstdint>
#include <vector>

#include <string>

namespace tfm::data {

// A batch of token ids, row-major, padded with pad_id.
struct TokenBatch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> src;      // (B, S)
  std::vector<int32_t> tgt_in;   // (B, T): bos + target (SHIFTED); empty for PER_POSITION
  std::vector<int32_t> tgt_out;  // (B, T): target + eos (SHIFTED); (B, S) targets for PER_POSITION
};

// How targets sit against the model's input.
//   PER_POSITION  one target per source position (an encoder): target length = source length, T = S.
//   SHIFTED       a decoder reads bos + target and predicts target + eos: T = longest target + 1.
enum class TargetLayout { PER_POSITION, SHIFTED };

struct Example {
  std::vector<int32_t> src;  // (S) ids, no bos/eos
  std::vector<int32_t> tgt;  // (T) ids, no bos/eos
};

struct BatchSettings {
  int64_t batch_size = 128;  // examples per batch (used when batch_tokens == 0)
  int64_t batch_tokens = 0;  // padded tokens per batch; 0 = use batch_size
};

using BatchPlan = std::vector<std::vector<int64_t>>;  // batches of example indices

BatchPlan plan_epoch(const std::vector<Example>& examples, const BatchSettings& settings, uint64_t seed,
                     int64_t epoch);
BatchPlan plan_eval(const std::vector<Example>& examples, const BatchSettings& settings);

// Pads the chosen examples into a TokenBatch laid out as `layout` says (PER_POSITION throws naming
// the example when its target and source lengths differ).
TokenBatch make_batch(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                      TargetLayout layout, int32_t pad_id, int32_t bos_id, int32_t eos_id);
// Rows [r0, r1) of that batch alone (B = r1 − r0), padded to the whole batch's S and T: what one
// process of a data-parallel run builds of the rows it computes.
TokenBatch make_batch_rows(const std::vector<Example>& examples, const std::vector<int64_t>& indices, int64_t r0,
                           int64_t r1, TargetLayout layout, int32_t pad_id, int32_t bos_id, int32_t eos_id);

// Target tokens a batch contributes to the loss (non-pad entries of tgt_out).
int64_t count_target_tokens(const TokenBatch& batch, int32_t pad_id);
// The same for make_batch(examples, indices, layout, pad_id, ., eos_id), without building it.
int64_t count_target_tokens(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                            TargetLayout layout, int32_t pad_id, int32_t eos_id);

}  // namespace tfm::data
