// bench/gemm_blocked_avx512.cc — the own-GEMM experiment of bench/gemm_blocked.h (algorithm,
// blocking and numerical contract there) and its scalar twin. Compiled with AVX-512 flags
// (bench/CMakeLists.txt); only bench_gemm links it.
// GCC 12's intrinsic headers seed the pass-through operand of the unpack/shuffle intrinsics (the
// register transposes) with an "undefined" vector that -Wmaybe-uninitialized reports from inside the
// header; the value is never read (as in src/kernels/elementwise_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gemm_blocked.h"
#include "kernels/common_avx512.h"
#include "kernels/transpose_avx512.h"

namespace tfm_bench::blocked {
namespace {

using tfm::kernels::first_n;
using tfm::kernels::Scratch;  // grow-only aligned scratch: no allocation in the steady state
using tfm::kernels::transpose_block;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- packing ------------------------------------------------------------------------------------
// One B sliver: op(B)(k, j) for k in [p, p+kc), j in [j0, j0+nr), nr ≤ kNR, stored k-major with
// kNR floats per k (columns past nr are zero): dst[k·kNR + j].
void pack_b_sliver(bool trans_b, const float* B, int64_t ldb, int64_t p, int64_t kc, int64_t j0,
                   int64_t nr, float* dst) {
  if (trans_b) {  // op(B)(k, j) = B[j·ldb + k]: nr rows of B, transposed through registers
    if (nr < kNR) std::memset(dst, 0, sizeof(float) * static_cast<size_t>(kc * kNR));
    transpose_block(B + j0 * ldb + p, ldb, nr, kc, dst, kNR);
    return;
  }
  const __mmask16 m0 = first_n(nr), m1 = first_n(nr - 16);  // op(B)(k, j) = B[k·ldb + j]: row pieces
  const float* src = B + p * ldb + j0;
  for (int64_t k = 0; k < kc; ++k, src += ldb, dst += kNR) {
    _mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, src));
    _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, src + 16));
  }
}

// An A block: op(A)(i, k) for i in [i0, i0+mc), k in [p, p+kc), as ceil(mc/kMR) slivers of kMR rows,
// sliver q at dst + q·kc·kMR, k-major: dst[q·kc·kMR + k·kMR + i] (rows past mc are zero).
void pack_a_block(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t p,
                  int64_t kc, float* dst) {
  const int64_t slivers = ceil_div(mc, kMR);
  if (!trans_a) {  // op(A)(i, k) = A[i·lda + k]: kMR rows of A, transposed through registers
    for (int64_t q = 0; q < slivers; ++q) {
      const int64_t rows = std::min(kMR, mc - q * kMR);
      float* d = dst + q * kc * kMR;
      if (rows < kMR) std::memset(d, 0, sizeof(float) * static_cast<size_t>(kc * kMR));
      transpose_block(A + (i0 + q * kMR) * lda + p, lda, rows, kc, d, kMR);
    }
    return;
  }
  // op(A)(i, k) = A[k·lda + i]: row k of A holds the block's mc values contiguously; each sliver
  // takes kMR of them (a masked 16-lane load, stored as kMR lanes; missing rows load as zero).
  const __mmask16 store = first_n(kMR);
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = A + (p + k) * lda + i0;
    for (int64_t q = 0; q < slivers; ++q)
      _mm512_mask_storeu_ps(dst + q * kc * kMR + k * kMR, store,
                            _mm512_maskz_loadu_ps(first_n(std::min(kMR, mc - q * kMR)), src + q * kMR));
  }
}

// ---- micro-kernel -------------------------------------------------------------------------------
// C(mr, nr) ← alpha·acc (beta == 0) or fma(beta, C, alpha·acc), acc(kMR, kNR) = Σ_k a(:, k)·b(k, :)
// over one K block, a and b packed slivers (mr ≤ kMR, nr ≤ kNR; the rest of the tile is computed on
// the zero padding and not stored). Per k: two loads of b, kMR broadcasts of a, 2·kMR FMAs into 28
// independent accumulators — enough chains to keep both FMA ports busy through the 4-cycle latency.
void micro_tile(int64_t kc, const float* __restrict a, const float* __restrict b, float* c,
                int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta) {
  __m512 acc0[kMR], acc1[kMR];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  // The C tile is read and written only after the K loop; ask for its lines now so the misses
  // overlap with the FMAs (C is megabytes: its lines come from L3 or memory).
  for (int64_t i = 0; i < mr; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __mmask16 m0 = first_n(nr), m1 = first_n(nr - 16);
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    if (i >= mr) break;
    float* ci = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(va, acc0[i]), r1 = _mm512_mul_ps(va, acc1[i]);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
}

}  // namespace

void gemm_blocked_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc) {
  // The packed B block, double-buffered so one barrier per block suffices: a thread packing block
  // s+2 into buffer s&1 has passed the barrier after block s+1's packing, which every thread reaches
  // only after it finished computing with block s. Owned by the calling thread, shared by the team.
  thread_local Scratch b_buffer;
  const int64_t kc_max = std::min(K, kKC), nc_max = ceil_div(std::min(N, kNC), kNR) * kNR;
  float* const b_blocks = b_buffer.get(static_cast<size_t>(2 * kc_max * nc_max));
  const int64_t tiles = ceil_div(M, kMR);
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tiles));

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    thread_local Scratch a_buffer;
    float* const a_block = a_buffer.get(static_cast<size_t>(kMC * kc_max));
    int64_t step = 0;
    for (int64_t jc = 0; jc < N; jc += kNC) {
      const int64_t nc = std::min(kNC, N - jc), slivers = ceil_div(nc, kNR);
      // This thread's row tiles [t0, t1): an even share. The split only decides who computes
      // what, never how: every element is summed the same way.
      const int64_t t0 = tiles * tid / nt, t1 = tiles * (tid + 1) / nt;
      for (int64_t p = 0; p < K; p += kKC, ++step) {
        const int64_t kc = std::min(kKC, K - p);
        float* const b_block = b_blocks + (step & 1) * kc_max * nc_max;
        for (int64_t s = tid; s < slivers; s += nt)
          pack_b_sliver(trans_b, B, ldb, p, kc, jc + s * kNR, std::min(kNR, nc - s * kNR), b_block + s * kc * kNR);
#pragma omp barrier
        const float block_beta = p == 0 ? beta : 1.0f;
        // This thread's row tiles in blocks of at most kMC / kMR tiles, of equal size (each block
        // streams the whole packed B once, so a small last block would pay as much as a full one).
        const int64_t per_block = ceil_div(t1 - t0, ceil_div(t1 - t0, kMC / kMR));
        for (int64_t tb = t0; tb < t1; tb += per_block) {
          const int64_t te = std::min(t1, tb + per_block), ic = tb * kMR, mc = std::min(M, te * kMR) - ic;
          pack_a_block(trans_a, A, lda, ic, mc, p, kc, a_block);
          for (int64_t s = 0; s < slivers; ++s) {  // one B sliver against the whole A block
            const int64_t nr = std::min(kNR, nc - s * kNR);
            for (int64_t t = tb; t < te; ++t) {
              micro_tile(kc, a_block + (t - tb) * kc * kMR, b_block + s * kc * kNR, C + t * kMR * ldc + jc + s * kNR,
                         ldc, std::min(kMR, M - t * kMR), nr, alpha, block_beta);
            }
          }
        }
      }
    }
  }
}

void gemm_blocked_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc) {
  const int64_t a_si = trans_a ? 1 : lda, a_sk = trans_a ? lda : 1;
  const int64_t b_sk = trans_b ? 1 : ldb, b_sj = trans_b ? ldb : 1;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float* c = C + i * ldc + j;
      for (int64_t p = 0; p < K; p += kKC) {
        float acc = 0.0f;
        for (int64_t k = p; k < std::min(K, p + kKC); ++k)
          acc = std::fma(A[i * a_si + k * a_sk], B[k * b_sk + j * b_sj], acc);
        const float r = alpha * acc;
        *c = p > 0 ? *c + r : beta == 0.0f ? r : std::fma(beta, *c, r);
      }
    }
}

}  // namespace tfm_bench::blocked
