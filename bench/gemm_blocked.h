// bench/gemm_blocked.h — an experiment, not part of the library: a complete fp32 GEMM of our own
// (packing, a 14×32 AVX-512 micro-kernel, threads sharing each packed block of op(B)), to measure
// against tfm's oneDNN-backed kernels::gemm in bench_gemm ("blocked" rows).
//
// The question it answers: bench_microkernel puts the ceiling of a hand-written kernel at 193–205
// GFLOP/s per core on a machine where tfm_gemm ran at 165–182 — would a whole GEMM (packing, edges,
// threads) keep that edge? oneDNN's sgemm splits K between threads (bits change with the thread
// count), so tfm runs one single-threaded oneDNN call per output panel, and each call packs all of
// op(B) again: at 2 threads B is packed twice. Here the threads pack each B block once, together.
// Measured so far (bench/RESULTS.md, "Own GEMM experiment", a Zen 4 with a 235 GFLOP/s peak): slower
// than tfm_gemm on 22 of 28 shapes at 2 threads (median −5%; −17 to −25% on 256- and 512-row outputs,
// whose row tiles split unevenly between the threads), and a config-M training step 2–8% slower
// with it; so the library keeps oneDNN. Re-run `bench_gemm --benchmark_filter='(blocked|tfm_gemm)/'`
// on a machine with full-width AVX-512 FMA (where oneDNN reached only 64–77% of peak) before deciding
// otherwise.
//
// The algorithm (Goto / BLIS blocking, row-major C, broadcasting A):
//   for each column block jc of C (kNC columns):
//     for each K block p (kKC deep):                       C[:, jc] (+)= op(A)[:, p] · op(B)[p, jc]
//       all threads pack op(B)[p, jc] into kNR-wide slivers, k-major       (kKC × kNR per sliver)
//       each thread, over its own row tiles in blocks of ≤ kMC rows:
//         pack op(A)[rows, p] into kMR-tall slivers, k-major               (kKC × kMR per sliver)
//         for each B sliver, for each A sliver: the kMR × kNR micro-kernel, acc in 28 zmm registers
//
// Numerical contract, the same for gemm_blocked_avx512 and gemm_blocked_scalar (bitwise, checked by the
// benchmark before it times): K is cut into blocks [0, kKC), [kKC, 2·kKC), …; for each element,
// block p's products are summed with fused multiply-adds in ascending k: acc_p = fma(a, b, acc_p);
//   p = 0:  C = alpha·acc_0  (beta == 0: C is not read)   or   C = fma(beta, C, alpha·acc_0)
//   p > 0:  C = C + alpha·acc_p
// A pure function of the inputs and of K: the same for every thread count, tile and panel size.
#pragma once

#include <cstdint>

namespace tfm_bench::blocked {

inline constexpr int64_t kMR = 14;        // micro-tile rows: 14 × 2 accumulators = 28 of 32 zmm
inline constexpr int64_t kNR = 32;        // micro-tile columns: 2 zmm
inline constexpr int64_t kKC = 512;       // K block (tried 128, 256, 384, 512: 512 best here)
inline constexpr int64_t kMC = 16 * kMR;  // rows per packed A block (224 × 512 floats = 448 KB, in L2)
inline constexpr int64_t kNC = 4096;      // columns per packed B block (shared by the threads)

// C(M,N) = alpha·op(A)·op(B) + beta·C, the arguments of tfm::kernels::gemm (kernels.h), with
// alpha ≠ 0, K ≥ 1, M, N ≥ 1. Uses omp_get_max_threads() threads (one inside a parallel region).
void gemm_blocked_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc);
// The scalar twin: the contract above, element by element.
void gemm_blocked_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc);

}  // namespace tfm_bench::blocked
