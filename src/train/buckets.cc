// src/train/buckets.cc — the bucketed gradient exchange (src/train/buckets.h).
#include "train/buckets.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

namespace tfm::train {
int to_int(int64_t n, const char* what) {
  if (n > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string("train: ") + what + " of " + std::to_string(n) +
                                " floats exceeds what one MPI message counts (2^31 - 1); use more processes");
  return static_cast<int>(n);
}

std::vector<int64_t> chunk_bounds(const std::vector<int64_t>& offsets, int64_t b0, int64_t b1, int64_t P) {
  std::vector<int64_t> starts;  // the norm blocks' starts in [b0, b1), ascending, then b1
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    if (offsets[i] >= b0 && offsets[i + 1] <= b1)
      for (int64_t s = offsets[i]; s < offsets[i + 1]; s += kNormBlock) starts.push_back(s);
  starts.push_back(b1);
  std::vector<int64_t> bounds{b0};
  for (int64_t c = 1; c < P; ++c) {
    const int64_t target = b0 + c * (b1 - b0) / P;
    auto it = std::lower_bound(starts.begin(), starts.end(), target);  // the first start ≥ target
    int64_t best = *it;
    if (it != starts.begin() && target - *std::prev(it) <= best - target) best = *std::prev(it);
    bounds.push_back(std::max(best, bounds.back()));
  }
  bounds.push_back(b1);
  return bounds;
}

std::vector<Bucket> make_buckets(const std::vector<int64_t>& offsets, int64_t bucket_elems, int64_t P) {
  if (bucket_elems < 1 || P < 1)
    throw std::invalid_argument("make_buckets: bucket of " + std::to_string(bucket_elems) + " elements for " +
                                std::to_string(P) + " processes");
  std::vector<Bucket> buckets;
  int64_t i = static_cast<int64_t>(offsets.size()) - 1;  // parameters [0, i) are not in a bucket yet
  auto numel = [&](int64_t p) { return offsets[static_cast<size_t>(p) + 1] - offsets[static_cast<size_t>(p)]; };
  while (i > 0) {
    Bucket b;
    b.end = i;
    int64_t size = numel(--i);
    while (i > 0 && size < bucket_elems) size += numel(--i);
    b.first = i;
    b.bounds = chunk_bounds(offsets, offsets[static_cast<size_t>(b.first)], offsets[static_cast<size_t>(b.end)], P);
    buckets.push_back(std::move(b));
  }
  return buckets;
}

BucketedExchange::BucketedExchange(const std::vector<Tensor>& params, const std::vector<int64_t>& offsets,
                                   int64_t local_parts, int64_t bucket_bytes, Comm& comm)
    : params_(params), offsets_(offsets), local_(local_parts), G_(local_parts * comm.size()), comm_(comm) {
  const int64_t P = comm.size(), r = comm.rank(), N = offsets_.back();
  buckets_ = make_buckets(offsets_, std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float))), P);
  bucket_of_.assign(params_.size(), 0);
  for (size_t k = 0; k < buckets_.size(); ++k)
    for (int64_t p = buckets_[k].first; p < buckets_[k].end; ++p) bucket_of_[static_cast<size_t>(p)] = k;
  for (size_t p = 0; p < params_.size(); ++p) index_of_[params_[p].impl()] = p;
  to_int(local_ * N, "the gradients to send");
  send_.assign(static_cast<size_t>(local_ * N), 0.0f);
  int64_t received = 0;
  for (const Bucket& b : buckets_) {
    const int64_t mine = b.bounds[static_cast<size_t>(r) + 1] - b.bounds[static_cast<size_t>(r)];
    recv_base_.push_back(received);
    std::vector<int> sc, sd, rc, rd;
    for (int64_t c = 0; c < P; ++c) {
      const int64_t len = b.bounds[static_cast<size_t>(c) + 1] - b.bounds[static_cast<size_t>(c)];
      sc.push_back(to_int(local_ * len, "a gradient message"));
      sd.push_back(to_int(local_ * b.bounds[static_cast<size_t>(c)], "a gradient message offset"));
      rc.push_back(to_int(local_ * mine, "a gradient message"));
      rd.push_back(to_int(received + c * local_ * mine, "a gradient message offset"));
    }
    // This rank's own parts of its chunk are staged straight into recv_, not sent to itself.
    sc[static_cast<size_t>(r)] = rc[static_cast<size_t>(r)] = 0;
    received += G_ * mine;
    send_counts_.push_back(std::move(sc));
    send_displs_.push_back(std::move(sd));
    recv_counts_.push_back(std::move(rc));
    recv_displs_.push_back(std::move(rd));
  }
  to_int(received, "the received gradients");
  recv_.assign(static_cast<size_t>(received), 0.0f);
  waiting_.assign(buckets_.size(), 0);
  for (size_t k = 0; k < buckets_.size(); ++k) waiting_[k] = buckets_[k].end - buckets_[k].first;
  requests_.assign(buckets_.size(), Comm::Request{});
}

void BucketedExchange::stage(size_t k, int64_t j, bool empty) {
  const Bucket& b = buckets_[k];
  const size_t me = static_cast<size_t>(comm_.rank());
  for (size_t c = 0; c + 1 < b.bounds.size(); ++c) {
    const int64_t begin = b.bounds[c], end = b.bounds[c + 1];
    // Part j's slice of chunk c: send_[local·begin + j·len ...), so each destination's parts are
    // contiguous; of chunk `me`, where the exchange would have put it: part (me·local + j) of recv_.
    float* dst = c == me ? recv_.data() + recv_base_[k] + (static_cast<int64_t>(me) * local_ + j) * (end - begin)
                         : send_.data() + local_ * begin + j * (end - begin);
    if (empty) {
      std::fill(dst, dst + (end - begin), 0.0f);
      continue;
    }
    // The last part's own chunk stays in the grads, where fold reads it; only the parameters
    // without a gradient are written (zeros).
    const bool in_grads = c == me && j == local_ - 1;
    for (int64_t p = b.first; p < b.end; ++p) {
      const int64_t o = offsets_[static_cast<size_t>(p)];
      const int64_t lo = std::max(begin, o), hi = std::min(end, offsets_[static_cast<size_t>(p) + 1]);
      if (lo >= hi) continue;
      const Tensor g = params_[static_cast<size_t>(p)].grad();
      if (!g.defined()) std::fill(dst + (lo - begin), dst + (hi - begin), 0.0f);
      else if (!in_grads) std::copy(g.data() + (lo - o), g.data() + (hi - o), dst + (lo - begin));
    }
  }
}

void BucketedExchange::start(size_t k) {
  requests_[k] = comm_.start_alltoallv(send_.data(), send_counts_[k].data(), send_displs_[k].data(), recv_.data(),
                                       recv_counts_[k].data(), recv_displs_[k].data());
}

void BucketedExchange::stage_part(int64_t j, bool empty) {
  for (size_t k = 0; k < buckets_.size(); ++k) stage(k, j, empty);
}

void BucketedExchange::on_grad_final(const Tensor& leaf) {
  const auto found = index_of_.find(leaf.impl());
  if (found != index_of_.end()) --waiting_[bucket_of_[found->second]];
  while (next_ < buckets_.size() && waiting_[next_] == 0) {
    stage(next_, local_ - 1, /*empty=*/false);
    start(next_++);
  }
  comm_.progress();
}

void BucketedExchange::finish_last(bool empty) {
  last_in_grads_ = !empty;
  for (; next_ < buckets_.size(); ++next_) {
    stage(next_, local_ - 1, empty);
    start(next_);
  }
}

void BucketedExchange::fold(float* acc, bool timed_first) {
  const size_t me = static_cast<size_t>(comm_.rank());
  const int64_t last = (static_cast<int64_t>(me) + 1) * local_ - 1;  // this rank's last part
  for (size_t k = 0; k < buckets_.size(); ++k) {
    comm_.wait(requests_[k], k == 0 ? timed_first : true);
    const Bucket& b = buckets_[k];
    const int64_t begin = b.bounds[me], len = b.bounds[me + 1] - begin;
    const float* in = recv_.data() + recv_base_[k];
    // Parameter by parameter (the last part's gradient may still be in the grads): part 0 + part 1
    // in one pass (a copy when G = 1), then + part 2, ... .
    for (int64_t p = b.first; p < b.end; ++p) {
      const int64_t o = offsets_[static_cast<size_t>(p)];
      const int64_t lo = std::max(begin, o), hi = std::min(begin + len, offsets_[static_cast<size_t>(p) + 1]);
      if (lo >= hi) continue;
      const Tensor grad = params_[static_cast<size_t>(p)].grad();
      auto part = [&](int64_t g) -> const float* {
        if (g == last && last_in_grads_ && grad.defined()) return grad.data() + (lo - o);
        return in + g * len + (lo - begin);
      };
      float* dst = acc + lo;
      const int64_t n = hi - lo;
      const float* p0 = part(0);
      if (G_ == 1) {
        std::copy(p0, p0 + n, dst);
      } else {
        const float* p1 = part(1);
        for (int64_t i = 0; i < n; ++i) dst[i] = p0[i] + p1[i];
      }
      for (int64_t g = 2; g < G_; ++g) {
        const float* pg = part(g);
        for (int64_t i = 0; i < n; ++i) dst[i] += pg[i];
      }
    }
  }
  for (size_t k = 0; k < buckets_.size(); ++k) waiting_[k] = buckets_[k].end - buckets_[k].first;
  next_ = 0;
}

}  // namespace tfm::train
