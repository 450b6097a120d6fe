// src/train/step.cc — the run's optimizer and one optimisation step (src/train/step.h).
#include "train/step.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "kernels/kernels.h"
#include "tfm/autocast.h"

namespace tfm::train {
namespace {

bool finite_grads(const std::vector<Tensor>& params) {
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const float* d = g.data();
    for (int64_t i = 0, n = g.numel(); i < n; ++i)
      if (!std::isfinite(d[i])) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Model& model) {
  const NamedTensors params = model.named_parameters();
  std::vector<bool> decayed;  // empty: every parameter
  if (c.decay_params_value() == DecayParams::MATRICES)
    for (const auto& [key, p] : params) decayed.push_back(p.dim() >= 2);
  return std::make_unique<Adam>(params, c.lr, c.beta1, c.beta2, 1e-8f, c.weight_decay,
                                c.optimizer == OptimizerKind::ADAMW, std::move(decayed));
}

}  // namespace tfm::train

namespace tfm::train {

std::pair<int64_t, int64_t> shard_rows(int64_t B, int64_t G, int64_t g) {
  const int64_t base = B / G, extra = B % G;
  const int64_t begin = g * base + std::min(g, extra);
  return {begin, begin + base + (g < extra ? 1 : 0)};
}

namespace {

// Rows [begin, end) of `b`, at its padded lengths.
data::TokenBatch slice_rows(const data::TokenBatch& b, int64_t begin, int64_t end) {
  data::TokenBatch p;
  p.B = end - begin;
  p.S = b.S;
  p.T = b.T;
  auto rows = [&](const std::vector<int32_t>& v, std::vector<int32_t>& out) {
    if (v.empty()) return;
    const int64_t width = static_cast<int64_t>(v.size()) / b.B;
    out.assign(v.begin() + begin * width, v.begin() + end * width);
  };
  rows(b.src, p.src);
  rows(b.tgt_in, p.tgt_in);
  rows(b.tgt_out, p.tgt_out);
  return p;
}

}  // namespace

Generator shard_generator(const Generator& at_start, int64_t g) {
  // Three SplitMix64 outputs (seed 0: the mix of the state x alone) over seed, offset and g.
  const auto mix = [](uint64_t x) { return kernels::splitmix64(0, x); };
  const uint64_t h = mix(mix(mix(at_start.seed) ^ at_start.offset) ^ static_cast<uint64_t>(g));
  return Generator{h, 0};
}

ShardedStep::ShardedStep(const std::vector<Tensor>& params, int64_t shards, Comm& comm)
    : params_(params), G_(shards), comm_(comm) {
  const int64_t P = comm.size();
  if (G_ < 1 || G_ % P != 0)
    throw std::invalid_argument("train: grad_shards " + std::to_string(G_) + " must be a positive multiple of the " +
                                std::to_string(P) + " processes");
  local_ = G_ / P;
  offsets_.push_back(0);
  for (const auto& p : params_) offsets_.push_back(offsets_.back() + p.numel());
  const int64_t N = offsets_.back();
  acc_.assign(static_cast<size_t>(N), 0.0f);
  if (P == 1) {
    losses_in_.assign(static_cast<size_t>(local_ + 2), 0.0);
    losses_out_.assign(static_cast<size_t>(local_ + 2), 0.0);
    return;
  }
  exchange_ = std::make_unique<BucketedExchange>(params_, offsets_, local_, comm.bucket_bytes(), comm);
  const std::vector<Bucket>& buckets = exchange_->buckets();
  for (const Bucket& b : buckets) {
    std::vector<int> off, len;
    for (int64_t c = 0; c < P; ++c) {
      off.push_back(to_int(b.bounds[static_cast<size_t>(c)], "a gradient"));
      len.push_back(to_int(b.bounds[static_cast<size_t>(c) + 1] - b.bounds[static_cast<size_t>(c)], "a gradient chunk"));
    }
    chunk_off_.push_back(std::move(off));
    chunk_len_.push_back(std::move(len));
  }
  gathers_.assign(buckets.size(), Comm::Request{});
  // Ownership: chunk `me` of each parameter's bucket, cut at the parameter's boundaries; the norm
  // blocks and who owns them.
  std::vector<size_t> bucket_of(params_.size(), 0);
  for (size_t k = 0; k < buckets.size(); ++k)
    for (int64_t p = buckets[k].first; p < buckets[k].end; ++p) bucket_of[static_cast<size_t>(p)] = k;
  const size_t me = static_cast<size_t>(comm.rank());
  rank_blocks_.resize(static_cast<size_t>(P));
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::vector<int64_t>& bounds = buckets[bucket_of[i]].bounds;
    const int64_t own_b = bounds[me], own_e = bounds[me + 1];
    param_block_.push_back(static_cast<int64_t>(block_start_.size()));
    for (int64_t s = offsets_[i]; s < offsets_[i + 1]; s += kNormBlock) {
      const int64_t owner = std::upper_bound(bounds.begin(), bounds.end(), s) - bounds.begin() - 1;
      rank_blocks_[static_cast<size_t>(owner)].push_back(static_cast<int64_t>(block_start_.size()));
      block_start_.push_back(s);
    }
    const int64_t b = std::max(own_b, offsets_[i]), e = std::min(own_e, offsets_[i + 1]);
    if (b < e) owned_.push_back(ParamRange{i, b - offsets_[i], e - offsets_[i], acc_.data() + b});
    if (offsets_[i] < std::min(b, offsets_[i + 1]))  // before the owned range
      foreign_.push_back(ParamRange{i, 0, std::min(b, offsets_[i + 1]) - offsets_[i], nullptr});
    if (std::max(e, offsets_[i]) < offsets_[i + 1])  // after it
      foreign_.push_back(ParamRange{i, std::max(e, offsets_[i]) - offsets_[i], offsets_[i + 1] - offsets_[i], nullptr});
  }
  param_block_.push_back(static_cast<int64_t>(block_start_.size()));
  partials_.assign(block_start_.size(), 0.0);
  tensor_sq_.assign(params_.size(), 0.0);
  int displ = 0;
  for (int64_t s = 0; s < P; ++s) {
    agree_displs_.push_back(displ);
    agree_counts_.push_back(to_int(local_ + 2 + static_cast<int64_t>(rank_blocks_[static_cast<size_t>(s)].size()),
                                   "the agreement"));
    displ += agree_counts_.back();
  }
  losses_in_.assign(static_cast<size_t>(agree_counts_[me]), 0.0);
  losses_out_.assign(static_cast<size_t>(displ), 0.0);
}

void ShardedStep::copy_grads(float* dst, int64_t begin, int64_t end) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t b = std::max(begin, offsets_[i]), e = std::min(end, offsets_[i + 1]);
    if (b >= e) continue;
    const Tensor g = params_[i].grad();
    if (g.defined()) std::copy(g.data() + (b - offsets_[i]), g.data() + (e - offsets_[i]), dst + (b - begin));
    else std::fill(dst + (b - begin), dst + (e - begin), 0.0f);
  }
}

float ShardedStep::part(Model& model, Generator& gen, const Generator& at_start, const BatchRows& batch, int64_t g,
                        float label_smoothing, bool& empty, BucketedExchange* exchange) {
  for (auto& p : params_) p.zero_grad();
  const auto [begin, end] = shard_rows(batch.B, G_, g);
  empty = true;
  if (begin == end) return 0.0f;
  // A part that is all the rows given (one part, G = 1) reads them in place.
  const bool whole = begin == batch.first_row && end - begin == batch.rows.B;
  data::TokenBatch sliced;
  if (!whole) sliced = slice_rows(batch.rows, begin - batch.first_row, end - batch.first_row);
  const data::TokenBatch& b = whole ? batch.rows : sliced;
  if (data::count_target_tokens(b, model.config().pad_id) == 0) return 0.0f;
  empty = false;
  // One part draws its dropout from the run's generator itself (so a run of one part computes what an
  // unsharded step always has); several parts each from their own.
  if (G_ > 1) gen = shard_generator(at_start, g);
  Tensor loss = model.loss(b, label_smoothing, batch.targets);
  const float l = loss.item();
  // A non-finite loss is kept: the folded loss decides for every rank alike.
  if (exchange) loss.backward(Tensor(), [exchange](const Tensor& leaf) { exchange->on_grad_final(leaf); });
  else loss.backward();
  return l;
}

std::pair<int64_t, int64_t> ShardedStep::rows_of(int64_t B) const {
  const int64_t first = comm_.rank() * local_;
  return {shard_rows(B, G_, first).first, shard_rows(B, G_, first + local_ - 1).second};
}

StepOutcome ShardedStep::run(Model& model, Optimizer& opt, Generator& gen, const data::TokenBatch& batch,
                             float label_smoothing, float clip_norm, Agreement& agreement) {
  const BatchRows whole{batch, 0, batch.B, data::count_target_tokens(batch, model.config().pad_id)};
  return run(model, opt, gen, whole, label_smoothing, clip_norm, agreement);
}

StepOutcome ShardedStep::run(Model& model, Optimizer& opt, Generator& gen, const BatchRows& batch,
                             float label_smoothing, float clip_norm, Agreement& agreement) {
  const Generator at_start = gen;
  const int64_t N = offsets_.back();
  const int64_t first = comm_.rank() * local_;  // this rank's parts: [first, first + local_)
  float* acc = acc_.data();
  {  // one Autocast scope for every part: each weight rounded once; the optimizer steps after it ends
    Autocast autocast(precision_, copies_);
    for (int64_t j = 0; j < local_; ++j) {
      bool empty = false;
      // Across processes the last part's backward starts each bucket's exchange as soon as it is final.
      BucketedExchange* during = j + 1 == local_ ? exchange_.get() : nullptr;
      losses_in_[static_cast<size_t>(j)] =
          part(model, gen, at_start, batch, first + j, label_smoothing, empty, during);
      if (comm_.single()) {
        // One process: fold each part's gradient as soon as it is computed (an empty part adds zeros,
        // as the chunk owners do across processes). One part: its gradient, left in the grads, is the fold.
        if (G_ == 1) continue;
        if (j == 0) {
          if (empty) std::fill(acc_.begin(), acc_.end(), 0.0f);
          else copy_grads(acc, 0, N);
          continue;
        }
        for (size_t i = 0; i < params_.size(); ++i) {
          const Tensor g = params_[i].grad();
          float* a = acc + offsets_[i];
          const int64_t n = offsets_[i + 1] - offsets_[i];
          if (empty || !g.defined()) {
            for (int64_t k = 0; k < n; ++k) a[k] += 0.0f;
          } else {
            const float* d = g.data();
            for (int64_t k = 0; k < n; ++k) a[k] += d[k];
          }
        }
      } else if (during) {
        exchange_->finish_last(empty);  // the buckets not started during the backward (all when empty)
      } else {
        exchange_->stage_part(j, empty);
      }
    }
  }
  const bool timed = !untimed_;
  untimed_ = false;
  if (!comm_.single()) return run_owned(opt, gen, at_start, clip_norm, agreement, timed);
  losses_in_[static_cast<size_t>(local_)] = agreement.stop ? 1 : 0;
  losses_in_[static_cast<size_t>(local_ + 1)] = agreement.time_up ? 1 : 0;
  comm_.allgather(losses_in_.data(), static_cast<int>(local_ + 2), losses_out_.data(), /*timed=*/true);
  if (G_ > 1) gen = Generator{at_start.seed, at_start.offset + 1};
  agreement.time_up = losses_out_[static_cast<size_t>(local_ + 1)] != 0;
  agreement.stop = losses_out_[static_cast<size_t>(local_)] != 0;

  StepOutcome r;
  float loss = static_cast<float>(losses_out_[0]);
  for (int64_t g = 1; g < G_; ++g) loss += static_cast<float>(losses_out_[static_cast<size_t>(g)]);
  r.loss = loss;
  r.loss_finite = r.finite = std::isfinite(loss);
  float grad_scale = 1.0f;
  if (r.finite) {
    for (size_t i = 0; G_ > 1 && i < params_.size(); ++i) {  // the fold into the grads
      Tensor& slot = params_[i].mutable_grad();
      if (!slot.defined()) slot = Tensor::empty(params_[i].shape());
      std::copy(acc + offsets_[i], acc + offsets_[i + 1], slot.data());
    }
    if (clip_norm > 0) {
      // Clipping and the optimizer in one pass over the elements: the optimizer reads each grad times
      // the clip factor (the bits of clip_grad_norm's in-place scaling, then opt.step()).
      const float total = grad_norm(params_);
      r.finite = std::isfinite(total);
      grad_scale = std::min(clip_coefficient(total, clip_norm), 1.0f);
    } else {
      r.finite = finite_grads(params_);
    }
  }
  if (r.finite) {
    detail::OptimizerShards::step_scaled(opt, grad_scale, &copies_);  // and the weights' bf16 copies
    if (average_) average_->update(params_);
  }
  opt.zero_grad();
  return r;
}

StepOutcome ShardedStep::run_owned(Optimizer& opt, Generator& gen, const Generator& at_start, float clip_norm,
                                   Agreement& agreement, bool timed) {
  exchange_->fold(acc_.data(), timed);  // this rank's chunks of acc_: the left fold over the G parts
  const size_t me = static_cast<size_t>(comm_.rank());
  // The agreement: this rank's part losses (set by run), its flags and its blocks' norm partials (an
  // owned range starts at a block start and ends at a parameter's end or at a block start, so its
  // blocks are whole norm blocks, in the order of rank_blocks_).
  losses_in_[static_cast<size_t>(local_)] = agreement.stop ? 1 : 0;
  losses_in_[static_cast<size_t>(local_ + 1)] = agreement.time_up ? 1 : 0;
  double* out = losses_in_.data() + local_ + 2;
  for (const ParamRange& o : owned_) {
    norm_block_partials(o.grad, o.end - o.begin, out);
    out += (o.end - o.begin + kNormBlock - 1) / kNormBlock;
  }
  comm_.allgatherv(losses_in_.data(), agree_counts_[me], losses_out_.data(), agree_counts_.data(),
                   agree_displs_.data(), /*timed=*/true);
  gen = Generator{at_start.seed, at_start.offset + 1};
  const int64_t P = comm_.size();
  agreement.time_up = losses_out_[static_cast<size_t>(local_ + 1)] != 0;
  agreement.stop = false;
  for (int64_t s = 0; s < P; ++s)
    agreement.stop |= losses_out_[static_cast<size_t>(agree_displs_[static_cast<size_t>(s)] + local_)] != 0;

  StepOutcome r;
  float grad_scale = 1.0f;
  auto part_loss = [&](int64_t g) {
    return static_cast<float>(losses_out_[static_cast<size_t>(agree_displs_[static_cast<size_t>(g / local_)] + g % local_)]);
  };
  float loss = part_loss(0);
  for (int64_t g = 1; g < G_; ++g) loss += part_loss(g);
  r.loss = loss;
  r.loss_finite = r.finite = std::isfinite(loss);
  if (r.finite) {
    // Every rank rebuilds the norm from all the partials, so every rank decides alike.
    bool finite_partials = true;
    for (int64_t s = 0; s < P; ++s) {
      const double* in = losses_out_.data() + agree_displs_[static_cast<size_t>(s)] + local_ + 2;
      for (const int64_t k : rank_blocks_[static_cast<size_t>(s)]) {
        partials_[static_cast<size_t>(k)] = *in++;
        finite_partials &= std::isfinite(partials_[static_cast<size_t>(k)]);
      }
    }
    if (clip_norm > 0) {
      for (size_t i = 0; i < params_.size(); ++i) {
        double sq = 0;
        for (int64_t k = param_block_[i]; k < param_block_[i + 1]; ++k) sq += partials_[static_cast<size_t>(k)];
        tensor_sq_[i] = sq;
      }
      const float total = total_grad_norm(tensor_sq_);
      r.finite = std::isfinite(total);
      // The optimizer reads each owned grad times the factor (the bits of scaling acc_ in place first).
      grad_scale = std::min(clip_coefficient(total, clip_norm), 1.0f);
    } else {
      r.finite = finite_partials;  // a partial is finite exactly when its elements are
    }
  }
  if (r.finite) {
    detail::OptimizerShards::step(opt, owned_, grad_scale);
    if (average_) average_->update(params_, owned_);  // this rank's elements, stepped just now
    // The updated parameters: this rank's slice into acc_ (its gradient is spent), then everyone's.
    gather(params_, /*timed=*/true);
  }
  opt.zero_grad();
  return r;
}

void ShardedStep::gather(const std::vector<Tensor>& t, bool timed) {
  for (const ParamRange& o : owned_) {
    float* dst = acc_.data() + offsets_[o.param] + o.begin;
    const Tensor& src = t[o.param];
    if (src.defined()) std::copy(src.data() + o.begin, src.data() + o.end, dst);
    else std::fill(dst, dst + (o.end - o.begin), 0.0f);
  }
  // One allgatherv per bucket, in place (each rank's chunk of a bucket is contiguous), all started
  // before the first wait so that their latencies overlap.
  const size_t me = static_cast<size_t>(comm_.rank());
  for (size_t k = 0; k < gathers_.size(); ++k)
    gathers_[k] = comm_.start_allgatherv(acc_.data() + chunk_off_[k][me], chunk_len_[k][me], acc_.data(),
                                         chunk_len_[k].data(), chunk_off_[k].data());
  for (Comm::Request& g : gathers_) comm_.wait(g, timed);
  for (const ParamRange& f : foreign_) {
    Tensor dst = t[f.param];  // a handle on the same storage
    if (!dst.defined()) continue;
    const float* src = acc_.data() + offsets_[f.param];
    std::copy(src + f.begin, src + f.end, dst.data() + f.begin);
  }
}

void ShardedStep::gather_optimizer_state(Optimizer& opt) {
  if (comm_.single()) return;
  for (const std::vector<Tensor>& slot : detail::OptimizerShards::state_slots(opt)) gather(slot, /*timed=*/true);
}

void ShardedStep::gather_elements(const std::vector<Tensor>& t) {
  if (comm_.single()) return;
  gather(t, /*timed=*/true);
}

}  // namespace tfm::train
