// src/kernels/activation.cc — the activation kernels' dispatching entry points (activation_forward,
// activation_backward, activation_forward_grad (and its bf16-output form), bias_activation_forward,
// bias_relu_dropout_forward, relu_dropout_backward and its bfloat16-input forms, one of them also summing the bias
// gradient and rounding dx) and their float scalar twins. The twins instantiate the templates of activation_scalar.h;
// the entry points run fixed chunks of rows or elements (parallel_chunks.h), so results never depend on the thread
// count, on the AVX-512 bodies of activation_avx512.cc when cpu_has_avx512() and the kind has one (every kind today),
// else on the AVX2 bodies of activation_avx2.cc when cpu_has_avx2() (every kind and the relu + dropout pair; the bf16
// backward runs its twin there). Contracts in kernels.h.
#include <algorithm>
#include <vector>

#include "kernels/activation_scalar.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"
#include "kernels/parallel_chunks.h"

namespace tfm::kernels {

void activation_forward_scalar(Activation k, const float* x, float* y, int64_t N, int64_t F) {
  activation_forward_scalar<float>(k, x, y, N, F);
}
void activation_backward_scalar(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                                int64_t F) {
  activation_backward_scalar<float>(k, dy, x, dx, N, F);
}

void activation_forward_grad_scalar(Activation k, const float* x, float* y, float* d, int64_t N, int64_t F) {
  activation_forward_grad_scalar<float>(k, x, y, d, N, F);
}

void activation_forward_grad_bf16_scalar(Activation k, const float* x, uint16_t* y16, float* d, int64_t N, int64_t F) {
  for (int64_t i = 0; i < N * F; ++i) {
    float y;
    activation_forward_grad_scalar<float>(k, x + i, &y, d + i, 1, 1);
    y16[i] = float_to_bf16(y);
  }
}

void bias_activation_forward_scalar(Activation k, const float* x, const float* bias, float* y, int64_t N,
                                    int64_t F) {
  bias_activation_forward_scalar<float>(k, x, bias, y, N, F);
}
void bias_relu_dropout_forward_scalar(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                                      const DropoutSpec& drop) {
  bias_relu_dropout_forward_scalar<float>(x, bias, y, N, F, drop.p, drop.seed, drop.offset);
}
void relu_dropout_backward_scalar(const float* dy, const float* y, float* dx, int64_t n, float p) {
  relu_dropout_backward_scalar<float>(dy, y, dx, n, p);
}
void relu_dropout_backward_bf16_scalar(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p) {
  const float scale = dropout_scale(p);
  for (int64_t i = 0; i < n; ++i) dx[i] = bf16_to_float(y16[i]) <= 0.0f ? 0.0f : dy[i] * scale;
}

void relu_dropout_backward_bf16_round_scalar(const float* dy, const uint16_t* y16, float p, float* db, uint16_t* dx16,
                                             int64_t N, int64_t F) {
  std::vector<float> dx(static_cast<size_t>(N * F));
  relu_dropout_backward_bf16_scalar(dy, y16, dx.data(), N * F, p);
  bias_grad_bf16_scalar(dx.data(), db, dx16, N, F);
}

void activation_forward(Activation k, const float* x, float* y, int64_t N, int64_t F) {
  bias_activation_forward(k, x, nullptr, y, N, F);
}

void bias_activation_forward(Activation k, const float* x, const float* bias, float* y, int64_t N,
                             int64_t F) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const float* xr = x + r0 * in_row;
    float* yr = y + r0 * F;
    if (avx512 && bias_activation_forward_avx512(k, xr, bias, yr, rn, F)) return;
    if (avx2 && bias_activation_forward_avx2(k, xr, bias, yr, rn, F)) return;
    bias_activation_forward_scalar(k, xr, bias, yr, rn, F);
  });
}

void activation_backward(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                         int64_t F) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const float* dyr = dy + r0 * F;
    const float* xr = x + r0 * in_row;
    float* dxr = dx + r0 * in_row;
    if (avx512 && activation_backward_avx512(k, dyr, xr, dxr, rn, F)) return;
    if (avx2 && activation_backward_avx2(k, dyr, xr, dxr, rn, F)) return;
    activation_backward_scalar(k, dyr, xr, dxr, rn, F);
  });
}

void activation_forward_grad(Activation k, const float* x, float* y, float* d, int64_t N, int64_t F) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const int64_t at = r0 * F;
    if (avx512 && activation_forward_grad_avx512(k, x + at, y + at, d + at, rn * F)) return;
    if (avx2 && activation_forward_grad_avx2(k, x + at, y + at, d + at, rn * F)) return;
    activation_forward_grad_scalar(k, x + at, y + at, d + at, rn, F);
  });
}

void activation_forward_grad_bf16(Activation k, const float* x, uint16_t* y16, float* d, int64_t N, int64_t F) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const int64_t at = r0 * F;
    if (avx512 && activation_forward_grad_bf16_avx512(k, x + at, y16 + at, d + at, rn * F)) return;
    if (avx2 && activation_forward_grad_bf16_avx2(k, x + at, y16 + at, d + at, rn * F)) return;
    activation_forward_grad_bf16_scalar(k, x + at, y16 + at, d + at, rn, F);
  });
}

void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const DropoutSpec d{drop.p, drop.seed, drop.offset + static_cast<uint64_t>(r0 * F)};
    if (avx512)
      bias_relu_dropout_forward_avx512(x + r0 * F, bias, y + r0 * F, rn, F, d);
    else if (avx2)
      bias_relu_dropout_forward_avx2(x + r0 * F, bias, y + r0 * F, rn, F, d);
    else
      bias_relu_dropout_forward_scalar(x + r0 * F, bias, y + r0 * F, rn, F, d);
  });
}

void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
  for_each_elem_chunk(n, 65536, [&](int64_t i0, int64_t m) {
    if (avx512)
      relu_dropout_backward_avx512(dy + i0, y + i0, dx + i0, m, p);
    else if (avx2)
      relu_dropout_backward_avx2(dy + i0, y + i0, dx + i0, m, p);
    else
      relu_dropout_backward_scalar(dy + i0, y + i0, dx + i0, m, p);
  });
}

void relu_dropout_backward_bf16(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p) {
  const bool simd = cpu_has_avx512();
  for_each_elem_chunk(n, 65536, [&](int64_t i0, int64_t m) {
    if (simd)
      relu_dropout_backward_bf16_avx512(dy + i0, y16 + i0, dx + i0, m, p);
    else
      relu_dropout_backward_bf16_scalar(dy + i0, y16 + i0, dx + i0, m, p);
  });
}

// Columns in fixed blocks of 256 over the team, as bias_grad's (each column sums its rows in order, so the
// blocks decide nothing but the split); without AVX-512 the two kernels it fuses, through a float32 dx.
void relu_dropout_backward_bf16_round(const float* dy, const uint16_t* y16, float p, float* db, uint16_t* dx16,
                                      int64_t N, int64_t F) {
  if (!cpu_has_avx512()) {
    std::vector<float> dx(static_cast<size_t>(N * F));
    relu_dropout_backward_bf16(dy, y16, dx.data(), N * F, p);
    bias_grad_bf16(dx.data(), db, dx16, N, F);
    return;
  }
  constexpr int64_t kCols = 256;
  const int64_t chunks = (F + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * F > 65536 && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t f0 = c * kCols;
    relu_dropout_backward_bf16_round_avx512(dy + f0, y16 + f0, F, p, db + f0, dx16 + f0, N, std::min(kCols, F - f0));
  }
}

}  // namespace tfm::kernels
