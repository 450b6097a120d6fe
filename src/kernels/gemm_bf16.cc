// src/kernels/gemm_bf16.cc — gemm_bf16: bfloat16 operands, float32 sums, oneDNN's matmul primitive on
// kernels::gemm's fixed output panels. Contract in gemm_bf16.h.
//
// oneDNN specifics relied on (2.6):
//   * dst (m, n) = src (m, K) · weights (K, n); a transposed operand is the same desc with swapped
//     strides ({1, ld}), which the brgemm kernels take directly (no copy of ours).
//   * the primitive's dims are fixed: one primitive per panel shape, cached here (oneDNN's runtime
//     dimensions select its reference loop for bf16, far slower than any shape's JIT).
//   * beta = 1 is a `sum` post-op (dst ← dst + result); the bias is the primitive's f32 bias.
//   * a primitive executed while omp_get_max_threads() == 1 (SerialOmpScope) or inside a parallel
//     region runs on the calling thread only; scratchpads are user-managed, per thread.
#include "kernels/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/gemm_backend.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_scalar.h"
#include "kernels/kernels.h"
#include "kernels/onednn_primitives.h"
#include "kernels/parallel_chunks.h"
#include "kernels/signal_stack.h"

namespace tfm::kernels {
namespace {

using dnnl::memory;
using Dt = memory::data_type;
using gemm_detail::SerialOmpScope;
using onednn::cpu_engine;
using onednn::thread_buffer;
using onednn::thread_stream;

using gemm_detail::ceil_div;

// One panel's primitive: (m, n, K), the strides, the transposes, accumulate (beta = 1) and bias.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, bool>;
struct Prim {
  dnnl::matmul prim;
  memory::desc src, wei, dst, bias, scratch;
  bool ok = false;  // false: no bf16 kernel for this CPU (oneDNN offered its reference loop) or none at all
};

// The cache: a handful of shapes per Linear; shapes that vary per batch (the rows of a token-budget
// batch) add more, so it is emptied when it grows past kMaxPrims (callers hold shared_ptrs).
constexpr size_t kMaxPrims = 4096;

std::shared_ptr<const Prim> panel_prim(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Prim>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto [m, n, K, lda, ldb, ldc, ta, tb, beta, has_bias] = key;
  auto p = std::make_shared<Prim>();
  try {
    SerialOmpScope serial;  // blocking chosen for one thread
    p->src = memory::desc({m, K}, Dt::bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
    p->wei = memory::desc({K, n}, Dt::bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    p->dst = memory::desc({m, n}, Dt::f32, {ldc, 1});
    if (has_bias) p->bias = memory::desc({1, n}, Dt::f32, memory::format_tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const auto d = has_bias ? dnnl::matmul::desc(p->src, p->wei, p->bias, p->dst) : dnnl::matmul::desc(p->src, p->wei, p->dst);
    const dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    // "ref:any" is a plain loop, hundreds of times slower than sgemm: the panel widens to float instead.
    if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) {
      p->scratch = pd.scratchpad_desc();
      p->prim = dnnl::matmul(pd);
      p->ok = true;
    }
  } catch (const dnnl::error&) {
    p->ok = false;
  }
  if (cache.size() >= kMaxPrims) cache.clear();
  cache.emplace(key, p);
  return p;
}

// op(X)'s block (rows × cols) widened to a dense float (rows, cols) buffer: X at stride ld, transposed
// when trans (then X is (cols, ≥rows) and element (r, c) is X[c·ld + r]).
void widen(const uint16_t* X, int64_t ld, bool trans, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = bf16_to_float(trans ? X[c * ld + r] : X[r * ld + c]);
}

// One panel without a bf16 kernel: both operands widened, sgemm (float32 sums, exact products).
void panel_widened(bool ta, bool tb, int64_t m, int64_t n, int64_t K, const uint16_t* a, int64_t lda,
                   const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc, const float* bias) {
  thread_local std::vector<float> wa, wb;
  float* fa = thread_buffer(wa, static_cast<size_t>(m * K));
  float* fb = thread_buffer(wb, static_cast<size_t>(K * n));
  widen(a, lda, ta, m, K, fa);
  widen(b, ldb, tb, K, n, fb);
  if (!gemm_detail::onednn_sgemm_serial(false, false, m, n, K, 1.0f, fa, K, fb, n, beta, c, ldc))
    gemm_scalar(false, false, m, n, K, 1.0f, fa, K, fb, n, beta, c, ldc);
  if (bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
}

void panel_onednn(const Prim& p, const uint16_t* a, const uint16_t* b, float* c, const float* bias) {
  const dnnl::engine& eng = cpu_engine();
  thread_local std::vector<uint8_t> scratch;
  const size_t ns = p.scratch.get_size();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(p.src, eng, const_cast<uint16_t*>(a))},
      {DNNL_ARG_WEIGHTS, memory(p.wei, eng, const_cast<uint16_t*>(b))},
      {DNNL_ARG_DST, memory(p.dst, eng, c)},
      {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, ns ? thread_buffer(scratch, ns) : nullptr)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, eng, const_cast<float*>(bias)));
  SerialOmpScope serial;
  ensure_signal_stacks();  // signal_stack.h
  p.prim.execute(thread_stream(), args);
  thread_stream().wait();
}

// C ← bias + beta·C (the K = 0 product), row by row.
void bias_plus_beta(int64_t M, int64_t N, float beta, float* C, int64_t ldc, const float* bias) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = (bias ? bias[j] : 0.0f) + prev;
    }
}

}  // namespace

bool cpu_has_bf16_dot() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every CPU with AMX-BF16 has AVX512-BF16 too.
    return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  }();
  return has && !force_scalar();
}

void convert_to_bf16(const float* src, int64_t n, uint16_t* dst) {
  // parallel_chunks.h's element chunks (16,384), on the calling thread up to 65,536 elements: a Linear's input
  // or output gradient of a few hundred thousand splits evenly over the threads.
  for_each_elem_chunk(n, 65536,
                      [&](int64_t i0, int64_t len) { convert_rows_to_bf16(src + i0, len, 1, len, dst + i0); });
}

void gemm_bf16_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
                      const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return bias_plus_beta(M, N, beta, C, ldc, bias);
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), acc(static_cast<size_t>(M * N));
  widen(A, lda, trans_a, M, K, a.data());
  widen(B, ldb, trans_b, K, N, b.data());
  gemm_scalar<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, acc.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float s = bias ? acc[i * N + j] + bias[j] : acc[i * N + j];
      C[i * ldc + j] = beta == 0.0f ? s : s + beta * C[i * ldc + j];
    }
}

namespace {

// op(A)'s panel rows [i0, i0 + m) as bfloat16: A itself when it is bfloat16; for float32 A, rounded into the
// calling thread's buffer — (m, K) rows (lda' = K) or, transposed, the (K, m) block (lda' = m) — so the panel's
// matmul reads a dense block it just wrote.
const uint16_t* panel_a(const uint16_t* A, int64_t lda, bool trans_a, int64_t i0, int64_t, int64_t, int64_t& ld) {
  ld = lda;
  return trans_a ? A + i0 : A + i0 * lda;
}
const uint16_t* panel_a(const float* A, int64_t lda, bool trans_a, int64_t i0, int64_t m, int64_t K, int64_t& ld) {
  thread_local std::vector<uint16_t> buf;
  uint16_t* d = thread_buffer(buf, static_cast<size_t>(m * K));
  if (trans_a) {
    convert_rows_to_bf16(A + i0, lda, K, m, d);  // K rows of m values at stride lda
    ld = m;
  } else {
    convert_rows_to_bf16(A + i0 * lda, lda, m, K, d);
    ld = K;
  }
  return d;
}

// The panel's leading dimension of op(A): a function of the panel's shape only (the primitive's key).
int64_t panel_lda(const uint16_t*, int64_t lda, bool, int64_t, int64_t) { return lda; }
int64_t panel_lda(const float*, int64_t, bool trans_a, int64_t m, int64_t K) { return trans_a ? m : K; }

// Both gemm_bf16 entry points: the scalar switch, the degenerate shapes, then the panels.
template <typename TA>
void gemm_bf16_paneled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda,
                       const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (force_scalar()) return gemm_bf16_scalar(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return bias_plus_beta(M, N, beta, C, ldc, bias);
  gemm_detail::keep_gemm_buffers_resident();
  const gemm_detail::GemmPlan p = gemm_detail::gemm_plan(M, N, K);
  const int64_t n_row = ceil_div(M, p.mt), n_col = ceil_div(N, p.nt);
  const int64_t last_m = M - (n_row - 1) * p.mt, last_n = N - (n_col - 1) * p.nt;
  // The (at most four) panel shapes' primitives, made here, before the threads need them.
  auto prim_for = [&](int64_t m, int64_t n) {
    return panel_prim(Key{m, n, K, panel_lda(A, lda, trans_a, m, K), ldb, ldc, trans_a, trans_b, beta, bias != nullptr});
  };
  const std::shared_ptr<const Prim> full = prim_for(p.mt, p.nt), row_tail = prim_for(last_m, p.nt),
                                    col_tail = prim_for(p.mt, last_n), corner = prim_for(last_m, last_n);
  auto run_panel = [&](int64_t t) {
    const int64_t r = t / n_col, q = t % n_col;
    const int64_t i0 = r * p.mt, j0 = q * p.nt;
    const bool tail_m = r == n_row - 1, tail_n = q == n_col - 1;
    const int64_t m = tail_m ? last_m : p.mt, n = tail_n ? last_n : p.nt;
    const Prim& pr = tail_m ? (tail_n ? *corner : *row_tail) : (tail_n ? *col_tail : *full);
    int64_t la = lda;
    const uint16_t* a = panel_a(A, lda, trans_a, i0, m, K, la);  // op(A) rows i0..
    const uint16_t* b = trans_b ? B + j0 * ldb : B + j0;         // op(B) columns j0..
    float* c = C + i0 * ldc + j0;
    const float* bj = bias ? bias + j0 : nullptr;
    if (pr.ok) panel_onednn(pr, a, b, c, bj);
    else panel_widened(trans_a, trans_b, m, n, K, a, la, b, ldb, beta, c, ldc, bj);
  };
  const int64_t n_panels = n_row * n_col;
  if (n_panels == 1) return run_panel(0);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_panels; ++t) run_panel(t);
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  gemm_bf16_paneled(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  gemm_bf16_paneled(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  // op(A) rounded whole: A is (M, K) at lda, or (K, M) at lda when transposed.
  const int64_t rows = trans_a ? K : M, cols = trans_a ? M : K;
  std::vector<uint16_t> a(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)));
  convert_rows_to_bf16_scalar(A, lda, rows, cols, a.data());
  gemm_bf16_scalar(trans_a, trans_b, M, N, K, a.data(), cols, B, ldb, beta, C, ldc, bias);
}

}  // namespace tfm::kernels
