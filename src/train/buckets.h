// src/train/buckets.h — the gradient exchange of a data-parallel step (src/train/step.h) cut into
// buckets, each sent while the backward of the layers below it still runs. Internal.
//
// The flat gradient vector holds the parameters in the optimizer's order, parameter i at
// [offsets[i], offsets[i + 1]). It is cut into buckets of consecutive parameters of about
// bucket_bytes each (make_buckets), from the last parameter backwards: the backward finishes the last
// parameters (the output projection, the top layers) first, so bucket 0 holds them and is ready first.
// Each bucket is cut into P chunks on norm-block starts (chunk_bounds): rank r owns chunk r of every
// bucket. The fold of chunk c over the G parts is element-wise, so neither the bucket size nor the
// chunk boundaries change a bit of the result; the block-aligned boundaries let a chunk's owner
// compute whole norm blocks of the clip norm.
//
// A bucket's exchange (one alltoallv: every rank sends its G/P parts' slices of chunk c to rank c)
// starts during the backward of the rank's last part, as soon as every parameter of the bucket is
// final (Tensor::backward's on_grad_final) and every earlier bucket has started: the buckets start
// in index order on every rank, whatever the graph, as MPI requires of collectives.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "optim_shards.h"
#include "tfm/tensor.h"
#include "tfm/train/comm.h"

namespace tfm::train {

// n as an MPI count; throws std::invalid_argument naming `what` when n exceeds 2^31 − 1.
int to_int(int64_t n, const char* what);

// The P chunks of the flat range [b0, b1) of the gradient (a bucket: whole parameters, parameter i at
// [offsets[i], offsets[i + 1])): P + 1 boundaries, the first b0, the last b1, boundary c the start of
// a norm block (offsets[i] + k·kNormBlock, src/optim_shards.h) nearest to b0 + c·(b1 − b0)/P (the lower on a
// tie, and never below boundary c − 1), so no norm block straddles two chunks. A chunk may be empty.
std::vector<int64_t> chunk_bounds(const std::vector<int64_t>& offsets, int64_t b0, int64_t b1, int64_t P);

struct Bucket {
  int64_t first = 0, end = 0;   // parameters [first, end)
  std::vector<int64_t> bounds;  // (P + 1) chunk_bounds: chunk c is [bounds[c], bounds[c + 1])
};

// The buckets of `offsets` (n + 1 flat positions for n parameters) for P ranks: bucket k covers
// parameters [first, end) with bucket k + 1 just before it. A bucket takes parameters until it holds
// at least bucket_elems (≥ 1) elements (DDP's rule: it exceeds that by less than its last parameter),
// so small parameters (biases, norms) join their neighbour matrix instead of making buckets of their own.
std::vector<Bucket> make_buckets(const std::vector<int64_t>& offsets, int64_t bucket_elems, int64_t P);

// The exchange of one step's gradients, bucket by bucket. Per step:
//   stage_part(j, empty) for each part j < local − 1 after its backward;
//   for the last part j = local − 1: its backward with on_grad_final as the callback (or none when
//   the part is empty), then finish_last(empty), which stages and starts the buckets not started;
//   fold(acc, timed) waits for each bucket in order and folds its G slices into acc.
// The buffers are allocated once, here. With one process every exchange is a copy.
class BucketedExchange {
 public:
  BucketedExchange(const std::vector<Tensor>& params, const std::vector<int64_t>& offsets, int64_t local_parts,
                   int64_t bucket_bytes, Comm& comm);
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // Part j's gradients (the parameters' grads now; zeros when `empty`) into the send buffer.
  void stage_part(int64_t j, bool empty);
  // Tensor::backward's callback during the last part: marks the leaf's parameter final, starts
  // every bucket that is now complete and next in order, and drives the started exchanges.
  void on_grad_final(const Tensor& leaf);
  // After the last part's backward (or, for an empty part, instead of it): stages the last part's
  // slices of the buckets not started yet (zeros when `empty`) and starts them, in order.
  void finish_last(bool empty);
  // Waits for each bucket's exchange in order (the first wait timed as `timed_first`, the others
  // timed) and folds its G slices in part order into acc[owned range]: acc = g₀, then += g₁, ... .
  // acc holds the flat vector (N floats); only this rank's chunks are written. The last part's own
  // slices are read from the parameters' grads, which must not change between its backward and this.
  void fold(float* acc, bool timed_first);
  // The buckets started so far this step (tests: the callbacks start them during the backward).
  size_t started() const { return next_; }

 private:
  void stage(size_t k, int64_t j, bool empty);  // part j's slices of bucket k
  void start(size_t k);

  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;      // parameter → its bucket
  std::unordered_map<const TensorImpl*, size_t> index_of_;  // a leaf → its parameter
  int64_t local_, G_;
  Comm& comm_;
  // (local·N) per-destination slices (this rank's own chunks unused), (G·owned) received slices
  std::vector<float> send_, recv_;
  std::vector<int64_t> recv_base_;     // bucket k's received slices at recv_[recv_base_[k] ...)
  std::vector<std::vector<int>> send_counts_, send_displs_, recv_counts_, recv_displs_;  // per bucket, per rank
  // Per step (reset by fold): the last part's parameters not yet final per bucket, the next bucket
  // to start, the started requests.
  std::vector<int64_t> waiting_;
  size_t next_ = 0;
  std::vector<Comm::Request> requests_;
  bool last_in_grads_ = false;  // the last part's own chunks are read from the grads (it was not empty)
};

}  // namespace tfm::train
