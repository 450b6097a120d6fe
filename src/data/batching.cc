// src/data/batching.cc — batch plans and TokenBatch assembly (see tfm/data/batching.h).
#include "tfm/data/batching.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "tfm/data/tasks.h"

namespace tfm::data {
namespace {

constexpr int64_t kPoolBatches = 64;  // batches per sorting pool

int64_t padded_len(const Example& e) { return static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())) + 1; }

void check_settings(const BatchSettings& s) {
  if (s.batch_tokens < 0) throw std::invalid_argument("batch_tokens must be ≥ 0, got " + std::to_string(s.batch_tokens));
  if (s.batch_tokens == 0 && s.batch_size < 1)
    throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(s.batch_size));
}

template <class T>
void shuffle(std::vector<T>& v, SplitMix64& g) {  // Fisher–Yates
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[g.below(i)]);
}

// Cuts an ordered run of indices into batches.
void cut(const std::vector<Example>& ex, const std::vector<int64_t>& order, const BatchSettings& s, BatchPlan& out) {
  std::vector<int64_t> cur;
  int64_t longest = 0;
  for (int64_t i : order) {
    const int64_t len = padded_len(ex[static_cast<size_t>(i)]);
    bool full;
    if (s.batch_tokens > 0) full = !cur.empty() && static_cast<int64_t>(cur.size() + 1) * std::max(longest, len) > s.batch_tokens;
    else full = static_cast<int64_t>(cur.size()) == s.batch_size;
    if (full) {
      out.push_back(std::move(cur));
      cur.clear();
      longest = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, len);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
}

void sort_by_length(const std::vector<Example>& ex, std::vector<int64_t>::iterator b, std::vector<int64_t>::iterator e) {
  std::stable_sort(b, e, [&](int64_t x, int64_t y) {
    const auto& a = ex[static_cast<size_t>(x)];
    const auto& c = ex[static_cast<size_t>(y)];
    return a.src.size() != c.src.size() ? a.src.size() < c.src.size() : a.tgt.size() < c.tgt.size();
  });
}

}  // namespace

BatchPlan plan_epoch(const std::vector<Example>& examples, const BatchSettings& settings, uint64_t seed, int64_t epoch) {
  check_settings(settings);
  std::vector<int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 g(mix_seed(seed, 0x62617463ull /* "batc" */, static_cast<uint64_t>(epoch)));
  shuffle(order, g);
  // Pool size in examples: 64 batches by count, or 64 · batch_tokens / (mean padded length).
  int64_t pool = kPoolBatches * settings.batch_size;
  if (settings.batch_tokens > 0) {
    int64_t total = 0;
    for (const auto& e : examples) total += padded_len(e);
    const int64_t mean = std::max<int64_t>(1, total / std::max<int64_t>(1, static_cast<int64_t>(examples.size())));
    pool = std::max<int64_t>(1, kPoolBatches * settings.batch_tokens / mean);
  }
  BatchPlan plan;
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(pool)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(pool));
    sort_by_length(examples, order.begin() + static_cast<std::ptrdiff_t>(start), order.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int64_t> part(order.begin() + static_cast<std::ptrdiff_t>(start), order.begin() + static_cast<std::ptrdiff_t>(end));
    cut(examples, part, settings, plan);
  }
  shuffle(plan, g);
  return plan;
}

BatchPlan plan_eval(const std::vector<Example>& examples, const BatchSettings& settings) {
  check_settings(settings);
  std::vector<int64_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  sort_by_length(examples, order.begin(), order.end());
  BatchPlan plan;
  cut(examples, order, settings, plan);
  return plan;
}

TokenBatch make_batch(const std::vector<Example>& examples, const std::vector<int64_t>& indices, TargetLayout layout,
                      int32_t pad_id, int32_t bos_id, int32_t eos_id) {
  return make_batch_rows(examples, indices, 0, static_cast<int64_t>(indices.size()), layout, pad_id, bos_id, eos_id);
}

TokenBatch make_batch_rows(const std::vector<Example>& examples, const std::vector<int64_t>& indices, int64_t r0,
                           int64_t r1, TargetLayout layout, int32_t pad_id, int32_t bos_id, int32_t eos_id) {
  if (indices.empty()) throw std::invalid_argument("make_batch: no examples");
  if (r0 < 0 || r1 < r0 || r1 > static_cast<int64_t>(indices.size()))
    throw std::invalid_argument("make_batch: rows [" + std::to_string(r0) + ", " + std::to_string(r1) + ") of " +
                                std::to_string(indices.size()));
  const bool encoder = layout == TargetLayout::PER_POSITION;
  TokenBatch b;
  b.B = r1 - r0;
  for (int64_t i : indices) {
    const Example& e = examples.at(static_cast<size_t>(i));
    if (encoder && e.src.size() != e.tgt.size())
      throw std::invalid_argument("per-position targets need equal source and target lengths, example " + std::to_string(i) +
                                  " has " + std::to_string(e.src.size()) + " and " + std::to_string(e.tgt.size()));
    b.S = std::max<int64_t>(b.S, static_cast<int64_t>(e.src.size()));
    b.T = std::max<int64_t>(b.T, static_cast<int64_t>(e.tgt.size()) + (encoder ? 0 : 1));
  }
  if (encoder) b.T = b.S;
  b.src.assign(static_cast<size_t>(b.B * b.S), pad_id);
  b.tgt_out.assign(static_cast<size_t>(b.B * b.T), pad_id);
  if (!encoder) b.tgt_in.assign(static_cast<size_t>(b.B * b.T), pad_id);
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& e = examples[static_cast<size_t>(indices[static_cast<size_t>(r0 + r)])];
    std::copy(e.src.begin(), e.src.end(), b.src.begin() + r * b.S);
    std::copy(e.tgt.begin(), e.tgt.end(), b.tgt_out.begin() + r * b.T);
    if (!encoder) {
      const auto n = static_cast<int64_t>(e.tgt.size());
      b.tgt_in[static_cast<size_t>(r * b.T)] = bos_id;
      std::copy(e.tgt.begin(), e.tgt.end(), b.tgt_in.begin() + r * b.T + 1);
      b.tgt_out[static_cast<size_t>(r * b.T + n)] = eos_id;
    }
  }
  return b;
}

int64_t count_target_tokens(const TokenBatch& batch, int32_t pad_id) {
  return static_cast<int64_t>(std::count_if(batch.tgt_out.begin(), batch.tgt_out.end(), [&](int32_t t) { return t != pad_id; }));
}

// tgt_out's row of an example is its target, then (SHIFTED) eos, then pads.
int64_t count_target_tokens(const std::vector<Example>& examples, const std::vector<int64_t>& indices,
                            TargetLayout layout, int32_t pad_id, int32_t eos_id) {
  int64_t n = 0;
  for (int64_t i : indices) {
    const Example& e = examples.at(static_cast<size_t>(i));
    n += std::count_if(e.tgt.begin(), e.tgt.end(), [&](int32_t t) { return t != pad_id; });
    if (layout == TargetLayout::SHIFTED && eos_id != pad_id) ++n;
  }
  return n;
}

}  // namespace tfm::data
