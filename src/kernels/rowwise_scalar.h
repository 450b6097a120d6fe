// src/kernels/rowwise_scalar.h — scalar reference templates for the row-wise kernels (LayerNorm,
// activations). Instantiated with float for the library's *_scalar twins and with double by the
// finite-difference gradient tests. The contracts are in kernels.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels::ref {

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
  r = 1.0 / std::sqrt(std::max(v, 0.0) + static_cast<double>(eps));
}

template <typename T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t N,
                        int64_t D, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    T* yr = y + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
    for (int64_t d = 0; d < D; ++d) {
      double xh = (xr[d] - mu) * r;
      yr[d] = static_cast<T>(xh * w[d] + (b ? static_cast<double>(b[d]) : 0.0));
    }
    if (mean) mean[n] = static_cast<T>(mu);
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

template <typename T>
void layer_norm_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, int64_t N,
                         int64_t D, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    double mu, r;
    row_moments(xr, D, eps, mu, r);
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
      dx[n * D + d] = static_cast<T>(r * (g - mg - xh * mgx));
    }
  }
}

// Scalar activation functions and their derivatives, in T.
template <typename T>
T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <typename T>
T gelu_grad(T x) {  // Φ(x) + x·φ(x)
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}
template <typename T>
T gelu_tanh(T x) {
  const T k = T(0.79788456080286535588);  // √(2/π)
  T inner = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}
template <typename T>
T gelu_tanh_grad(T x) {
  const T k = T(0.79788456080286535588);
  T inner = k * (x + T(0.044715) * x * x * x);
  T t = std::tanh(inner);
  T dinner = k * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
T act_plain(ActivationKind k, T x) {
  switch (k) {
    case ActivationKind::ACT_RELU: return x > T(0) ? x : T(0);
    case ActivationKind::ACT_GELU: return gelu(x);
    case ActivationKind::ACT_GELU_TANH: return gelu_tanh(x);
    default: return x;
  }
}
template <typename T>
T act_plain_grad(ActivationKind k, T x) {
  switch (k) {
    case ActivationKind::ACT_RELU: return x > T(0) ? T(1) : T(0);
    case ActivationKind::ACT_GELU: return gelu_grad(x);
    case ActivationKind::ACT_GELU_TANH: return gelu_tanh_grad(x);
    default: return T(1);
  }
}
// Gate g(b) and g'(b) for the gated kinds.
template <typename T>
T gate(ActivationKind k, T b) {
  switch (k) {
    case ActivationKind::ACT_GLU: return sigmoid(b);
    case ActivationKind::ACT_GEGLU: return gelu(b);
    default: return b * sigmoid(b);  // SwiGLU: silu
  }
}
template <typename T>
T gate_grad(ActivationKind k, T b) {
  switch (k) {
    case ActivationKind::ACT_GLU: {
      T s = sigmoid(b);
      return s * (T(1) - s);
    }
    case ActivationKind::ACT_GEGLU: return gelu_grad(b);
    default: {
      T s = sigmoid(b);
      return s * (T(1) + b * (T(1) - s));
    }
  }
}

template <typename T>
void activation_forward(ActivationKind k, const T* x, T* y, int64_t N, int64_t F) {
  if (!activation_is_gated(k)) {
    for (int64_t i = 0; i < N * F; ++i) y[i] = act_plain(k, x[i]);
    return;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* a = x + n * 2 * F;
    const T* b = a + F;
    for (int64_t f = 0; f < F; ++f) y[n * F + f] = a[f] * gate(k, b[f]);
  }
}

template <typename T>
void activation_backward(ActivationKind k, const T* dy, const T* x, T* dx, int64_t N, int64_t F) {
  if (!activation_is_gated(k)) {
    for (int64_t i = 0; i < N * F; ++i) dx[i] = dy[i] * act_plain_grad(k, x[i]);
    return;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* a = x + n * 2 * F;
    const T* b = a + F;
    T* da = dx + n * 2 * F;
    T* dbp = da + F;
    for (int64_t f = 0; f < F; ++f) {
      T g = dy[n * F + f];
      da[f] = g * gate(k, b[f]);
      dbp[f] = g * a[f] * gate_grad(k, b[f]);
    }
  }
}

// y = a + b.
template <typename T>
void add_forward(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// y = x·keep/(1 − p), the mask a pure function of (seed, offset + i).
template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const T scale = T(1) / (T(1) - static_cast<T>(p));
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? x[i] * scale : T(0);
}

// y = relu(x + bias)·keep/(1 − p), keep of element (n, f) from counter offset + n·F + f: the per-element
// ops of bias_activation_forward(ACT_RELU) then dropout_forward.
template <typename T>
void bias_relu_dropout_forward(const T* x, const T* bias, T* y, int64_t N, int64_t F, float p, uint64_t seed,
                               uint64_t offset) {
  const T scale = T(1) / (T(1) - static_cast<T>(p));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t i = n * F + f;
      const T r = act_plain(ActivationKind::ACT_RELU, bias ? x[i] + bias[f] : x[i]);
      y[i] = dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? r * scale : T(0);
    }
}

// dx = y > 0 ? dy/(1 − p) : 0 for y = dropout(relu(z)): y > 0 iff kept and z > 0.
template <typename T>
void relu_dropout_backward(const T* dy, const T* y, T* dx, int64_t n, float p) {
  const T scale = T(1) / (T(1) - static_cast<T>(p));
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] * scale : T(0);
}

// y = a + x·keep/(1 − p): add_forward(a, dropout_forward(x)) in one pass, the same per-element ops.
template <typename T>
void add_dropout_forward(const T* a, const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const T scale = T(1) / (T(1) - static_cast<T>(p));
  for (int64_t i = 0; i < n; ++i)
    y[i] = a[i] + (dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? x[i] * scale : T(0));
}

// y = act(x + bias) row by row; gated kinds read the biased halves [a | b] of each 2F-wide row.
template <typename T>
void bias_activation_forward(ActivationKind k, const T* x, const T* bias, T* y, int64_t N, int64_t F) {
  const bool gated = activation_is_gated(k);
  const int64_t in_row = gated ? 2 * F : F;
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * in_row;
    T* yr = y + n * F;
    for (int64_t f = 0; f < F; ++f) {
      if (gated) {
        const T a = bias ? xr[f] + bias[f] : xr[f];
        const T b = bias ? xr[F + f] + bias[F + f] : xr[F + f];
        yr[f] = a * gate(k, b);
      } else {
        yr[f] = act_plain(k, bias ? xr[f] + bias[f] : xr[f]);
      }
    }
  }
}

// db += Σ_rows dy, each column summed over rows 0..N−1 in order.
template <typename T>
void bias_grad(const T* dy, T* db, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) db[f] += dy[n * F + f];
}

// Softmax cross-entropy rows (contract in kernels.h). The row statistics are accumulated in double
// whatever T is, so the float twin's loss is exact to float rounding.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* target, T* loss, T* lse, int64_t N, int64_t V,
                           int32_t ignore_index, T label_smoothing) {
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
void cross_entropy_backward(const T* logits, const int32_t* target, const T* lse, const T* scale, T* dlogits,
                            int64_t N, int64_t V, int32_t ignore_index, T label_smoothing) {
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

}  // namespace tfm::kernels::ref
