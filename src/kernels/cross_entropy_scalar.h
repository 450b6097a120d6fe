// src/kernels/cross_entropy_scalar.h — softmax cross-entropy, forward and backward, as templates over
// the arithmetic type T. The library's kernels (cross_entropy.cc) run the float instantiation row by
// row; tests/kernels/gradcheck_test.cc runs it in double against finite differences. Contracts in
// kernels.h.
//
// Its row statistic, log_softmax_row_scalar (a row's log-sum-exp in double and its argmax), is the
// one definition of a log-softmax in double: the forward twin below, decoding's log-probabilities
// (src/models/decode.cc) and the twin of kernels::log_softmax_rows (the teacher-forced scorer's rows,
// src/models/scorer.cc: validation and tfm eval --text, whose AVX-512 body agrees with it within
// float rounding) all call it, so a token's loss is computed one way everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernels.h"

namespace tfm::kernels {

// One row's log-softmax statistics: log_softmax(z)_v = z_v − lse.
struct LogSoftmaxRow {
  double lse = 0;      // m + log Σ_v exp(z_v − m), m = max_v z_v
  int64_t argmax = 0;  // the first v with z_v = m (the prediction; greedy decoding's token)
};

// A row z (V) of logits: lse around the row's maximum m, the sum Σ exp(z_v − m) accumulated in double
// in v order whatever T is (every term ≤ 1 and the maximum's exactly 1, so the sum neither overflows
// nor vanishes). Entries `skip_a` and `skip_b` (−1: none) are left out of the maximum and the sum, as
// if their logits were −inf (decoding's pad and bos, never generated). The caller's loss of target y
// is lse − z_y, its log-probability z_y − lse. Edge rows: a NaN logit makes lse NaN; every kept entry
// −inf gives lse NaN and argmax the first kept entry; no kept entry gives lse −inf and argmax −1.
template <typename T>
LogSoftmaxRow log_softmax_row_scalar(const T* z, int64_t V, int64_t skip_a = -1, int64_t skip_b = -1) {
  LogSoftmaxRow r;
  r.argmax = -1;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (v == skip_a || v == skip_b) continue;
    if (r.argmax < 0) r.argmax = v;
    if (static_cast<double>(z[v]) > m) m = static_cast<double>(z[v]), r.argmax = v;
  }
  double s = 0;
  for (int64_t v = 0; v < V; ++v)
    if (v != skip_a && v != skip_b) s += std::exp(static_cast<double>(z[v]) - m);
  r.lse = m + std::log(s);
  return r;
}

// Softmax cross-entropy rows (contract in kernels.h). The row statistics are accumulated in double
// whatever T is (log_softmax_row_scalar), so the float kernel's loss is exact to float rounding.
template <typename T>
void cross_entropy_forward_scalar(const T* logits, const int32_t* target, T* loss, T* lse, int64_t N,
                                  int64_t V, int32_t ignore_index, T label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    const double l = log_softmax_row_scalar(z, V).lse;
    double zsum = 0;
    for (int64_t v = 0; v < V; ++v) zsum += z[v];
    lse[n] = static_cast<T>(l);
    if (target[n] == ignore_index) {
      loss[n] = T(0);
      continue;
    }
    loss[n] = static_cast<T>(cross_entropy_row_loss(l, z[target[n]], zsum, V, label_smoothing));
  }
}

// dz_v = scale · (softmax(z)_v − ε/V − (1−ε)·[v = t]); zero rows for ignored targets.
template <typename T>
void cross_entropy_backward_scalar(const T* logits, const int32_t* target, const T* lse, const T* scale,
                                   T* dlogits, int64_t N, int64_t V, int32_t ignore_index,
                                   T label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T* dz = dlogits + n * V;
    if (target[n] == ignore_index) {
      for (int64_t v = 0; v < V; ++v) dz[v] = T(0);
      continue;
    }
    const T s = scale[n], l = lse[n];
    const T uniform = label_smoothing / static_cast<T>(V);
    for (int64_t v = 0; v < V; ++v) dz[v] = s * (std::exp(z[v] - l) - uniform);
    dz[target[n]] -= s * (T(1) - label_smoothing);
  }
}

}  // namespace tfm::kernels
