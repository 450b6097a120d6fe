// src/kernels/rms_norm_scalar.h — the scalar RMSNorm, forward and backward, as templates over the
// arithmetic type T: the specification. rms_norm.cc instantiates them with float for the library's
// twins (rms_norm_forward_scalar, rms_norm_backward_scalar, same names, float signatures in
// kernels.h); tests/kernels/gradcheck_test.cc with double for the finite-difference checks.
// The contracts and the derivation of the backward are in kernels.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {

template <typename T>
void rms_norm_forward_scalar(const T* x, const T* w, T* y, T* rstd, int64_t N, int64_t D, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    T* yr = y + n * D;
    double ss = 0;  // Σ x², in double
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(xr[d]) * xr[d];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(eps));
    for (int64_t d = 0; d < D; ++d) {
      const double xh = xr[d] * r;
      yr[d] = static_cast<T>(xh * w[d]);
    }
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

template <typename T>
void rms_norm_backward_scalar(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw, int64_t N,
                              int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    const double r = rstd[n];
    double mgx = 0;  // mean(g ⊙ x̂), g = dy ⊙ w
    for (int64_t d = 0; d < D; ++d) {
      const double xh = xr[d] * r;
      const double g = static_cast<double>(dyr[d]) * w[d];
      mgx += g * xh;
      dw[d] += static_cast<T>(dyr[d] * xh);
    }
    mgx /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      const double xh = xr[d] * r;
      const double g = static_cast<double>(dyr[d]) * w[d];
      dx[n * D + d] = static_cast<T>(r * (g - xh * mgx));
    }
  }
}

}  // namespace tfm::kernels
