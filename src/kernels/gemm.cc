// src/kernels/gemm.cc — gemm, the fast GEMM: oneDNN's single-threaded sgemm run on fixed output
// panels in our own OpenMP loop (see gemm_backend.h for why), so results never depend on the
// thread count. The scalar twin is gemm_scalar (gemm_scalar.cc); TFM_FORCE_SCALAR=1 selects it.
#include <omp.h>

#include <algorithm>
#include <cassert>

#include <dnnl.h>

#include "kernels/gemm_backend.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace gemm_detail {

namespace {

// Makes oneDNN (OpenMP runtime) see a thread budget of 1 for the lifetime of the scope. oneDNN
// runs serially inside an active parallel region (it checks omp_in_parallel()), but outside one,
// and when a primitive descriptor picks its blocking, it asks omp_get_max_threads(). That is an
// ICV of the calling task only, so lowering it here and restoring it afterwards affects nobody
// else, inside or outside our parallel region.
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

// The CPU engine, created on first use and deliberately never destroyed (no static destruction
// order hazards at exit). Null if oneDNN could not create it.
dnnl_engine_t cpu_engine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) e = nullptr;
    return e;
  }();
  return engine;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Row panels of at most kMaxPanelRows rows, an even number of them (≥ 2) so two threads share
// evenly; tall-skinny outputs with few rows (M < 128, e.g. decoding) are cut into column panels
// instead. Measured on the transformer shapes (bench/bench_gemm.cc): M/2-row panels of 512 match
// or beat oneDNN's own (non-deterministic) threading on 2 cores; 128-row panels cost up to ~12%.
// TODO(gemm): machines with more than 2 cores want more panels for M = 1024; re-measure there
// before lowering kMaxPanelRows (the plan must stay a function of the shape only).
constexpr int64_t kMaxPanelRows = 512, kMinPanelRows = 64, kMaxPanelCols = 1024;
// trans_a with lda ≥ this goes through the matmul primitive (see GemmBackend).
constexpr int64_t kMatmulMinLda = 1024;

int64_t even_count(int64_t extent, int64_t max_size) {
  const int64_t n = std::max<int64_t>(2, ceil_div(extent, max_size));
  return n + (n & 1);
}

}  // namespace

GemmPlan gemm_plan(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda) {
  (void)trans_b;
  GemmPlan p{M, N, GemmBackend::ONEDNN_SGEMM};
  if (M * N * K < kSerialWork) return p;  // one serial call, no thread team
  if (trans_a && lda >= kMatmulMinLda) p.backend = GemmBackend::ONEDNN_MATMUL;
  if (M >= 2 * kMinPanelRows) {
    p.mt = std::min(M, round_up(ceil_div(M, even_count(M, kMaxPanelRows)), 16));
  } else if (N >= 2 * kMinPanelRows) {
    p.nt = std::min(N, round_up(ceil_div(N, even_count(N, kMaxPanelCols)), 64));
  }
  return p;
}

bool onednn_sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc) {
  SerialOmpScope serial;
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                    C, ldc) == dnnl_success;
}

bool onednn_matmul_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc) {
  SerialOmpScope serial;
  dnnl_engine_t engine = cpu_engine();
  if (engine == nullptr) return false;
  // op(A) (M,K), op(B) (K,N), C (M,N) as strided 2-D views of the caller's buffers.
  const dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
  const dnnl_dims_t a_strides = {trans_a ? 1 : lda, trans_a ? lda : 1};
  const dnnl_dims_t b_strides = {trans_b ? 1 : ldb, trans_b ? ldb : 1};
  const dnnl_dims_t c_strides = {ldc, 1};
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_matmul_desc_t op;
  if (dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_f32, a_strides) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_f32, b_strides) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides) != dnnl_success ||
      dnnl_matmul_desc_init(&op, &a_md, &b_md, nullptr, &c_md) != dnnl_success)
    return false;
  // C = alpha·(A·B) [output scale] + beta·C [sum post-op]; without the post-op C is overwritten.
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t post = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a_mem = nullptr, b_mem = nullptr, c_mem = nullptr;
  dnnl_stream_t stream = nullptr;
  bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
  if (ok && alpha != 1.0f)
    ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
  if (ok && beta != 0.0f) {
    ok = dnnl_post_ops_create(&post) == dnnl_success &&
         dnnl_post_ops_append_sum(post, beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, post) == dnnl_success;
  }
  // The primitive itself comes from oneDNN's (thread-safe) primitive cache after the first call.
  ok = ok && dnnl_primitive_desc_create(&pd, &op, attr, engine, nullptr) == dnnl_success &&
       dnnl_primitive_create(&prim, pd) == dnnl_success &&
       dnnl_memory_create(&a_mem, &a_md, engine, const_cast<float*>(A)) == dnnl_success &&
       dnnl_memory_create(&b_mem, &b_md, engine, const_cast<float*>(B)) == dnnl_success &&
       dnnl_memory_create(&c_mem, &c_md, engine, C) == dnnl_success &&
       dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
  if (ok) {
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
    ok = dnnl_primitive_execute(prim, stream, 3, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
  }
  if (stream) dnnl_stream_destroy(stream);
  if (c_mem) dnnl_memory_destroy(c_mem);
  if (b_mem) dnnl_memory_destroy(b_mem);
  if (a_mem) dnnl_memory_destroy(a_mem);
  if (prim) dnnl_primitive_destroy(prim);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (post) dnnl_post_ops_destroy(post);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return ok;
}

// One panel on the chosen backend, serially.
static bool onednn_panel(GemmBackend backend, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                         int64_t ldb, float beta, float* C, int64_t ldc) {
  return backend == GemmBackend::ONEDNN_MATMUL
             ? onednn_matmul_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
             : onednn_sgemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_paneled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc, GemmPlan p) {
  const int64_t n_row = ceil_div(M, p.mt), n_col = ceil_div(N, p.nt);
  const int64_t n_panels = n_row * n_col;
  // Panel t covers rows [i0, i0+m) and columns [j0, j0+n) of C; row-major panel order keeps each
  // thread's static chunk on neighbouring rows (shared op(A) rows).
  auto run_panel = [&](int64_t t) {
    const int64_t i0 = (t / n_col) * p.mt, j0 = (t % n_col) * p.nt;
    const int64_t m = std::min(p.mt, M - i0), n = std::min(p.nt, N - j0);
    const float* a = trans_a ? A + i0 : A + i0 * lda;  // op(A) rows i0..: columns of a (K,M) A
    const float* b = trans_b ? B + j0 * ldb : B + j0;  // op(B) cols j0..: rows of an (N,K) B
    float* c = C + i0 * ldc + j0;
    if (!onednn_panel(p.backend, trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, beta, c, ldc)) {
      // oneDNN only fails on malformed arguments (checked by the calling op) or out of memory;
      // stay correct (and deterministic) anyway.
      assert(false && "oneDNN rejected a gemm panel");
      gemm_scalar(trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, beta, c, ldc);
    }
  };
  if (n_panels == 1) {
    run_panel(0);
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
  // Empty sum or alpha == 0: C = beta·C without touching A, B (BLAS convention, as gemm_ref).
  // Done here because oneDNN's alpha == 0 path computes 0·C, leaving NaN garbage when beta == 0
  // (seen on NT panels, tests/kernels/gemm_test.cc).
  if (K <= 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  gemm_detail::gemm_paneled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                            gemm_detail::gemm_plan(trans_a, trans_b, M, N, K, lda));
}

}  // namespace tfm::kernels
