// src/kernels/rms_norm.cc — RMSNorm's dispatching kernels (rms_norm_forward, rms_norm_backward) and
// their float scalar twins. The twins instantiate the templates of rms_norm_scalar.h; the entry points
// run fixed chunks of rows (parallel_chunks.h), so results never depend on the thread count, on the
// AVX-512 bodies of rms_norm_avx512.cc when cpu_has_avx512(), else on the AVX2 bodies of rms_norm_avx2.cc
// when cpu_has_avx2(). Contracts in kernels.h.
#include "kernels/kernels.h"
#include "kernels/parallel_chunks.h"
#include "kernels/rms_norm_scalar.h"

namespace tfm::kernels {

void rms_norm_forward_scalar(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D,
                             float eps) {
  rms_norm_forward_scalar<float>(x, w, y, rstd, N, D, eps);
}
void rms_norm_backward_scalar(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                              float* dw, int64_t N, int64_t D) {
  rms_norm_backward_scalar<float>(dy, x, w, rstd, dx, dw, N, D);
}

namespace {

using ForwardBody = void (*)(const float*, const float*, float*, float*, int64_t, int64_t, float);
using BackwardBody = void (*)(const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t);
// The bodies this CPU runs (the float twins' overloads named by their pointer types).
ForwardBody forward_body() {
  return cpu_has_avx512() ? rms_norm_forward_avx512
         : cpu_has_avx2() ? rms_norm_forward_avx2
                          : static_cast<ForwardBody>(rms_norm_forward_scalar);
}
BackwardBody backward_body() {
  return cpu_has_avx512() ? rms_norm_backward_avx512
         : cpu_has_avx2() ? rms_norm_backward_avx2
                          : static_cast<BackwardBody>(rms_norm_backward_scalar);
}

}  // namespace

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D, float eps) {
  const ForwardBody body = forward_body();
  for_each_row_chunk(N, D, [&](int64_t, int64_t r0, int64_t rn) {
    body(x + r0 * D, w, y + r0 * D, rstd ? rstd + r0 : nullptr, rn, D, eps);
  });
}

void rms_norm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                       int64_t N, int64_t D) {
  const BackwardBody body = backward_body();
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  if (chunks <= 1) return body(dy, x, w, rstd, dx, dw, N, D);
  // Each chunk accumulates its dw into its own zeroed partial; the partials are added to dw in chunk
  // order, so the sum does not depend on which thread ran which chunk.
  float* part = zeroed_chunk_partials(static_cast<size_t>(chunks * D));  // (chunks, D)
  for_each_row_chunk(N, D, [&](int64_t c, int64_t r0, int64_t rn) {
    float* pw = part + c * D;
    body(dy + r0 * D, x + r0 * D, w, rstd + r0, dx + r0 * D, pw, rn, D);
  });
  for (int64_t c = 0; c < chunks; ++c) {
    const float* pw = part + c * D;
    for (int64_t d = 0; d < D; ++d) dw[d] += pw[d];
  }
}

}  // namespace tfm::kernels
