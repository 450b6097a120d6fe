// src/kernels/layer_norm_scalar.h — the scalar LayerNorm, forward and backward, as templates over the
// arithmetic type T: the specification. layer_norm.cc instantiates them with float for the library's
// twins (layer_norm_forward_scalar, layer_norm_backward_scalar, same names, float signatures in
// kernels.h); tests/kernels/gradcheck_test.cc with double for the finite-difference checks.
// The contracts, and why the backward recomputes μ and rstd in double, are in kernels.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {
namespace layer_norm_scalar_detail {

// One row's moments, two-pass in double (exact enough that float rounding dominates):
// mu = mean(x), r = 1/sqrt(var(x) + eps). Forward and backward both call it, so the backward sees
// the forward's exact double values.
template <typename T>
void row_moments(const T* xr, int64_t D, T eps, double& mu, double& r) {
  double s = 0;
  for (int64_t d = 0; d < D; ++d) s += xr[d];
  mu = s / static_cast<double>(D);
  double v = 0;
  for (int64_t d = 0; d < D; ++d) v += (xr[d] - mu) * (xr[d] - mu);
  v /= static_cast<double>(D);
  // v is a sum of rounded squares, never negative: std::max(v, 0) changes no finite v (it would guard
  // the one-pass E[x²] − μ², which rounding can push below 0). A NaN v (x holding NaN or ±inf) passes
  // through it (NaN < 0 is false), so rstd is NaN; the AVX-512 body maps that NaN to 0 instead.
  r = 1.0 / std::sqrt(std::max(v, 0.0) + static_cast<double>(eps));
}

}  // namespace layer_norm_scalar_detail

template <typename T>
void layer_norm_forward_scalar(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t N,
                               int64_t D, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    T* yr = y + n * D;
    double mu, r;
    layer_norm_scalar_detail::row_moments(xr, D, eps, mu, r);
    for (int64_t d = 0; d < D; ++d) {
      double xh = (xr[d] - mu) * r;
      yr[d] = static_cast<T>(xh * w[d] + (b ? static_cast<double>(b[d]) : 0.0));
    }
    if (mean) mean[n] = static_cast<T>(mu);
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

template <typename T>
void layer_norm_backward_scalar(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, int64_t N,
                                int64_t D, T eps, bool accumulate_dx = false) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    double mu, r;
    layer_norm_scalar_detail::row_moments(xr, D, eps, mu, r);
    double mg = 0, mgx = 0;
    for (int64_t d = 0; d < D; ++d) {
      double xh = (xr[d] - mu) * r;
      double g = static_cast<double>(dyr[d]) * w[d];
      mg += g;
      mgx += g * xh;
      dw[d] += static_cast<T>(dyr[d] * xh);
      if (db) db[d] += dyr[d];
    }
    mg /= static_cast<double>(D);
    mgx /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      double xh = (xr[d] - mu) * r;
      double g = static_cast<double>(dyr[d]) * w[d];
      const T v = static_cast<T>(r * (g - mg - xh * mgx));
      dx[n * D + d] = accumulate_dx ? dx[n * D + d] + v : v;
    }
  }
}

}  // namespace tfm::kernels
