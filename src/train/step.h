// src/train/step.h — one optimisation step: forward, loss, backward, clipping, optimizer. Internal.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/models/model.h"
#include "tfm/optim.h"
#include "tfm/random.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"

namespace tfm::train {

struct StepOutcome {
  float loss = 0;            // the batch's mean loss (label smoothing included)
  bool loss_finite = true;   // the loss is finite
  bool finite = true;        // the loss and the gradient are finite: the step was taken
};

// loss = model.loss(batch, label_smoothing); backward; clip the gradient norm to clip_norm (0: only
// check that it is finite); then, when everything is finite, opt.step(). Gradients are zeroed after
// (a non-finite step changes nothing). `params` are the model's parameters, in the optimizer's order.
// The run's optimizer over model.named_parameters(): Adam or AdamW with c.lr, β1 c.beta1, β2 c.beta2,
// eps 1e-8 (torch's default), weight decay c.weight_decay on the parameters c.decay_params_value()
// selects (MATRICES: those with two or more dimensions).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Model& model);

StepOutcome train_step(Model& model, Optimizer& opt, const std::vector<Tensor>& params, const data::TokenBatch& batch,
                       float label_smoothing, float clip_norm);

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
//     parameter a part does not reach has a zero gradient there). Across processes the flat vector
//     is cut into P chunks; every rank sends each of its parts' chunk c to rank c (alltoallv), rank
//     c folds chunk c over the G parts in order, and the folded chunks are gathered (allgatherv);
//     element by element that is the same fold, hence the same bits;
//   - the step's loss is the left fold of the part losses in float32; then clipping, the finite check
//     and the optimizer step on the folded gradient as train_step;
//   - afterwards `gen` is (seed, offset + 1) of its state at the start: dropout draws never depend
//     on who computed which part.
// The flat buffers are allocated once, here.
class ShardedStep {
 public:
  // Decisions every rank takes together, sent with the part losses: in, this rank's view; out, the
  // run's (stop: any rank's; time_up: rank 0's).
  struct Agreement {
    bool stop = false, time_up = false;
  };
  ShardedStep(const std::vector<Tensor>& params, int64_t shards, Comm& comm);
  StepOutcome run(Model& model, Optimizer& opt, Generator& gen, const data::TokenBatch& batch, float label_smoothing,
                  float clip_norm, Agreement& agreement);
  // The next step's first wait has no deadline (rank 0 may still be writing a checkpoint, which takes
  // as long as it takes); later waits have comm.timeout() again. The first step's first wait has none
  // either: the ranks finish loading at different times.
  void untimed_next() { untimed_ = true; }

 private:
  // Part g's loss (a float) after its backward, its gradient left in the parameters' grads; 0 and
  // no gradient for an empty part.
  float part(Model& model, Generator& gen, const Generator& at_start, const data::TokenBatch& batch, int64_t g,
             int64_t normalizer, float label_smoothing, bool& empty);
  void copy_grads(float* dst, int64_t begin, int64_t end) const;  // flat [begin, end) of the grads

  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // params_[i]'s gradient at flat [offsets_[i], offsets_[i + 1])
  int64_t G_, local_;             // parts, and parts per rank
  Comm& comm_;
  std::vector<float> acc_;        // (N) the folded gradient
  std::vector<float> send_, recv_;  // P > 1: (local·N) per-destination chunks, (G·chunk) received
  std::vector<int> chunk_off_, chunk_len_;  // chunk c of the flat vector, per rank
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
  std::vector<double> losses_in_, losses_out_;  // per rank: its part losses, stop, time_up
  bool untimed_ = true;  // the first step: the ranks start at different times
};

}  // namespace tfm::train
