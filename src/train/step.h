// src/train/step.h — one optimisation step: forward, loss, backward, clipping, optimizer. Internal.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "optim_shards.h"
#include "tfm/autocast.h"
#include "tfm/data/batching.h"
#include "tfm/models/model.h"
#include "tfm/optim.h"
#include "tfm/random.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"
#include "train/buckets.h"
#include "train/ema.h"

namespace tfm::train {

struct StepOutcome {
  float loss = 0;            // the batch's mean loss (label smoothing included)
  bool loss_finite = true;   // the loss is finite
  bool finite = true;        // the loss and the gradient are finite: the step was taken
};

// The run's optimizer over model.named_parameters(): Adam or AdamW with c.lr, β1 c.beta1, β2 c.beta2,
// eps 1e-8 (torch's default), weight decay c.weight_decay on the parameters c.decay_params_value()
// selects (MATRICES: those with two or more dimensions).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Model& model);



// The rows [begin, end) of part g of B rows cut into G parts as evenly as possible, earlier parts
// taking the extra rows (a part is empty when G > B).
std::pair<int64_t, int64_t> shard_rows(int64_t B, int64_t G, int64_t g);
// The generator part g of a sharded step draws its dropout from: a pure function of the run
// generator's state at the start of the step and g.
Generator shard_generator(const Generator& at_start, int64_t g);

// One optimisation step whose batch is cut into G parts by rows (shard_rows), the same numbers for
// every process count P dividing G (rank r computes parts [r·G/P, (r+1)·G/P)):
//   - part g's loss is Σ of its token losses / the whole batch's target-token count (Model::loss's
//     normalizer), its dropout drawn from shard_generator(gen at the step's start, g); an empty part
//     (no rows, or no target token) has loss 0 and a zero gradient;
//   - the gradient is the left fold over the parts in order, in float32: part 0's gradient, + part
//     1's, ..., + part G−1's, over the flat vector of every parameter's gradient (params' order; a
//     parameter a part does not reach has a zero gradient there);
//   - the step's loss is the left fold of the part losses in float32; then clipping (clip_grad_norm's
//     blockwise norm), the finite check (a non-finite step changes nothing) and the optimizer step on the folded gradient,
//     every parameter having a gradient;
//   - then, with an average (set_average), its update on the updated weights (a step not taken is no
//     update);
//   - afterwards (G > 1) `gen` is (seed, offset + 1) of its state at the start: dropout draws never
//     depend on who computed which part.
// One process folds each part's gradient as soon as it is computed; with one part (G = 1) that is the
// plain step — loss, backward, clipping, the finite check, opt.step() — and its dropout draws from `gen`
// itself, so a run of one process and one part computes what an unsharded step computes. This is the
// trainer's only step: one process is one rank holding every part. Across
// processes the flat vector is cut into buckets of about comm.bucket_bytes() and each bucket into P
// chunks (src/train/buckets.h); rank c owns chunk c of every bucket: every rank sends each of its
// parts' chunk c to rank c (one alltoallv per bucket, started during the backward of the rank's last
// part as soon as the bucket's gradients are final), rank c folds its chunks over the G parts in order
// and computes the norm partials of its blocks; the partials are gathered with the part losses
// (allgatherv), so every rank computes the same total norm, clipping coefficient and finite decision;
// rank c clips its chunks and runs the optimizer on its elements only (detail::OptimizerShards::step,
// src/optim_shards.h), and the updated parameters are gathered (one allgatherv per bucket, all started
// at once). Element by element that is the same fold, norm and update, hence the same bits, whatever P
// and the bucket size.
// The flat buffers are allocated once, here.
class ShardedStep {
 public:
  // Decisions every rank takes together, sent with the part losses: in, this rank's view; out, the
  // run's (stop: any rank's; time_up: rank 0's).
  struct Agreement {
    bool stop = false, time_up = false;
  };
  ShardedStep(const std::vector<Tensor>& params, int64_t shards, Comm& comm);
  ShardedStep(const ShardedStep&) = delete;  // owned_ points into acc_
  ShardedStep& operator=(const ShardedStep&) = delete;
  StepOutcome run(Model& model, Optimizer& opt, Generator& gen, const data::TokenBatch& batch, float label_smoothing,
                  float clip_norm, Agreement& agreement);
  // Rows [first_row, first_row + rows.B) of a batch of B rows (padded to its lengths) whose target
  // tokens number `targets`: what a rank builds of each batch (rows_of says which rows it needs).
  struct BatchRows {
    const data::TokenBatch& rows;
    int64_t first_row = 0, B = 0, targets = 0;
  };
  StepOutcome run(Model& model, Optimizer& opt, Generator& gen, const BatchRows& batch, float label_smoothing,
                  float clip_norm, Agreement& agreement);
  // The rows [begin, end) of a batch of B rows that this rank's parts cover.
  std::pair<int64_t, int64_t> rows_of(int64_t B) const;
  // The next step's first wait has no deadline (rank 0 may still be writing a checkpoint, which takes
  // as long as it takes); later waits have comm.timeout() again. The first step's first wait has none
  // either: the ranks finish loading at different times.
  void untimed_next() { untimed_ = true; }
  // Several processes: each rank's optimizer state is current only on the elements it owns; this
  // gathers every slot (detail::OptimizerShards::state_slots) so that every rank's opt.state_dict() is
  // the whole state.
  // Every rank calls it, before any state is saved. Its waits keep comm.timeout(): the ranks arrive
  // together (from the evaluation's gather or the step's agreement, before rank 0 writes anything),
  // so a rank that stopped meanwhile is still detected. Nothing to do in one process.
  void gather_optimizer_state(Optimizer& opt);
  // The weights' average (src/train/ema.h) each step updates after its optimizer step, on the
  // elements this rank steps (every element in one process); null: none. Not owned.
  void set_average(WeightAverage* average) { average_ = average; }
  // The matmuls' precision (TrainConfig::dtype; tfm/autocast.h): every part's forward and backward run in one
  // tfm::Autocast scope, so each weight is rounded to bfloat16 once per step. In one process the scope keeps the
  // copies in copies_, and Adam's update refreshes them as it writes the weights: no step reads a weight again
  // just to round it. Across processes each rank steps only its own elements, so the scope rounds them.
  void set_precision(Precision precision) { precision_ = precision; }
  // Several processes: each rank's elements of `t` (one tensor per parameter, e.g. the average's)
  // gathered into every rank's `t`, as gather_optimizer_state does for the optimizer's slots. Every
  // rank calls it; nothing to do in one process.
  void gather_elements(const std::vector<Tensor>& t);

 private:
  // Part g's loss (a float) after its backward, its gradient left in the parameters' grads; 0 and
  // no gradient for an empty part.
  // With `exchange`, the backward reports each final parameter gradient to it (the last local part).
  float part(Model& model, Generator& gen, const Generator& at_start, const BatchRows& batch, int64_t g,
             float label_smoothing, bool& empty, BucketedExchange* exchange = nullptr);
  void copy_grads(float* dst, int64_t begin, int64_t end) const;  // flat [begin, end) of the grads
  // P > 1, after this rank's parts: the exchange, the fold of the owned chunks, the agreement with the
  // norm partials, clipping and the optimizer step on the owned elements, the parameters' gather.
  StepOutcome run_owned(Optimizer& opt, Generator& gen, const Generator& at_start, float clip_norm,
                        Agreement& agreement, bool timed);
  // Every rank's owned elements of the tensors t (one per parameter; undefined ones read as zeros) are
  // gathered into acc_ and copied into the elements of t this rank does not own.
  void gather(const std::vector<Tensor>& t, bool timed);

  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // params_[i]'s gradient at flat [offsets_[i], offsets_[i + 1])
  int64_t G_, local_;             // parts, and parts per rank
  Comm& comm_;
  std::vector<float> acc_;  // (N) the folded gradient; P > 1: this rank's chunks of it, then the gathers
  std::unique_ptr<BucketedExchange> exchange_;  // P > 1: the buckets and the gradient exchange
  std::vector<std::vector<int>> chunk_off_, chunk_len_;  // P > 1: per bucket, chunk c's place in the flat vector
  std::vector<Comm::Request> gathers_;                   // P > 1: per bucket, its gather
  // P > 1: ownership, as lists of flat ranges (one per parameter: each lies in one bucket).
  // owned_ are this rank's elements (grads in acc_), foreign_ the others (grad null); the norm blocks:
  // block k starts at flat block_start_[k], parameter i has blocks [param_block_[i], param_block_[i + 1]);
  // rank s owns the blocks rank_blocks_[s], listed in the order of its owned ranges (the order its
  // partials travel in the agreement).
  std::vector<ParamRange> owned_, foreign_;
  std::vector<int64_t> block_start_, param_block_;
  std::vector<std::vector<int64_t>> rank_blocks_;
  std::vector<double> partials_, tensor_sq_;  // (blocks), (params)
  // Per rank: its part losses, stop, time_up, then (P > 1) the partials of its blocks.
  std::vector<double> losses_in_, losses_out_;
  std::vector<int> agree_counts_, agree_displs_;  // P > 1: rank s's doubles in losses_out_
  bool untimed_ = true;  // the first step: the ranks start at different times
  WeightAverage* average_ = nullptr;
  Precision precision_ = Precision::FLOAT32;
  Bf16WeightCache copies_;  // the bfloat16 weight copies (bf16, one process), see set_precision
};

}  // namespace tfm::train
