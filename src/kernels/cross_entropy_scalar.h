// src/kernels/cross_entropy_scalar.h — softmax cross-entropy, forward and backward, as templates over
// the arithmetic type T. The library's kernels (cross_entropy.cc) run the float instantiation row by
// row; tests/kernels/gradcheck_test.cc runs it in double against finite differences. Contracts in
// kernels.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernels.h"

namespace tfm::kernels {

// Softmax cross-entropy rows (contract in kernels.h). The row statistics are accumulated in double
// whatever T is, so the float kernel's loss is exact to float rounding.
template <typename T>
void cross_entropy_forward_scalar(const T* logits, const int32_t* target, T* loss, T* lse, int64_t N,
                                  int64_t V, int32_t ignore_index, T label_smoothing) {
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(z[v]));
    double s = 0, zsum = 0;
    for (int64_t v = 0; v < V; ++v) {
      s += std::exp(static_cast<double>(z[v]) - m);
      zsum += z[v];
    }
    const double l = m + std::log(s);
    lse[n] = static_cast<T>(l);
    if (target[n] == ignore_index) {
      loss[n] = T(0);
      continue;
    }
    const double nll = l - z[target[n]];
    const double smooth = l - zsum / static_cast<double>(V);
    loss[n] = static_cast<T>((1.0 - label_smoothing) * nll + label_smoothing * smooth);
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
