// src/kernels/elementwise_scalar.h — the scalar element-wise kernels (add, multiply, dropout, add + dropout, the
// bias gradient) as templates over the arithmetic type T: the specification. elementwise.cc
// instantiates them with float for the library's twins (the `*_scalar` functions of kernels.h, same
// names). Contracts in kernels.h.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {

// y = a + b.
template <typename T>
void add_forward_scalar(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// y = a ⊙ b.
template <typename T>
void mul_forward_scalar(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

// y = x·keep/(1 − p), the mask a pure function of (seed, offset + i).
template <typename T>
void dropout_forward_scalar(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const T scale = dropout_scale<T>(p);
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? x[i] * scale : T(0);
}

// y = a + x·keep/(1 − p): add_forward(a, dropout_forward(x)) in one pass, the same per-element ops.
template <typename T>
void add_dropout_forward_scalar(const T* a, const T* x, T* y, int64_t n, float p, uint64_t seed,
                                uint64_t offset) {
  const T scale = dropout_scale<T>(p);
  for (int64_t i = 0; i < n; ++i)
    y[i] = a[i] + (dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? x[i] * scale : T(0));
}

// db (F) += Σ_rows dy, each column summed over rows 0..N−1 in order; dy's rows at stride ld ≥ F (like
// bias_grad_avx512's, so the dispatcher can hand it a block of columns).
template <typename T>
void bias_grad_scalar(const T* dy, int64_t ld, T* db, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) db[f] += dy[n * ld + f];
}

}  // namespace tfm::kernels
