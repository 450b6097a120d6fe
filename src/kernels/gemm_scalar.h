// src/kernels/gemm_scalar.h — the scalar GEMM as a template over the element type T, so the float
// scalar twin (gemm_scalar in kernels.h and gemm_scalar.cc, the same name) and double-precision
// oracles (finite-difference gradient checks, tolerance bounds in tests) share one specification.
//
//   C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C        all row-major
//   op(A)(i,k) = A[i*lda + k]  (trans_a == false, A is (M,K), lda ≥ K)
//              = A[k*lda + i]  (trans_a == true,  A is (K,M), lda ≥ M)
//   op(B)(k,j) = B[k*ldb + j]  (trans_b == false, B is (K,N), ldb ≥ N)
//              = B[j*ldb + k]  (trans_b == true,  B is (N,K), ldb ≥ K)
//
// Contract: one accumulator of type T per output element, summed over k = 0, 1, …, K−1 in that
// order (so the result is a pure function of the inputs); beta == 0 overwrites C without reading
// it (C may hold garbage, even NaN); otherwise C ← alpha·acc + beta·C. As in BLAS, alpha == 0 or
// K == 0 reads neither A nor B: C ← beta·C (0 if beta == 0). C must not alias A or B.
// To add another scalar kernel of this kind: template it here on the element type, keep the loops
// obvious, and let the float twin in the .cc call it.
#pragma once

#include <cstdint>

namespace tfm::kernels {

template <typename T>
void gemm_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                 int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  // Strides of op(A) along (i, k) and of op(B) along (k, j).
  const int64_t a_si = trans_a ? 1 : lda, a_sk = trans_a ? lda : 1;
  const int64_t b_sk = trans_b ? 1 : ldb, b_sj = trans_b ? ldb : 1;
  if (alpha == T(0) || K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) acc += A[i * a_si + k * a_sk] * B[k * b_sk + j * b_sj];
      T* c = C + i * ldc + j;
      *c = (beta == T(0)) ? alpha * acc : alpha * acc + beta * *c;
    }
  }
}

}  // namespace tfm::kernels
