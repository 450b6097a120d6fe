// src/kernels/gemm_backend.h — internals of the fast gemm (src/kernels/gemm.cc), exposed only to
// gemm.cc, gemm_avx2.cc (a panel's product on CPUs with AVX2 but not AVX-512), gemm_bf16.cc and gemm_packed.cc
// (which run oneDNN on the same panel plan, or the same serial scope), gemm_packed_avx2.cc (its float products on
// gemm_avx2.cc's kernel), attention_gemm.cc (its single-threaded products) and bench/bench_gemm.cc, so the panel
// choice can be measured against oneDNN's own threading.
// Not part of the kernel interface: ops call gemm() from kernels.h.
//
// Determinism scheme. oneDNN's sgemm, when it threads, may split the K reduction between threads
// and the split depends on the thread count, so results change with OMP_NUM_THREADS. Instead, C is
// cut into fixed panels of (mt rows × nt cols) chosen from (M, N, K) only; every panel is one
// oneDNN sgemm call (or one gemm_avx2_serial) that runs on a single thread, and the panels are spread over threads with
// `omp parallel for schedule(static)`. A panel's result depends only on its inputs and its shape,
// never on which thread runs it or how many there are, so C is bitwise identical for any thread
// count.
#pragma once

#include <omp.h>

#include <cstdint>

namespace tfm::kernels::gemm_detail {

// Makes oneDNN (OpenMP runtime) see a thread budget of 1 for the lifetime of the scope. oneDNN
// runs serially inside an active parallel region (it checks omp_in_parallel()), but outside one,
// and when a primitive descriptor picks its blocking, it asks omp_get_max_threads(). That is an
// ICV of the calling task only, so lowering it here and restoring it afterwards affects nobody
// else, inside or outside our parallel region. A call that sees a budget above 1 may thread, and its
// bits then depend on the budget (the scheme above; bench/RESULTS.md, "Design measurements behind the
// kernels", records the check).
class SerialOmpScope {
 public:
  SerialOmpScope() : saved_(omp_get_max_threads()) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~SerialOmpScope() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  SerialOmpScope(const SerialOmpScope&) = delete;
  SerialOmpScope& operator=(const SerialOmpScope&) = delete;

 private:
  int saved_;
};

// ⌈a / b⌉ and a rounded up to a multiple of b, for a ≥ 0, b ≥ 1: the gemm files' block and panel counts.
inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// How C is cut: panels of (mt rows × nt cols), mt ≤ M and nt ≤ N, both ≥ 1.
struct GemmPlan {
  int64_t mt = 0, nt = 0;
};

// Below this many multiply-adds (M·N·K) the whole product is one single-threaded call: a thread
// team costs more than it saves. 2^21 is half of the smallest benchmarked shape that still gains
// from 2 threads, 1024×64×64 = 2^22: the conservative side of an unmeasured break-even
// (bench/RESULTS.md, "Design measurements behind the kernels"). TODO(gemm): add 1024×{16,32}×64 to
// bench_gemm to pin the break-even.
inline constexpr int64_t kSerialWork = int64_t(1) << 21;

// The tallest row panel of a plan (gemm.cc says why 512); gemm_avx2_serial runs a longer call in chunks of as many
// rows.
inline constexpr int64_t kMaxPanelRows = 512;

// The plan for a product: a function of the shape only, never of the thread count.
GemmPlan gemm_plan(int64_t M, int64_t N, int64_t K);
// The plan gemm and gemm_bias use: gemm_plan's, except that where use_gemm_avx2() a product wider than tall (N > M)
// that gemm_plan cuts into row panels is cut into column panels (gemm.cc says why). Also of the shape only.
GemmPlan gemm_plan_f32(int64_t M, int64_t N, int64_t K);

// Once per process, before the first oneDNN call of any GEMM (gemm, gemm_bf16, gemm_packed): glibc's
// malloc keeps blocks below 32 MB on the heap and up to 256 MB of free heap top mapped, so that buffers
// freed and allocated again every call or step are not faulted in page by page each time (gemm.cc says
// why; the README documents it). Left alone under GLIBC_TUNABLES' malloc settings.
void keep_gemm_buffers_resident();

// One oneDNN sgemm on the calling thread only (oneDNN's thread budget is forced to 1 around the
// call, inside or outside a parallel region). Returns false if oneDNN rejected the call. Same
// argument contract as kernels::gemm, except that alpha must not be 0 (handled by gemm).
bool onednn_sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc);

// The panel kernel on CPUs with AVX2 but without AVX-512 (gemm_avx2.cc): oneDNN's AVX2 sgemm ran the
// training step's products there at about half the FMA peak, and slowest on the weight gradients' long
// strides, which our packing reads as any other (bench/RESULTS.md has the figures). The same argument
// contract as onednn_sgemm_serial (M, N, K ≥ 1, alpha ≠ 0), never fails, single-threaded; call only when
// cpu_has_avx2(). With bias (N floats; then alpha = 1 and beta = 0), C = op(A)·op(B) + bias broadcast over
// rows, bitwise what beta = 1 gives on rows preset to the bias (gemm_bias's definition), without the preset.
void gemm_avx2_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                      const float* bias = nullptr);

// gemm_packed's float32 and bfloat16 products on the same CPUs (gemm_packed_avx2 calls it): the columns of 16-wide
// blocks [b0, b1) of C (m, N) = A (m, K) · W (+ bias), where W is already in the strips gemm_avx2_serial packs B
// into — pack_rows16's layout: block b's element (k, j) at W[b·w_stride + 16k + j], zeros past column N. Only A is
// packed, per call. Each output one k-ascending fma chain from 0, then + bias[j]: gemm_rows_scalar's sum, bit for
// bit, for any m, block range or thread. m ≥ 0, K ≥ 1; single-threaded; call only when cpu_has_avx2().
void gemm_avx2_rows16(int64_t m, const float* A, int64_t lda, const float* W, int64_t w_stride, int64_t N, int64_t K,
                      int64_t b0, int64_t b1, const float* bias, float* C, int64_t ldc);

// True where gemm, gemm_bias and attention's AVX2 backward run their panels on gemm_avx2_serial instead of
// oneDNN: cpu_has_avx2() and not cpu_has_avx512().
bool use_gemm_avx2();

// One panel on the calling thread: gemm_avx2_serial where use_gemm_avx2(), else oneDNN's sgemm (falling back
// to the twin if oneDNN refuses). alpha ≠ 0 and M, N, K ≥ 1 (the callers take the empty cases themselves).
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Rows [0, m) of C (stride ldc) ← row[0, n) (gemm_bias's preset of a bias before accumulating).
void preset_rows(float* C, int64_t ldc, int64_t m, const float* row, int64_t n);

// C = alpha·op(A)·op(B) + beta·C computed panel by panel (plan p), panels distributed over the
// OpenMP team with a static schedule (where use_gemm_avx2(), a thread's row panels run as one gemm_avx2_serial
// call, which packs op(B) once: its bits do not depend on the cut). Deterministic for a fixed p. alpha ≠ 0, K ≥ 1, M, N
// ≥ 1 (gemm handles the degenerate cases itself). With row_init (N floats; then alpha = beta = 1), each panel's rows of
// C are first set to row_init (the panel's columns) by the thread that computes it (gemm_bias); gemm_avx2_serial adds
// row_init as the product's last addition instead, the same bits.
void gemm_paneled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, GemmPlan p, const float* row_init = nullptr);

}  // namespace tfm::kernels::gemm_detail
