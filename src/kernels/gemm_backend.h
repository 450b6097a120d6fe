// src/kernels/gemm_backend.h — internals of the fast gemm (src/kernels/gemm.cc), exposed only to
// gemm.cc and bench/bench_gemm.cc so the panel choice can be measured against oneDNN's own
// threading. Not part of the kernel interface: ops call gemm() from kernels.h.
//
// Determinism scheme. oneDNN's sgemm, when it threads, may split the K reduction between threads
// and the split depends on the thread count, so results change with OMP_NUM_THREADS. Instead, C is
// cut into fixed panels of (mt rows × nt cols) chosen from (M, N, K) only; every panel is one
// oneDNN sgemm call that runs on a single thread, and the panels are spread over threads with
// `omp parallel for schedule(static)`. A panel's result depends only on its inputs and its shape,
// never on which thread runs it or how many there are, so C is bitwise identical for any thread
// count.
#pragma once

#include <cstdint>

namespace tfm::kernels::gemm_detail {

// How C is cut: panels of (mt rows × nt cols), mt ≤ M and nt ≤ N, both ≥ 1.
struct GemmPlan {
  int64_t mt = 0, nt = 0;
};

// Below this many multiply-adds (M·N·K) the whole product is one single-threaded call: a thread
// team costs more than it saves. Measured: the smallest benchmarked shape, 1024×64×64 = 2^22,
// still gains from 2 threads (≈108 → 148 GFLOP/s); 2^21 (≈20 µs of single-core work) is the
// conservative side of that. TODO(gemm): add 1024×{16,32}×64 to bench_gemm to pin the break-even.
inline constexpr int64_t kSerialWork = int64_t(1) << 21;

// The plan for a product: a function of the shape only, never of the thread count.
GemmPlan gemm_plan(int64_t M, int64_t N, int64_t K);

// One oneDNN sgemm on the calling thread only (oneDNN's thread budget is forced to 1 around the
// call, inside or outside a parallel region). Returns false if oneDNN rejected the call. Same
// argument contract as kernels::gemm, except that alpha must not be 0 (handled by gemm).
bool onednn_sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc);

// C = alpha·op(A)·op(B) + beta·C computed panel by panel (plan p), panels distributed over the
// OpenMP team with a static schedule. Deterministic for a fixed p. alpha ≠ 0, K ≥ 1, M, N ≥ 1
// (gemm handles the degenerate cases itself).
void gemm_paneled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, GemmPlan p);

}  // namespace tfm::kernels::gemm_detail
