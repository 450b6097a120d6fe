// src/kernels/gemm_scalar.cc — gemm_scalar, the scalar twin of gemm: the specification, the
// TFM_FORCE_SCALAR path and the test oracle. The loops live in gemm_scalar.h (the template
// gemm_scalar<T>) so tests can run the very same specification in double.
#include "kernels/gemm_scalar.h"

#include "kernels/kernels.h"

namespace tfm::kernels {

// C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C, float accumulator per output, k ascending.
void gemm_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  gemm_scalar<float>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace tfm::kernels
