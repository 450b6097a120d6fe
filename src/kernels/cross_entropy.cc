// src/kernels/cross_entropy.cc — softmax cross-entropy and log_softmax_rows (contracts in kernels.h):
// the float scalar twins (the float instantiations of cross_entropy_scalar.h) and the dispatching
// entry points, one row per call, rows in parallel, on the AVX-512 bodies of cross_entropy_avx512.cc
// when cpu_has_avx512(), else on the AVX2 bodies of cross_entropy_avx2.cc when cpu_has_avx2(), else on the
// twins.
#include "kernels/cross_entropy_scalar.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// Out of line, in a file compiled without -mfma: the AVX bodies' rows end exactly as the twin's (inlined into
// an -mfma file, GCC would fuse the smoothing's multiply and add).
double cross_entropy_row_loss(double lse, double z_target, double zsum, int64_t V, double label_smoothing) {
  const double nll = lse - z_target;
  if (!(label_smoothing > 0)) return nll;  // torch forms no smoothing term: a −inf logit leaves the loss finite
  const double smooth = lse - zsum / static_cast<double>(V);
  return (1.0 - label_smoothing) * nll + label_smoothing * smooth;
}

void cross_entropy_forward_scalar(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                                  int64_t V, int32_t ignore_index, float label_smoothing) {
  cross_entropy_forward_scalar<float>(logits, target, loss, lse, N, V, ignore_index, label_smoothing);
}
void cross_entropy_backward_scalar(const float* logits, const int32_t* target, const float* lse, const float* scale,
                                   float* dlogits, int64_t N, int64_t V, int32_t ignore_index,
                                   float label_smoothing) {
  cross_entropy_backward_scalar<float>(logits, target, lse, scale, dlogits, N, V, ignore_index, label_smoothing);
}
void log_softmax_rows_scalar(const float* logits, int64_t N, int64_t V, double* lse, int64_t* argmax) {
  for (int64_t n = 0; n < N; ++n) {
    const LogSoftmaxRow r = log_softmax_row_scalar(logits + n * V, V);
    lse[n] = r.lse;
    argmax[n] = r.argmax;
  }
}

// Rows are independent: any schedule gives the same bits.
void cross_entropy_forward(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                           int64_t V, int32_t ignore_index, float label_smoothing) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    if (simd)
      cross_entropy_forward_avx512(logits + n * V, target + n, loss + n, lse + n, 1, V, ignore_index,
                                   label_smoothing);
    else if (avx2)
      cross_entropy_forward_avx2(logits + n * V, target + n, loss + n, lse + n, 1, V, ignore_index, label_smoothing);
    else
      cross_entropy_forward_scalar(logits + n * V, target + n, loss + n, lse + n, 1, V, ignore_index,
                                   label_smoothing);
  }
}

void log_softmax_rows(const float* logits, int64_t N, int64_t V, double* lse, int64_t* argmax) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * V;
    if (simd && log_softmax_row_avx512(z, V, lse + n, argmax + n)) continue;
    if (avx2 && log_softmax_row_avx2(z, V, lse + n, argmax + n)) continue;
    log_softmax_rows_scalar(z, 1, V, lse + n, argmax + n);
  }
}

void cross_entropy_backward(const float* logits, const int32_t* target, const float* lse, const float* scale,
                            float* dlogits, int64_t N, int64_t V, int32_t ignore_index, float label_smoothing) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    if (simd)
      cross_entropy_backward_avx512(logits + n * V, target + n, lse + n, scale + n, dlogits + n * V, 1,
                                    V, ignore_index, label_smoothing);
    else if (avx2)
      cross_entropy_backward_avx2(logits + n * V, target + n, lse + n, scale + n, dlogits + n * V, 1, V, ignore_index,
                                  label_smoothing);
    else
      cross_entropy_backward_scalar(logits + n * V, target + n, lse + n, scale + n, dlogits + n * V, 1, V,
                                    ignore_index, label_smoothing);
  }
}

}  // namespace tfm::kernels
