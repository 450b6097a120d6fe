// src/models/sampling.cc — sample_token: temperature, top-k and top-p over one row of logits (V).
//
// Everything is computed in double in a fixed order (candidates sorted by logit, highest first, ties by
// lower id; the exps of long rows shared by the threads, each the same value on any thread), so a draw
// depends only on the logits and the uniform.
#include "tfm/models/sampling.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tfm {
namespace {

// x as the shortest text that reads back as the same value ("1.0000001", "-1e-07", "1e+39", "nan", "inf"), so a
// message shows the value that was refused (std::to_string's 6 decimals would print 1.000000 and -0.000000 for
// values just outside a range). A float's own shortest text for a float (temperature), a double's for a double.
template <typename T>
std::string shortest(T x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// A sort key whose ascending order is the candidates' order: logit highest first, ties by lower id. The
// float's bits made order-preserving as an unsigned integer (negatives flipped whole, positives their sign
// bit set; -0 read as +0, which compares equal to it), complemented for descending, above the id: one
// integer compare instead of two loads through the ids (a GPT-2 row sorts 50,257 of them per decoded token).
uint64_t candidate_key(float logit, int32_t id) {
  logit += 0.0f;  // -0 → +0
  uint32_t bits;
  std::memcpy(&bits, &logit, sizeof bits);
  const uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return (uint64_t(~ascending) << 32) | uint32_t(id);
}

// Sorts candidate keys ascending. They are made in ascending id order (their low 32 bits), so a stable sort
// by the high 32 bits (the logit's) gives the order of the whole keys: a least-significant-digit radix sort
// of those bits, 11 + 11 + 10 at a time, each pass a histogram, its prefix sums and one stable scatter —
// three passes over a 50,257-token row instead of std::sort's n·log n compares. Short rows take std::sort.
void sort_candidates(std::vector<uint64_t>& keys) {
  const size_t n = keys.size();
  if (n < 1024) {
    std::sort(keys.begin(), keys.end());
    return;
  }
  std::vector<uint64_t> out(n);
  for (const int shift : {32, 43, 54}) {
    const uint64_t mask = shift == 54 ? 0x3FF : 0x7FF;
    std::array<size_t, 2048> start{};
    for (const uint64_t k : keys) ++start[(k >> shift) & mask];
    if (start[(keys[0] >> shift) & mask] == n) continue;  // one digit for all: the pass would keep the order
    size_t sum = 0;
    for (size_t& c : start) sum += std::exchange(c, sum);  // counts → first slots
    for (const uint64_t k : keys) out[start[(k >> shift) & mask]++] = k;
    keys.swap(out);
  }
}

}  // namespace

void check_sampling_options(const SamplingOptions& opt) {
  if (!(opt.temperature >= 0.0f) || !std::isfinite(opt.temperature))
    throw std::invalid_argument("sampling: temperature must be finite and ≥ 0, got " + shortest(opt.temperature));
  if (opt.top_k < 0) throw std::invalid_argument("sampling: top_k must be ≥ 0, got " + std::to_string(opt.top_k));
  if (!(opt.top_p > 0.0 && opt.top_p <= 1.0))
    throw std::invalid_argument("sampling: top_p must be in (0, 1], got " + shortest(opt.top_p));
}

float float32_option(double value, const std::string& name) {
  // From FLT_MAX + half its ulp (2^128 − 2^103) on, round to nearest gives ±inf; below it the cast is defined.
  constexpr double kRoundsToInf = 0x1.ffffffp127;
  if (!std::isfinite(value)) return static_cast<float>(value);
  const bool to_inf = std::fabs(value) >= kRoundsToInf;
  const float f = to_inf ? 0.0f : static_cast<float>(value);
  if (to_inf || (f == 0.0f && value != 0.0))  // or at most half the least subnormal: rounds to 0
    throw std::invalid_argument(name + " must be representable as a float32, got " + shortest(value));
  return f;
}

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& opt, Generator& gen) {
  check_sampling_options(opt);
  if (V < 1) throw std::invalid_argument("sampling: empty logits row (V = " + std::to_string(V) + ")");
  int64_t best = -1;  // first maximum among the finite logits
  for (int64_t v = 0; v < V; ++v)
    if (!std::isnan(logits[v]) && logits[v] != -INFINITY && (best < 0 || logits[v] > logits[best])) best = v;
  if (best < 0) throw std::invalid_argument("sampling: no finite logit among " + std::to_string(V));
  if (opt.temperature == 0.0f || opt.top_k == 1) return static_cast<int32_t>(best);

  // Candidates: finite logits, highest first, ties by lower id (candidate_key); top-k keeps the first k.
  std::vector<uint64_t> keys;
  keys.reserve(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v)
    if (!std::isnan(logits[v]) && logits[v] != -INFINITY) keys.push_back(candidate_key(logits[v], static_cast<int32_t>(v)));
  size_t n = keys.size();
  if (opt.top_k > 0 && static_cast<size_t>(opt.top_k) < n) {
    n = static_cast<size_t>(opt.top_k);
    std::partial_sort(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n), keys.end());
  } else {
    sort_candidates(keys);
  }
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(keys[i] & 0xFFFFFFFFu);
  // p_i = exp((z_i − z_max) / T) / Σ, over the n candidates; z_max = logits[ids[0]]. A +inf logit takes the
  // whole mass, shared with any other +inf (the limit of the softmax; its exp would be inf − inf = NaN).
  // The exps (one per candidate: 50,257 libm calls for GPT-2's vocabulary, the larger part of a draw) are
  // shared by the threads, each value the same whoever computes it; the sum runs in order on this thread.
  std::vector<double> p(n);
  const double inv_t = 1.0 / static_cast<double>(opt.temperature), zmax = logits[ids[0]];
  const int64_t count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (count >= 16384)
  for (int64_t i = 0; i < count; ++i)
    p[i] = std::isinf(zmax) ? (logits[ids[i]] == zmax ? 1.0 : 0.0)
                            : std::exp((static_cast<double>(logits[ids[i]]) - zmax) * inv_t);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += p[i];
  if (opt.top_p < 1.0) {  // shortest prefix (already sorted by probability) with mass ≥ top_p
    // Mass ≥ top_p·total, decided within the computation's own rounding, so that a prefix whose exact mass is
    // exactly the decimal top_p the user typed (ties: ten equal logits hold 0.1 each, two reach 0.2) is found to
    // reach it. cum and total are sums, in order, of at most n positive doubles (each exp within an ulp), so each
    // is off by a relative (n + 1)·u at most (u = 2^-53, to first order); the double top_p is off the decimal by
    // u, and the product rounds once more. So a prefix whose computed mass falls short of the computed
    // top_p·total by less than (2n + 4)·u of it may hold exactly top_p, and counts as reaching it: every exact
    // hit is kept at its shortest prefix (a hundred equal logits at 0.07 keep 7 tokens, where fl(0.07·100) =
    // 7.000000000000001 took an 8th), and the plain comparison's decision changes only for a mass within
    // about n·2e-16 of top_p, which untied logits do not reach in practice.
    const double want = opt.top_p * total * (1.0 - static_cast<double>(n + 2) * DBL_EPSILON);  // ε = 2u
    double cum = 0;
    size_t keep = 0;
    while (keep < n && cum < want) cum += p[keep++];
    n = std::max<size_t>(keep, 1);
    total = 0;
    for (size_t i = 0; i < n; ++i) total += p[i];
  }
  const double u = static_cast<double>(gen.uniform()) * total;  // in [0, total)
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += p[i];
    if (u < cum) return ids[i];
  }
  return ids[n - 1];  // u within rounding of total
}

}  // namespace tfm
