// src/kernels/gemm.cc — gemm and gemm_bias, the fast GEMM: single-threaded products on fixed output
// panels in our own OpenMP loop (see gemm_backend.h for why), so results never depend on the thread
// count. A panel is one oneDNN sgemm call, or on CPUs with AVX2 but not AVX-512 one gemm_avx2_serial
// (gemm_avx2.cc), which reads any stride through its packing and so needs neither of the long-stride
// workarounds below. The scalar twin is gemm_scalar (gemm_scalar.cc); TFM_FORCE_SCALAR=1 selects
// it. To retune: run bench/bench_gemm, compare the panels_* rows with tfm_gemm, and change
// gemm_plan() — the tests need no change.
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <dnnl.h>
#include <malloc.h>

#include "kernels/gemm_backend.h"
#include "kernels/kernels.h"
#include "kernels/signal_stack.h"

namespace tfm::kernels {
namespace gemm_detail {

namespace {

// Row panels of at most kMaxPanelRows rows, an even number of them (≥ 2) so two threads share
// evenly; short, wide outputs with few rows (M < 128, e.g. decoding) are cut into column panels
// instead. At most 512 rows, and no fewer than needed: a 512-row panel already amortizes A's packing
// and the kernel's blocking as the whole matrix would, while shorter panels amortize them over fewer
// rows (bench/bench_gemm.cc on the transformer shapes; the figures are in bench/RESULTS.md, "Design
// measurements behind the kernels").
// TODO(gemm): machines with more than 2 cores want more panels for M = 1024; re-measure there
// before lowering kMaxPanelRows (the plan must stay a function of the shape only).
constexpr int64_t kMinPanelRows = 64, kMaxPanelCols = 1024;  // kMaxPanelRows: gemm_backend.h

int64_t even_count(int64_t extent, int64_t max_size) {
  const int64_t n = std::max<int64_t>(2, ceil_div(extent, max_size));
  return n + (n & 1);
}

// Weight gradients dW = dyᵀ·x are TN products whose A = dy (N, out) has lda = out. oneDNN's
// transposed-A packing slows down on long power-of-two strides (cache-set conflicts), so a panel
// with lda ≥ 2048 first copies its op(A) rows to (m, K) and runs an NN call; at shorter strides the
// copy costs more than it saves, and it needs enough panel columns (n ≥ 256) to amortize it
// (single-core timings per lda in bench/RESULTS.md, "Design measurements behind the kernels"). The
// choice depends on the shape only, so the result stays independent of the thread count.
constexpr int64_t kTransposeMinLda = 2048, kTransposeMinCols = 256;

bool transpose_a_first(bool trans_a, int64_t lda, int64_t n) {
  return trans_a && lda >= kTransposeMinLda && n >= kTransposeMinCols;
}

// Copies op(A)'s panel rows — columns [0, m) of a (K, ≥m) block at stride lda — into a (m, K)
// row-major thread-local buffer (reused across calls: no allocation in the steady state) and returns
// it; kernels::transpose moves 16×16 (AVX-512) or 8×8 (AVX2) blocks through registers.
const float* transposed_panel(const float* a, int64_t lda, int64_t m, int64_t K) {
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(m * K)) buf.resize(static_cast<size_t>(m * K));
  transpose(a, lda, K, m, buf.data(), K);
  return buf.data();
}


// C (M, N) = op(A)·op(B) as (Bᵀ·A)ᵀ: the product computed with the operands swapped into a
// scratch Cᵀ (N, M), then transposed into C. For TN weight gradients dW = dyᵀ·x with a long-stride dy
// and many more output rows than columns — FFN1's dW (2048, 512) = dz (1024, 2048)ᵀ · x (1024, 512):
// the swapped product reads x, the short-stride operand, as its transposed A, which oneDNN packs
// fast, and moves 4 MB once instead of copying dz's panels to rows (transpose_a_first). Swapped only
// where the stride is long (lda ≥ kTransposeMinLda, where oneDNN's transposed packing slows) and the
// output has at least kSwapMinRatio times more rows than columns. So FFN1's dW at D = 256, F = 1024
// over 2048 tokens (M 1024, N 256, K 2048, lda 1024) stays unswapped: its stride is short, and its
// swapped product would have only 256 rows, two 128-row panels (bench/bench_gemm.cc, tfm_gemm against
// panels/512x512; the figures are in bench/RESULTS.md, "Design measurements behind the kernels").
// Only for beta = 0 (a gradient slot written, not accumulated), which is how Linear's backward calls
// it after zero_grad.
constexpr int64_t kSwapMinRatio = 4;

bool swap_tn_operands(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                      float beta) {
  return trans_a && !trans_b && beta == 0.0f && lda >= kTransposeMinLda && M >= kSwapMinRatio * N &&
         M * N * K >= kSerialWork;
}

void gemm_tn_swapped(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float* C, int64_t ldc) {
  thread_local std::vector<float> ct;  // Cᵀ (N, M); grows once per thread
  if (ct.size() < static_cast<size_t>(N * M)) ct.resize(static_cast<size_t>(N * M));
  // Cᵀ (N, M) = op(B)ᵀ (N, K) · op(A)ᵀ (K, M) = Bᵀ · A: B (K, N) is the transposed A of this product.
  gemm_paneled(true, false, N, M, K, alpha, B, ldb, A, lda, 0.0f, ct.data(), M, gemm_plan(N, M, K));
  // C[i, j] = Cᵀ[j, i], in fixed blocks of kRows rows of Cᵀ (columns of C) spread over the threads.
  constexpr int64_t kRows = 64;
  const float* src = ct.data();
  const int64_t blocks = ceil_div(N, kRows);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * kRows, rows = std::min(kRows, N - r0);
    transpose(src + r0 * M, M, rows, M, C + r0, ldc);
  }
}

}  // namespace

// oneDNN's sgemm allocates its packing buffers for A and B (2–4 MB at transformer shapes) with
// posix_memalign and frees them before it returns, on every call. Under glibc's default, adaptive
// thresholds that memory goes back to the kernel on free (the heap top is trimmed, or the block is
// mmap'ed) and is faulted in again, page by page, by the next call: a trap and a zeroed page for
// every 4 KB of every buffer, every call (bench/RESULTS.md, "Design measurements behind the
// kernels", has the count and the cost); oneDNN's matmul primitives (gemm_bf16, gemm_packed) and a
// training step's activations are such blocks too. So, once, before the first oneDNN call: blocks below 32 MB
// (glibc's largest mmap threshold) come from the heap, and up to 256 MB of free heap top is kept.
// Process-wide, hence documented in the README; left alone when the user tunes malloc through
// GLIBC_TUNABLES, and a no-op under allocators that are not glibc's (mallopt then returns 0 and
// changes nothing).
void keep_gemm_buffers_resident() {
  static const bool done = [] {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)done;
}

void preset_rows(float* C, int64_t ldc, int64_t m, const float* row, int64_t n) {
  for (int64_t i = 0; i < m; ++i) std::memcpy(C + i * ldc, row, sizeof(float) * static_cast<size_t>(n));
}

GemmPlan gemm_plan(int64_t M, int64_t N, int64_t K) {
  GemmPlan p{M, N};
  if (M * N * K < kSerialWork) return p;  // one serial call, no thread team
  if (M >= 2 * kMinPanelRows) {
    // M split into an even number of panels, each height rounded up to a multiple of 16 rows (still
    // ≤ kMaxPanelRows, itself a multiple of 16; the last panel takes what is left), so every panel
    // but the last starts on a row that is a multiple of 16: M = 1000 gives 512 + 488. Neither this
    // file nor bench/RESULTS.md records a measurement behind the 16.
    p.mt = std::min(M, round_up(ceil_div(M, even_count(M, kMaxPanelRows)), 16));
  } else if (N >= 2 * kMinPanelRows) {
    p.nt = std::min(N, round_up(ceil_div(N, even_count(N, kMaxPanelCols)), 64));
  }
  return p;
}

// Where gemm_avx2_serial runs the panels (use_gemm_avx2()) each panel packs its op(A) rows and its op(B) columns, and
// its bits do not depend on the cut: row panels have every thread pack all of op(B), column panels all of op(A), so
// where op(B) is wider than op(A) is tall (N > M, e.g. the weight gradient dW (128, 512) = dyᵀ·x over 768 tokens)
// the columns are cut instead, as gemm_plan cuts them for M < 128 (bench_gemm's panels/ rows against tfm_gemm;
// bench/RESULTS.md, "The AVX2 GEMM cuts wide products by columns"). Elsewhere gemm_plan's plan, unchanged.
GemmPlan gemm_plan_f32(int64_t M, int64_t N, int64_t K) {
  GemmPlan p = gemm_plan(M, N, K);
  if (use_gemm_avx2() && p.mt < M && N > M)
    p = {M, std::min(N, round_up(ceil_div(N, even_count(N, kMaxPanelCols)), 64))};
  return p;
}

bool onednn_sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc) {
  keep_gemm_buffers_resident();
  ensure_signal_stacks();  // oneDNN's JIT sgemm moves rsp into the heap (signal_stack.h)
  SerialOmpScope serial;
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                    C, ldc) == dnnl_success;
}

bool use_gemm_avx2() { return cpu_has_avx2() && !cpu_has_avx512(); }

void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (use_gemm_avx2()) {
    gemm_avx2_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else if (!onednn_sgemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) {
    // oneDNN only fails on malformed arguments (checked by the calling op) or out of memory; stay
    // correct (and deterministic) anyway.
    assert(false && "oneDNN rejected a gemm panel");
    gemm_scalar(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

void gemm_paneled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, GemmPlan p, const float* row_init) {
  const int64_t n_row = ceil_div(M, p.mt), n_col = ceil_div(N, p.nt);
  const int64_t n_panels = n_row * n_col;
  // Rows [i0, i0+m) and columns [j0, j0+n) of C: one panel, or (AVX2) several.
  auto run_block = [&](int64_t i0, int64_t m, int64_t j0, int64_t n) {
    const float* a = trans_a ? A + i0 : A + i0 * lda;  // op(A) rows i0..: columns of a (K,M) A
    const float* b = trans_b ? B + j0 * ldb : B + j0;  // op(B) cols j0..: rows of an (N,K) B
    float* c = C + i0 * ldc + j0;
    if (use_gemm_avx2()) {  // gemm_bias's bias as the product's last addition: the same bits, no preset
      assert(!row_init || (alpha == 1.0f && beta == 1.0f));
      gemm_avx2_serial(trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, row_init ? 0.0f : beta, c, ldc,
                       row_init ? row_init + j0 : nullptr);
      return;
    }
    if (row_init) preset_rows(c, ldc, m, row_init + j0, n);
    bool ta = trans_a;
    int64_t la = lda;
    if (transpose_a_first(trans_a, lda, n)) {  // op(A) panel copied to (m, K) rows: an NN call
      a = transposed_panel(a, lda, m, K);
      ta = false;
      la = K;
    }
    sgemm_serial(ta, trans_b, m, n, K, alpha, a, la, b, ldb, beta, c, ldc);
  };
  // Panel t; row-major panel order keeps each thread's static chunk on neighbouring rows (shared op(A) rows).
  auto run_panel = [&](int64_t t) {
    const int64_t i0 = (t / n_col) * p.mt, j0 = (t % n_col) * p.nt;
    run_block(i0, std::min(p.mt, M - i0), j0, std::min(p.nt, N - j0));
  };
  if (n_panels == 1) {
    run_panel(0);
    return;
  }
  if (use_gemm_avx2() && n_col == 1) {
    // gemm_avx2_serial's bits do not depend on where C is cut (gemm_backend.h), so each thread runs the row panels
    // a static schedule would give it, [q0, q1), as one call: op(B) is packed once per thread, not once a panel.
#pragma omp parallel
    {
      const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t q0 = n_panels * t / T, q1 = n_panels * (t + 1) / T;
      if (q0 < q1) run_block(q0 * p.mt, std::min(M, q1 * p.mt) - q0 * p.mt, 0, N);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_panels; ++t) run_panel(t);
}

}  // namespace gemm_detail

// C(M,N) = alpha · op(A)(M,K) · op(B)(K,N) + beta · C — contract in kernels.h.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (force_scalar()) {
    gemm_scalar(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M <= 0 || N <= 0) return;
  // Empty sum or alpha == 0: C = beta·C without touching A, B (BLAS convention, as gemm_scalar).
  // Done here because oneDNN's alpha == 0 path computes 0·C, leaving NaN garbage when beta == 0
  // (seen on NT panels, tests/kernels/gemm_test.cc).
  if (K <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (!gemm_detail::use_gemm_avx2() && gemm_detail::swap_tn_operands(trans_a, trans_b, M, N, K, lda, beta)) {
    gemm_detail::gemm_tn_swapped(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }
  gemm_detail::gemm_paneled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                            gemm_detail::gemm_plan_f32(M, N, K));
}

// C = op(A)·op(B) + bias broadcast over rows — contract in kernels.h.
void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
               int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (bias == nullptr) return gemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
  if (M <= 0 || N <= 0) return;
  if (force_scalar() || K <= 0) {  // the reference order: preset every row, then accumulate
    gemm_detail::preset_rows(C, ldc, M, bias, N);
    gemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
    return;
  }
  gemm_detail::gemm_paneled(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc,
                            gemm_detail::gemm_plan_f32(M, N, K), bias);
}

}  // namespace tfm::kernels
