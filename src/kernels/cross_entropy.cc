// src/kernels/cross_entropy.cc — softmax cross-entropy (contract in kernels.h): the dispatching
// entry points, one row per call, rows in parallel, on the AVX-512 bodies of cross_entropy_avx512.cc
// when cpu_has_avx512(), else on the float instantiation of cross_entropy_scalar.h (the twin).
#include "kernels/cross_entropy_scalar.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// Rows are independent: any schedule gives the same bits.
void cross_entropy_forward(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                           int64_t V, int32_t ignore_index, float label_smoothing) {
  const bool simd = cpu_has_avx512();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    if (simd)
      cross_entropy_forward_avx512(logits + n * V, target + n, loss + n, lse + n, 1, V, ignore_index,
                                   label_smoothing);
    else
      cross_entropy_forward_scalar<float>(logits + n * V, target + n, loss + n, lse + n, 1, V,
                                          ignore_index, label_smoothing);
  }
}

void log_softmax_rows(const float* logits, int64_t N, int64_t V, double* lse, int64_t* argmax) {
  const bool simd = cpu_has_avx512();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    if (simd && log_softmax_row_avx512(z, V, lse + n, argmax + n)) continue;
    const LogSoftmaxRow r = log_softmax_row_scalar(z, V);
    lse[n] = r.lse;
    argmax[n] = r.argmax;
  }
}

void cross_entropy_backward(const float* logits, const int32_t* target, const float* lse, const float* scale,
                            float* dlogits, int64_t N, int64_t V, int32_t ignore_index, float label_smoothing) {
  const bool simd = cpu_has_avx512();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    if (simd)
      cross_entropy_backward_avx512(logits + n * V, target + n, lse + n, scale + n, dlogits + n * V, 1,
                                    V, ignore_index, label_smoothing);
    else
      cross_entropy_backward_scalar<float>(logits + n * V, target + n, lse + n, scale + n,
                                           dlogits + n * V, 1, V, ignore_index, label_smoothing);
  }
}

}  // namespace tfm::kernels
