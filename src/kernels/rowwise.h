// src/kernels/rowwise.h — element-wise and row-wise kernels added for speed (issue 3), beside the
// LayerNorm / activation kernels declared in kernels.h. Same rules as kernels.h: raw pointers and
// sizes, no allocation, no exceptions; every kernel `foo` has a scalar twin `foo_scalar` with the same
// signature (the specification, the fallback and the test oracle, tests/kernels/rowwise_test.cc);
// `foo` uses the AVX-512 body of rowwise_avx512.cc when cpu_has_avx512() and splits the work in
// fixed chunks, so results never depend on the thread count.
//
// To add one: declare foo and foo_scalar here, write the scalar template in rowwise_scalar.h, the
// AVX-512 body in rowwise_avx512.cc (declared in the `avx512` namespace below), dispatch in
// rowwise.cc, and test SIMD against scalar in tests/kernels/rowwise_test.cc with sizes that are not
// multiples of 16.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace tfm::kernels {

// y = a + b over n elements. y may alias a or b.
void add_forward(const float* a, const float* b, float* y, int64_t n);
void add_forward_scalar(const float* a, const float* b, float* y, int64_t n);

// y = x ⊙ keep / (1 − p),  keep_i = dropout_keep(seed, offset + i, p)   (0 ≤ p < 1).
// The backward is the same map applied to dy. y may alias x. Bitwise equal to the scalar twin
// (integer hash, exact conversion of 24 bits, one multiply).
void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
void dropout_forward_scalar(const float* x, float* y, int64_t n, float p, uint64_t seed,
                            uint64_t offset);

// Bias + activation in one pass after a GEMM: x (N, Fin) with Fin = F (plain) or 2F (gated),
// bias (Fin) or null; y (N, F) = act(x + bias) (gated: a ⊙ g(b) of the biased halves).
// y may alias x for plain activations.
void bias_activation_forward(ActivationKind k, const float* x, const float* bias, float* y, int64_t N,
                             int64_t F);
void bias_activation_forward_scalar(ActivationKind k, const float* x, const float* bias, float* y,
                                    int64_t N, int64_t F);

// dst[c·ld + r] = src[r·sl + c] for r < rows, c < cols (a strided block copied transposed; nothing
// else of dst is written). Pure data movement: bitwise the twin.
void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld);
void transpose_scalar(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld);

// db (F) += Σ_rows dy (N, F)  (accumulate). Each column sums its rows in order 0..N−1, in float, in
// both the SIMD and the scalar version, so they agree bitwise for any thread count.
void bias_grad(const float* dy, float* db, int64_t N, int64_t F);
void bias_grad_scalar(const float* dy, float* db, int64_t N, int64_t F);

// y = a + x ⊙ keep / (1 − p): the residual add of a dropped-out branch in one pass, bitwise
// add_forward(a, dropout_forward(x)). y may alias a or x.
void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset);
void add_dropout_forward_scalar(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                                uint64_t offset);

// Dropout applied inside a fused kernel: element i of the dropped tensor is kept iff
// dropout_keep(seed, offset + i, p), kept values scaled by 1/(1 − p) (dropout_forward's rule).
struct DropoutSpec {
  float p;
  uint64_t seed, offset;
};

// The FFN's inner dropout in the bias + ReLU pass after its first GEMM:
//   y = dropout(relu(x + bias)), element (n, f) kept iff dropout_keep(seed, offset + n·F + f, p):
// bitwise dropout_forward(bias_activation_forward(ACT_RELU)). x, y (N, F), bias (F) or null; y may
// alias x. The backward needs only y: where y > 0 the element was kept and relu was open, so
//   dx = y > 0 ? dy / (1 − p) : 0
// (PyTorch's threshold_backward selects rather than multiplies, so a NaN dy where relu was shut or
// the element dropped gives 0 here as in PyTorch).
void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop);
void bias_relu_dropout_forward_scalar(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                                      const DropoutSpec& drop);
void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p);
void relu_dropout_backward_scalar(const float* dy, const float* y, float* dx, int64_t n, float p);

// Residual add + LayerNorm in one pass over each chunk of rows: z = x + r, or z = x + dropout(r)
// when r_drop is non-null (PyTorch's norm(x + dropout(sublayer(x)))), then y = layer_norm(z)
// (kernels.h layer_norm_forward). Bitwise the unfused composition. z (N,D) is written when non-null
// (training keeps it for the backward); y may alias x or r. mean, rstd (N) may be null.
void add_layer_norm_forward(const float* x, const float* r, const float* w, const float* b, float* z,
                            float* y, float* mean, float* rstd, int64_t N, int64_t D, float eps,
                            const DropoutSpec* r_drop = nullptr);
void add_layer_norm_forward_scalar(const float* x, const float* r, const float* w, const float* b,
                                   float* z, float* y, float* mean, float* rstd, int64_t N,
                                   int64_t D, float eps, const DropoutSpec* r_drop = nullptr);

// The AVX-512 bodies (rowwise_avx512.cc, compiled with AVX-512 flags). Single-threaded over the rows
// or elements they are given; only the dispatchers above call them, and only when cpu_has_avx512().
namespace avx512 {
void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t N, int64_t D, float eps);
void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                         int64_t N, int64_t D, float eps);
// Plain activations only for relu; returns false (doing nothing) for kinds it does not handle.
bool bias_activation_forward(ActivationKind k, const float* x, const float* bias, float* y, int64_t N,
                             int64_t F);
bool activation_backward(ActivationKind k, const float* dy, const float* x, float* dx, int64_t N,
                         int64_t F);
void add_forward(const float* a, const float* b, float* y, int64_t n);
void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld);
void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop);
void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p);
void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset);
// dy rows at stride ld (≥ F).
void bias_grad(const float* dy, int64_t ld, float* db, int64_t N, int64_t F);
// dst[i] = float_to_bf16(src[i]) (gemm_packed.h), bitwise: the same integer rounding, 16 lanes at once.
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);
}  // namespace avx512

}  // namespace tfm::kernels
