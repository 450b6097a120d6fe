// src/kernels/activation_scalar.h — the scalar activations (every tfm::Activation, plain and gated),
// forward and backward, and the fused bias + activation (+ dropout) passes, as templates over the
// arithmetic type T: the specification. activation.cc instantiates them with float for the library's
// twins (the `*_scalar` functions of kernels.h, same names); tests/kernels/gradcheck_test.cc with
// double for the finite-difference checks. Contracts in kernels.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {
namespace activation_scalar_detail {

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
T act_plain(Activation k, T x) {
  switch (k) {
    case Activation::RELU:
      return x < T(0) ? T(0) : x;  // torch.relu: NaN stays NaN, −0 stays −0
    case Activation::GELU: return gelu(x);
    case Activation::GELU_TANH: return gelu_tanh(x);
    default: return x;
  }
}
template <typename T>
T act_plain_grad(Activation k, T x) {
  switch (k) {
    case Activation::RELU:
      return x <= T(0) ? T(0) : T(1);  // 1 for NaN: threshold_backward passes dy
    case Activation::GELU: return gelu_grad(x);
    case Activation::GELU_TANH: return gelu_tanh_grad(x);
    default: return T(1);
  }
}
// Gate g(b) and g'(b) for the gated kinds.
template <typename T>
T gate(Activation k, T b) {
  switch (k) {
    case Activation::GLU: return sigmoid(b);
    case Activation::GEGLU: return gelu(b);
    default: return b * sigmoid(b);  // SwiGLU: silu
  }
}
template <typename T>
T gate_grad(Activation k, T b) {
  switch (k) {
    case Activation::GLU: {
      T s = sigmoid(b);
      return s * (T(1) - s);
    }
    case Activation::GEGLU: return gelu_grad(b);
    default: {
      T s = sigmoid(b);
      return s * (T(1) + b * (T(1) - s));
    }
  }
}

}  // namespace activation_scalar_detail

template <typename T>
void activation_forward_scalar(Activation k, const T* x, T* y, int64_t N, int64_t F) {
  if (!activation_is_gated(k)) {
    for (int64_t i = 0; i < N * F; ++i) y[i] = activation_scalar_detail::act_plain(k, x[i]);
    return;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* a = x + n * 2 * F;
    const T* b = a + F;
    for (int64_t f = 0; f < F; ++f) y[n * F + f] = a[f] * activation_scalar_detail::gate(k, b[f]);
  }
}

template <typename T>
void activation_backward_scalar(Activation k, const T* dy, const T* x, T* dx, int64_t N, int64_t F) {
  if (k == Activation::RELU) {  // selects, as threshold_backward: a NaN or inf dy where x ≤ 0 gives 0
    for (int64_t i = 0; i < N * F; ++i) dx[i] = x[i] <= T(0) ? T(0) : dy[i];
    return;
  }
  if (!activation_is_gated(k)) {
    for (int64_t i = 0; i < N * F; ++i)
      dx[i] = dy[i] * activation_scalar_detail::act_plain_grad(k, x[i]);
    return;
  }
  for (int64_t n = 0; n < N; ++n) {
    const T* a = x + n * 2 * F;
    const T* b = a + F;
    T* da = dx + n * 2 * F;
    T* dbp = da + F;
    for (int64_t f = 0; f < F; ++f) {
      T g = dy[n * F + f];
      da[f] = g * activation_scalar_detail::gate(k, b[f]);
      dbp[f] = g * a[f] * activation_scalar_detail::gate_grad(k, b[f]);
    }
  }
}

// y = act(x) and d = act'(x) for the plain kinds (activation_forward_grad): the forward's and the backward's
// per-element functions above.
template <typename T>
void activation_forward_grad_scalar(Activation k, const T* x, T* y, T* d, int64_t N, int64_t F) {
  for (int64_t i = 0; i < N * F; ++i) {
    const T v = x[i];  // y may alias x
    y[i] = activation_scalar_detail::act_plain(k, v);
    d[i] = activation_scalar_detail::act_plain_grad(k, v);
  }
}

// y = act(x + bias) row by row; gated kinds read the biased halves [a | b] of each 2F-wide row.
template <typename T>
void bias_activation_forward_scalar(Activation k, const T* x, const T* bias, T* y, int64_t N,
                                    int64_t F) {
  const bool gated = activation_is_gated(k);
  const int64_t in_row = gated ? 2 * F : F;
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * in_row;
    T* yr = y + n * F;
    for (int64_t f = 0; f < F; ++f) {
      if (gated) {
        const T a = bias ? xr[f] + bias[f] : xr[f];
        const T b = bias ? xr[F + f] + bias[F + f] : xr[F + f];
        yr[f] = a * activation_scalar_detail::gate(k, b);
      } else {
        yr[f] = activation_scalar_detail::act_plain(k, bias ? xr[f] + bias[f] : xr[f]);
      }
    }
  }
}

// y = relu(x + bias)·keep/(1 − p), keep of element (n, f) from counter offset + n·F + f: the per-element
// ops of bias_activation_forward(RELU) then dropout_forward.
template <typename T>
void bias_relu_dropout_forward_scalar(const T* x, const T* bias, T* y, int64_t N, int64_t F, float p,
                                      uint64_t seed, uint64_t offset) {
  const T scale = dropout_scale<T>(p);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const int64_t i = n * F + f;
      const T r = activation_scalar_detail::act_plain(Activation::RELU, bias ? x[i] + bias[f] : x[i]);
      y[i] = dropout_keep(seed, offset + static_cast<uint64_t>(i), p) ? r * scale : T(0);
    }
}

// dx = y ≤ 0 ? 0 : dy/(1 − p) for y = dropout(relu(z)): y ≤ 0 iff dropped or z ≤ 0; y is NaN iff kept and
// z NaN, where threshold_backward passes dy.
template <typename T>
void relu_dropout_backward_scalar(const T* dy, const T* y, T* dx, int64_t n, float p) {
  const T scale = dropout_scale<T>(p);
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] <= T(0) ? T(0) : dy[i] * scale;
}

}  // namespace tfm::kernels
