// src/kernels/gemm_packed.cc — gemm_packed: oneDNN's matmul primitive on weights reordered once
// into its blocked layout (f32, bf16 for AVX512-BF16/AMX, or s8 for VNNI/AMX-INT8), run on fixed row
// panels, one single-threaded primitive per panel, inside our own OpenMP loop; on CPUs with AVX2 but not
// AVX-512, f32 and bf16 weights in pack_rows16's layout for gemm_packed_avx2.cc instead (gemm_avx2 below).
// Contract in gemm_packed.h.
//
// oneDNN specifics relied on (2.6):
//   * weights: dst (m, N) = src (m, K) · wei (K, N). Our W (N, K) row-major is wei with strides
//     {1, ldw}. The blocked layout chosen for `any` weights is the same for every panel height m
//     (checked for 1 … 1024); if a primitive for another m rejects it, the weight is unpacked once
//     (reorder back) and that call takes the fallback.
//   * threads: a primitive created and executed while omp_get_max_threads() == 1 (SerialOmpScope)
//     or inside a parallel region runs on the calling thread only.
//   * int8: src u8 (m, K), weights s8, dst s32 (m, N) with no attributes: plain int32 sums, which
//     we dequantize ourselves (kernels::dequantize_rows). With a u8 source oneDNN adds no
//     compensation to the packed weights (it would for s8 × s8).
//   * scratchpad: user-managed (thread-local buffers), so two threads may execute one primitive
//     at once.
#include "kernels/gemm_packed.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/gemm_backend.h"
#include "kernels/onednn_primitives.h"
#include "kernels/kernels.h"
#include "kernels/signal_stack.h"

namespace tfm::kernels {

uint16_t float_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even (carries into the exponent)
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

void convert_rows_to_bf16_scalar(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst) {
  for (int64_t i = 0; i < m; ++i) {
    const float* s = src + i * lds;
    uint16_t* d = dst + i * K;
    for (int64_t k = 0; k < K; ++k) d[k] = float_to_bf16(s[k]);
  }
}

void convert_rows_to_bf16(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst) {
  if (cpu_has_avx512())
    convert_rows_to_bf16_avx512(src, lds, m, K, dst);
  else
    convert_rows_to_bf16_scalar(src, lds, m, K, dst);
}

namespace {

// acc (m, N) = qa (m, K) · qwᵀ (qw (N, K)), exact int32 sums: the int8 product's portable loop (no
// VNNI, TFM_FORCE_SCALAR, or a shape oneDNN rejects) and the twin's.
void int8_dot_rows(int64_t m, int64_t N, int64_t K, const uint8_t* qa, const int8_t* qw, int32_t* acc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t n = 0; n < N; ++n) {
      int32_t sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += int32_t(qa[i * K + k]) * int32_t(qw[n * K + k]);
      acc[i * N + n] = sum;
    }
}

std::vector<int32_t> column_sums(const std::vector<int8_t>& q, int64_t N, int64_t K) {  // Σ_k q[n, k]
  std::vector<int32_t> cs(static_cast<size_t>(N), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) cs[n] += q[n * K + k];
  return cs;
}

}  // namespace

void gemm_packed_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                        const float* W, int64_t ldw, const float* bias, float* C, int64_t ldc,
                        MatmulPrecision precision) {
  if (M <= 0) return;
  if (precision == MatmulPrecision::MATMUL_INT8) {
    std::vector<int8_t> qw(static_cast<size_t>(N * K));
    std::vector<float> sw(static_cast<size_t>(N)), sx(static_cast<size_t>(M));
    std::vector<uint8_t> qa(static_cast<size_t>(M * K));
    std::vector<int32_t> zx(static_cast<size_t>(M)), acc(static_cast<size_t>(M * N));
    quantize_rows_s8(W, N, K, ldw, qw.data(), sw.data());
    quantize_rows_u8_scalar(A, M, K, lda, qa.data(), sx.data(), zx.data());
    int8_dot_rows(M, N, K, qa.data(), qw.data(), acc.data());
    const std::vector<int32_t> cs = column_sums(qw, N, K);
    dequantize_rows_scalar(acc.data(), N, M, N, sx.data(), zx.data(), sw.data(), cs.data(), bias, C, ldc);
    return;
  }
  std::vector<float> a, w;  // rounded copies (bf16 only)
  const float* ap = A;
  const float* wp = W;
  int64_t la = lda, lw = ldw;
  if (precision == MatmulPrecision::MATMUL_BF16) {
    auto round = [K](const float* src, int64_t ld, int64_t rows, std::vector<float>& out) {
      out.resize(static_cast<size_t>(rows * K));
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < K; ++k) out[i * K + k] = bf16_to_float(float_to_bf16(src[i * ld + k]));
    };
    round(A, lda, M, a);
    round(W, ldw, N, w);
    ap = a.data();
    wp = w.data();
    la = lw = K;
  }
  gemm_scalar(false, true, M, N, K, 1.0f, ap, la, wp, lw, 0.0f, C, ldc);
  if (bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += bias[j];
}

void gemm_rows_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* W,
                      int64_t ldw, const float* bias, float* C, int64_t ldc, MatmulPrecision precision) {
  const bool bf16 = precision == MatmulPrecision::MATMUL_BF16;
  auto rounded = [bf16](float x) { return bf16 ? bf16_to_float(float_to_bf16(x)) : x; };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(rounded(A[i * lda + k]), rounded(W[n * ldw + k]), acc);
      C[i * ldc + n] = bias ? acc + bias[n] : acc;
    }
}

namespace {

using dnnl::memory;
using gemm_detail::SerialOmpScope;
using onednn::cpu_engine;
using onednn::thread_buffer;
using onednn::thread_stream;
using Dt = memory::data_type;

using gemm_detail::ceil_div;

// The weights' and the source's oneDNN types.
Dt data_type(MatmulPrecision p) {
  return p == MatmulPrecision::MATMUL_BF16 ? Dt::bf16 : p == MatmulPrecision::MATMUL_INT8 ? Dt::s8 : Dt::f32;
}
Dt src_type(MatmulPrecision p) { return p == MatmulPrecision::MATMUL_INT8 ? Dt::u8 : data_type(p); }
Dt dst_type(MatmulPrecision p) { return p == MatmulPrecision::MATMUL_INT8 ? Dt::s32 : Dt::f32; }

// Panel height used to ask oneDNN for its preferred weight layout.
constexpr int64_t kReferenceRows = 128;

}  // namespace

class PackedWeight {
 public:
  int64_t N = 0, K = 0;
  MatmulPrecision precision = MatmulPrecision::MATMUL_F32;

  // int8 only: the weight's per-row scales and Σ_k q[n, k] (N each).
  std::vector<float> scale;
  std::vector<int32_t> colsum;

  // The blocked copy (valid when packed) and its descriptor.
  bool packed = false;
  memory::desc wmd;
  memory wmem;

  // Column slabs (products of a few rows: gemm_slabs). When the layout stores whole blocks of
  // n_block output columns one after another (oneDNN's BA16a64b-style tags: the N blocks outermost),
  // the columns [c0, c1) of a slab with c0 a multiple of n_block are one contiguous stretch of wmem,
  // itself a weight of that layout: n_block > 0 then, else 0 (no slabs). slab_bounds: the slabs'
  // first columns and N, a function of (N, K, precision) only.
  int64_t n_block = 0;
  std::vector<int64_t> slab_bounds;

  // The weight desc of columns [c0, c0 + cols) (c0 a multiple of n_block; cols = N: wmd itself),
  // and where its data starts in wmem.
  memory::desc columns_desc(int64_t cols) const {
    if (cols == N) return wmd;
    dnnl_memory_desc_t d = wmd.data;
    d.dims[1] = cols;
    d.padded_dims[1] = ceil_div(cols, n_block) * n_block;
    return memory::desc(d);
  }
  void* columns_data(int64_t c0) const {
    const int64_t offset = c0 / n_block * wmd.data.format_desc.blocking.strides[1];  // elements
    return static_cast<char*>(wmem.get_data_handle()) + offset * int64_t(memory::data_type_size(data_type(precision)));
  }

  // One primitive per (panel rows, lda, ldc, bias?, output columns). A weight sees a few keys per
  // product shape (a panel plan's full panels and its tail: gemm_packed_panel_rows), but a service
  // whose batches differ in size meets a new row count at nearly every call, and each primitive holds
  // its JIT code (~60 KB): so a weight keeps the kMaxPrims it used last, dropping the least recently
  // used beyond. A dropped key is made again when it comes back, from oneDNN's own primitive cache
  // while that still holds it (ONEDNN_PRIMITIVE_CACHE_CAPACITY: 1024 by default, shared by every
  // weight): the memory all this code takes is bounded by the two caps.
  struct Prim {
    dnnl::matmul prim;
    memory::desc src, wei, dst, bias, scratch;
    std::string impl;  // oneDNN's implementation name
    bool ok = false;
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, int64_t>;
  static constexpr size_t kMaxPrims = 32;

  // The prim for a key, created on first use (under the weight's lock; oneDNN's own threading off). The
  // caller's shared_ptr keeps it alive while it runs, whatever later calls drop from the map.
  std::shared_ptr<const Prim> prim(int64_t m, int64_t lda, int64_t ldc, bool has_bias, int64_t cols) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = prims_.try_emplace(Key{m, lda, ldc, has_bias, cols});
    it->second.used = ++uses_;
    if (!fresh) return it->second.prim;
    auto p = std::make_shared<Prim>();
    try {
      SerialOmpScope serial;  // blocking chosen for one thread
      p->src = memory::desc({m, K}, src_type(precision), {lda, 1});
      p->wei = columns_desc(cols);
      p->dst = memory::desc({m, cols}, dst_type(precision), {ldc, 1});
      if (has_bias) p->bias = memory::desc({1, cols}, Dt::f32, memory::format_tag::ab);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const auto d =
          has_bias ? dnnl::matmul::desc(p->src, p->wei, p->bias, p->dst) : dnnl::matmul::desc(p->src, p->wei, p->dst);
      const dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
      p->scratch = pd.scratchpad_desc();
      p->impl = pd.impl_info_str();
      p->prim = dnnl::matmul(pd);
      p->ok = true;
    } catch (const dnnl::error&) {
      p->ok = false;
    }
    it->second.prim = p;
    if (prims_.size() > kMaxPrims)
      prims_.erase(std::min_element(prims_.begin(), prims_.end(),
                                    [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
    return p;
  }
  size_t cached_prims() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prims_.size();
  }

  // At pack time, from the layout alone: whether slabs are on (n_block), and their bounds. Whether a
  // slab runs the whole weight's implementation is checked at the call (gemm_slabs), per call shape.
  void plan_slabs() {
    const dnnl_memory_desc_t& d = wmd.data;
    if (d.format_kind != dnnl_blocked || d.ndims != 2 || d.extra.flags != 0 || d.offset0 != 0) return;
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    int64_t nb = 1, kb = 1;
    for (int i = 0; i < b.inner_nblks; ++i) (b.inner_idxs[i] == 1 ? nb : kb) *= b.inner_blks[i];
    // N blocks outermost, each holding all of K: [K blocks][inner block], dense.
    if (nb <= 1 || b.strides[0] != kb * nb || b.strides[1] != d.padded_dims[0] * nb) return;
    const int64_t blocks = ceil_div(N, nb);
    const int64_t bytes = N * K * int64_t(memory::data_type_size(data_type(precision)));
    int64_t slabs = std::min(blocks, 2 * ceil_div(bytes, 2 * kSlabBytes));
    slabs -= slabs & 1;  // even: two threads share them evenly (3 blocks: slabs of 1 and 2)
    if (slabs < 2 || bytes < kSlabMinBytes) return;
    n_block = nb;
    for (int64_t i = 0; i <= slabs; ++i) slab_bounds.push_back(std::min(N, i * blocks / slabs * nb));
  }

  // The row kernel (gemm_rows): on when the layout is one gemm_rows_avx512 reads and the CPU has AVX-512;
  // `rows` then describes wmem's layout. Decided at pack time from the layout alone.
  bool row_kernel = false;
  PackedRows rows{};
  mutable std::atomic<int64_t> row_runs{0};  // products the row kernel ran, for the tests

  void plan_rows() {
    const dnnl_memory_desc_t& d = wmd.data;
    const bool int8 = precision == MatmulPrecision::MATMUL_INT8;
    if (!cpu_has_avx512() || (int8 && !cpu_has_int8_dot())) return;
    if (d.format_kind != dnnl_blocked || d.ndims != 2 || d.extra.flags != 0 || d.offset0 != 0) return;
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    const int64_t group = precision == MatmulPrecision::MATMUL_BF16 ? 2 : int8 ? 4 : 1;
    // Inner blocks [kb a][nb b] (f32) or [kb a][nb b][group a] (bf16, int8): "BA16a64b", "BA16a64b2a",
    // "BA16a64b4a".
    const int want = group == 1 ? 2 : 3;
    if (b.inner_nblks != want || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1) return;
    if (group > 1 && (b.inner_idxs[2] != 0 || b.inner_blks[2] != group)) return;
    const int64_t kb = b.inner_blks[0] * group, nb = b.inner_blks[1];
    if (nb % 16 != 0 || nb > 64) return;
    // N blocks outermost, each all of (padded) K, dense: the same check as plan_slabs.
    if (b.strides[0] != kb * nb || b.strides[1] != d.padded_dims[0] * nb || d.padded_dims[0] % kb != 0) return;
    rows = PackedRows{wmem.get_data_handle(), N, K, nb, group, b.strides[1]};
    row_kernel = true;
  }

  // A slab holds about kSlabBytes of the weight (an even count of slabs, so two threads share them
  // evenly); weights under kSlabMinBytes are read by one thread (a fork/join would cost more than it saves).
  static constexpr int64_t kSlabBytes = int64_t(1) << 20, kSlabMinBytes = int64_t(1) << 19;
  // Products that took the slabs, for the tests (gemm_packed_slab_runs).
  mutable std::atomic<int64_t> slab_runs{0};

  // The AVX2 products' own layout (pack_rows16 into rows16, pack_rows16_s8 into rows8; `rows` describes it):
  // decided at pack time (packs_for_avx2). oneDNN is not used then (packed stays false), and gemm_packed
  // always takes gemm_avx2 (no plain copy is ever needed).
  bool avx2 = false;
  std::vector<float> rows16;
  std::vector<int8_t> rows8;

  // Plain (N, K) float copy of the weight (already rounded for bf16), made on first need: always
  // for the scalar path, and for the fallback when oneDNN rejects a shape.
  const std::vector<float>& plain() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (plain_.empty() && packed) unpack();
    return plain_;
  }
  std::vector<float>& plain_storage() { return plain_; }
  // int8: the plain (N, K) quantized rows, made on first need like plain().
  const std::vector<int8_t>& plain_q() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (plain_q_.empty() && packed) unpack();
    return plain_q_;
  }
  std::vector<int8_t>& plain_q_storage() { return plain_q_; }

 private:
  void unpack() const {  // reorder the blocked copy back to (N, K) rows, widen bf16 to float
    const Dt dt = data_type(precision);
    const memory::desc rows({K, N}, dt, {1, K});
    memory in = wmem, out(rows, cpu_engine());  // handles (shared), not copies
    dnnl::reorder(in, out).execute(thread_stream(), in, out);
    thread_stream().wait();
    if (dt == Dt::s8) {
      plain_q_.resize(static_cast<size_t>(N * K));
      std::memcpy(plain_q_.data(), out.get_data_handle(), plain_q_.size());
      return;
    }
    plain_.resize(static_cast<size_t>(N * K));
    if (dt == Dt::f32) {
      std::memcpy(plain_.data(), out.get_data_handle(), plain_.size() * sizeof(float));
    } else {
      const auto* h = static_cast<const uint16_t*>(out.get_data_handle());
      for (size_t i = 0; i < plain_.size(); ++i) plain_[i] = bf16_to_float(h[i]);
    }
  }

  mutable std::mutex mu_;
  struct Cached {
    std::shared_ptr<const Prim> prim;
    uint64_t used = 0;  // uses_ at its last use
  };
  mutable std::map<Key, Cached> prims_;
  mutable uint64_t uses_ = 0;
  mutable std::vector<float> plain_;
  mutable std::vector<int8_t> plain_q_;
};

namespace {

// Whether a weight of this precision goes to the AVX2 products' own layout: f32 and bf16 (pack_rows16) on a
// CPU with AVX2 but not AVX-512, int8 (pack_rows16_s8) on a CPU with AVX2 but no int8 dot product.
bool packs_for_avx2(MatmulPrecision precision) {
  if (precision == MatmulPrecision::MATMUL_INT8) return cpu_has_avx2() && !cpu_has_int8_dot();
  return cpu_has_avx2() && !cpu_has_avx512();
}

// The rest of pack_weight once the weight is rounded as the precision says: W (f32, at stride ldw), w16
// (bf16 bits, dense) or w8 (int8, dense, with pw's scale and colsum set) into oneDNN's layout, or the
// plain fallback.
std::shared_ptr<const PackedWeight> pack_rounded(std::shared_ptr<PackedWeight> pw, const float* W, int64_t ldw,
                                                 std::vector<uint16_t>& w16, std::vector<int8_t>& w8);

}  // namespace

std::shared_ptr<const PackedWeight> pack_weight(const float* W, int64_t N, int64_t K, int64_t ldw,
                                                MatmulPrecision precision) {
  auto pw = std::make_shared<PackedWeight>();
  pw->N = N;
  pw->K = K;
  pw->precision = precision;
  // The weight rounded as the precision says, as plain (N, K) rows: bf16 bits, or float (the AVX2 layout
  // rounds as it packs).
  std::vector<uint16_t> w16;
  std::vector<int8_t> w8;
  if (precision == MatmulPrecision::MATMUL_BF16 && !packs_for_avx2(precision)) {
    w16.resize(static_cast<size_t>(N * K));
    convert_rows_to_bf16(W, ldw, N, K, w16.data());
  }
  if (precision == MatmulPrecision::MATMUL_INT8) {
    w8.resize(static_cast<size_t>(N * K));
    pw->scale.resize(static_cast<size_t>(N));
    quantize_rows_s8(W, N, K, ldw, w8.data(), pw->scale.data());
    pw->colsum = column_sums(w8, N, K);
  }
  return pack_rounded(std::move(pw), W, ldw, w16, w8);
}

std::shared_ptr<const PackedWeight> pack_weight_int8(const int8_t* q, int64_t ldq, const float* scale, int64_t N,
                                                     int64_t K) {
  auto pw = std::make_shared<PackedWeight>();
  pw->N = N;
  pw->K = K;
  pw->precision = MatmulPrecision::MATMUL_INT8;
  std::vector<uint16_t> w16;
  std::vector<int8_t> w8(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) std::copy(q + n * ldq, q + n * ldq + K, w8.begin() + n * K);
  pw->scale.assign(scale, scale + N);
  pw->colsum = column_sums(w8, N, K);
  return pack_rounded(std::move(pw), nullptr, 0, w16, w8);
}

namespace {

std::shared_ptr<const PackedWeight> pack_rounded(std::shared_ptr<PackedWeight> pw, const float* W, int64_t ldw,
                                                 std::vector<uint16_t>& w16, std::vector<int8_t>& w8) {
  const int64_t N = pw->N, K = pw->K;
  const MatmulPrecision precision = pw->precision;
  const bool int8 = precision == MatmulPrecision::MATMUL_INT8;
  if (packs_for_avx2(precision) && int8) {
    const int64_t K2 = K + (K & 1);
    pw->rows8.resize(static_cast<size_t>(ceil_div(N, 16) * 16 * K2));
    pack_rows16_s8(w8.data(), N, K, K, pw->rows8.data());
    pw->rows = PackedRows{pw->rows8.data(), N, K, 16, 2, 16 * K2};
    pw->avx2 = true;
    return pw;
  }
  if (packs_for_avx2(precision)) {
    pw->rows16.resize(static_cast<size_t>(ceil_div(N, 16) * 16 * K));
    pack_rows16(W, N, K, ldw, precision == MatmulPrecision::MATMUL_BF16, pw->rows16.data());
    pw->rows = PackedRows{pw->rows16.data(), N, K, 16, 1, 16 * K};
    pw->avx2 = true;
    return pw;
  }
  // K = 0 (an empty sum; oneDNN 2.6 divides by zero creating the primitive) or N = 0: the plain copy, empty.
  if (!force_scalar() && (!int8 || cpu_has_int8_dot()) && K > 0 && N > 0) {
    try {
      const Dt dt = data_type(precision);
      const dnnl::matmul::primitive_desc ref(
          dnnl::matmul::desc(memory::desc({kReferenceRows, K}, src_type(precision), memory::format_tag::ab),
                             memory::desc({K, N}, dt, memory::format_tag::any),
                             memory::desc({kReferenceRows, N}, dst_type(precision), memory::format_tag::ab)),
          cpu_engine());
      pw->wmd = ref.weights_desc();
      pw->wmem = memory(pw->wmd, cpu_engine());
      // Source: W as wei (K, N) at strides {1, ldw}; the bf16 copy is dense (ldw = K). Rounding
      // is ours (convert_rows_to_bf16) so the scalar twin sees the same bf16 values; the reorder
      // only moves them.
      void* src = dt == Dt::bf16 ? static_cast<void*>(w16.data())
                  : int8         ? static_cast<void*>(w8.data())
                                 : static_cast<void*>(const_cast<float*>(W));
      memory user(memory::desc({K, N}, dt, {1, dt == Dt::f32 ? ldw : K}), cpu_engine(), src);
      dnnl::reorder(user, pw->wmem).execute(thread_stream(), user, pw->wmem);
      thread_stream().wait();
      pw->packed = true;
      pw->plan_slabs();
      pw->plan_rows();
      return pw;
    } catch (const dnnl::error&) {
      pw->packed = false;  // no oneDNN support: plain copy below
    }
  }
  if (int8) {
    pw->plain_q_storage() = std::move(w8);
    return pw;
  }
  std::vector<float>& plain = pw->plain_storage();
  plain.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      plain[n * K + k] = precision == MatmulPrecision::MATMUL_BF16 ? bf16_to_float(w16[n * K + k])
                                                                   : W[n * ldw + k];
  return pw;
}

}  // namespace

bool packed_by_onednn(const PackedWeight& W) { return W.packed; }

bool packed_for_avx2(const PackedWeight& W) { return W.avx2; }

void pack_rows16(const float* W, int64_t N, int64_t K, int64_t ldw, bool round_bf16, float* out) {
  const int64_t blocks = ceil_div(N, 16);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t n = b * 16 + j;
        const float x = n < N ? W[n * ldw + k] : 0.0f;
        out[(b * K + k) * 16 + j] = round_bf16 ? bf16_to_float(float_to_bf16(x)) : x;
      }
}

void pack_rows16_s8(const int8_t* q, int64_t N, int64_t K, int64_t ldq, int8_t* out) {
  const int64_t blocks = ceil_div(N, 16), K2 = K + (K & 1);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t k = 0; k < K2; ++k)
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t n = b * 16 + j;
        out[b * 16 * K2 + (k / 2) * 32 + j * 2 + k % 2] = n < N && k < K ? q[n * ldq + k] : int8_t{0};
      }
}

int64_t packed_column_slabs(const PackedWeight& W) {
  return W.slab_bounds.empty() ? 0 : static_cast<int64_t>(W.slab_bounds.size()) - 1;
}

int64_t gemm_packed_slab_runs(const PackedWeight& W) { return W.slab_runs.load(std::memory_order_relaxed); }

int64_t gemm_packed_row_kernel_runs(const PackedWeight& W) { return W.row_runs.load(std::memory_order_relaxed); }

bool packed_for_row_kernel(const PackedWeight& W) { return W.row_kernel; }

size_t gemm_packed_cached_primitives(const PackedWeight& W) { return W.cached_prims(); }

int64_t gemm_packed_panel_rows(int64_t M, int64_t N, int64_t K) {
  // At most 128 rows per panel, inside the range of panel heights at which one thread's packed
  // matmul keeps its best rate; taller panels lose it (bench/RESULTS.md, "Design measurements behind
  // the kernels"). Small products stay one serial call (gemm_backend.h: kSerialWork).
  constexpr int64_t kMaxRows = 128, kAlign = 16;
  if (M <= kAlign || M * N * K < gemm_detail::kSerialWork) return std::max<int64_t>(M, 1);
  int64_t n = std::max<int64_t>(2, ceil_div(M, kMaxRows));
  n += n & 1;  // even: two threads share evenly
  return std::min(M, ceil_div(ceil_div(M, n), kAlign) * kAlign);
}

namespace {

// Fallback for one panel: plain float weights (rounded for bf16), A rounded per row into scratch.
void panel_fallback(int64_t m, const float* a, int64_t lda, const PackedWeight& W,
                    const std::vector<float>& plain, const float* bias, float* c, int64_t ldc) {
  const int64_t N = W.N, K = W.K;
  if (W.precision == MatmulPrecision::MATMUL_BF16) {
    thread_local std::vector<float> rounded;
    float* r = thread_buffer(rounded, static_cast<size_t>(m * K));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t k = 0; k < K; ++k) r[i * K + k] = bf16_to_float(float_to_bf16(a[i * lda + k]));
    a = r;
    lda = K;
  }
  gemm_detail::SerialOmpScope serial;
  gemm_bias(false, true, m, N, K, a, lda, plain.data(), K, bias, c, ldc);
}

// Runs prim p on the calling thread alone: src, weights (wei: the whole packed weight, or a slab of it) and
// dst as p's descs say, the bias when p has one (nullptr: none), the scratchpad a thread buffer.
void execute(const PackedWeight::Prim& p, const void* src, const memory& wei, void* dst, const float* bias) {
  const dnnl::engine& eng = cpu_engine();
  thread_local std::vector<uint8_t> scratch;
  const size_t ns = p.scratch.get_size();
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(p.src, eng, const_cast<void*>(src))},
      {DNNL_ARG_WEIGHTS, wei},
      {DNNL_ARG_DST, memory(p.dst, eng, dst)},
      {DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, ns ? thread_buffer(scratch, ns) : nullptr)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, eng, const_cast<float*>(bias)));
  gemm_detail::SerialOmpScope serial;
  ensure_signal_stacks();  // signal_stack.h
  p.prim.execute(thread_stream(), args);
  thread_stream().wait();
}

// The rows of A (m, K at stride lda) quantized by quantize_rows_u8 into the calling thread's buffers: row i
// at q + i·ld (ld ≥ K, the bytes from K to ld zero), its scale and zero point at scale[i], zero[i]. Valid
// until the thread's next call.
struct QuantizedRows {
  const uint8_t* q;
  const float* scale;
  const int32_t* zero;
};
QuantizedRows quantize_into_thread_buffers(const float* a, int64_t m, int64_t K, int64_t lda, int64_t ld) {
  thread_local std::vector<uint8_t> q_buf;
  thread_local std::vector<float> scale_buf;
  thread_local std::vector<int32_t> zero_buf;
  uint8_t* q = thread_buffer(q_buf, static_cast<size_t>(m * ld));
  float* scale = thread_buffer(scale_buf, static_cast<size_t>(m));
  int32_t* zero = thread_buffer(zero_buf, static_cast<size_t>(m));
  if (ld == K) {
    quantize_rows_u8(a, m, K, lda, q, scale, zero);
  } else {
    for (int64_t i = 0; i < m; ++i) {
      quantize_rows_u8(a + i * lda, 1, K, lda, q + i * ld, scale + i, zero + i);
      std::fill(q + i * ld + K, q + (i + 1) * ld, uint8_t{0});
    }
  }
  return {q, scale, zero};
}

// One int8 panel: quantize the rows of A, int32 sums (oneDNN when `p`, else the portable loop),
// dequantize into C with the bias.
void panel_int8(const PackedWeight::Prim* p, int64_t m, const float* a, int64_t lda, const PackedWeight& W,
                const float* bias, float* c, int64_t ldc) {
  const int64_t N = W.N, K = W.K;
  const QuantizedRows x = quantize_into_thread_buffers(a, m, K, lda, K);
  thread_local std::vector<int32_t> acc_buf;
  int32_t* acc = thread_buffer(acc_buf, static_cast<size_t>(m * N));
  if (p) {
    execute(*p, x.q, W.wmem, acc, nullptr);
  } else {
    int8_dot_rows(m, N, K, x.q, W.plain_q().data(), acc);
  }
  dequantize_rows(acc, N, m, N, x.scale, x.zero, W.scale.data(), W.colsum.data(), bias, c, ldc);
}

void panel_onednn(const PackedWeight::Prim& p, int64_t m, const float* a, int64_t lda,
                  const PackedWeight& W, const float* bias, float* c) {
  const void* src = a;
  if (W.precision == MatmulPrecision::MATMUL_BF16) {
    thread_local std::vector<uint16_t> a16;
    uint16_t* d = thread_buffer(a16, static_cast<size_t>(m * W.K));
    convert_rows_to_bf16(a, lda, m, W.K, d);
    src = d;
  }
  execute(p, src, W.wmem, c, bias);
}

// fn(t) for every t in [0, n), split statically over the OpenMP team. An exception thrown inside would end the
// process if it left a thread: the first one is kept and rethrown after the team.
template <class F>
void parallel_for_rethrowing(int64_t n, const F& fn) {
  std::exception_ptr failed;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    try {
      fn(t);
    } catch (...) {
#pragma omp critical(tfm_gemm_packed_failed)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

// The most rows a product takes column slabs for: a single row panel (gemm_packed_panel_rows).
constexpr int64_t kSlabRows = 16;

// C (m, N) = A · Wᵀ (+ bias) for a few rows (m ≤ kSlabRows) and a weight with slabs: each slab of
// columns one single-threaded call into a dense (m, cols) buffer, copied into C (a slab's output
// written at stride ldc would take oneDNN's reference matmul); the source rounded (bf16) or
// quantized (int8) once for all slabs. Every output column is the same sum, in the same order, as
// the whole weight's product computes it: the slabs are the whole layout's own blocks. Returns
// false, having written nothing, when a slab's primitive for these rows is not the whole weight's
// implementation.
bool gemm_slabs(int64_t m, const float* a, int64_t lda, const PackedWeight& W, const float* bias, float* c,
                int64_t ldc) {
  const int64_t N = W.N, K = W.K;
  const bool int8 = W.precision == MatmulPrecision::MATMUL_INT8;
  const int64_t src_ld = W.precision == MatmulPrecision::MATMUL_F32 ? lda : K;
  const bool prim_bias = bias && !int8;  // int8 adds the bias when it dequantizes
  const std::vector<int64_t>& bounds = W.slab_bounds;
  const int64_t slabs = static_cast<int64_t>(bounds.size()) - 1;
  const std::shared_ptr<const PackedWeight::Prim> whole = W.prim(m, src_ld, int8 ? N : ldc, prim_bias, N);
  std::vector<std::shared_ptr<const PackedWeight::Prim>> prims(static_cast<size_t>(slabs));
  for (int64_t s = 0; s < slabs; ++s) {
    const int64_t cols = bounds[s + 1] - bounds[s];
    prims[s] = W.prim(m, src_ld, cols, prim_bias, cols);
    if (!prims[s]->ok || !whole->ok || prims[s]->impl != whole->impl) return false;
  }
  // The source as the primitive takes it, made once by the calling thread.
  const void* src = a;
  thread_local std::vector<uint16_t> a16;
  QuantizedRows x{};
  if (W.precision == MatmulPrecision::MATMUL_BF16) {
    uint16_t* d = thread_buffer(a16, static_cast<size_t>(m * K));
    convert_rows_to_bf16(a, lda, m, K, d);
    src = d;
  } else if (int8) {
    x = quantize_into_thread_buffers(a, m, K, lda, K);
    src = x.q;
  }
  auto run = [&](int64_t s) {
    const int64_t c0 = bounds[s], cols = bounds[s + 1] - c0;
    const PackedWeight::Prim& p = *prims[s];
    thread_local std::vector<float> out_f;
    thread_local std::vector<int32_t> out_i;
    void* out = int8 ? static_cast<void*>(thread_buffer(out_i, static_cast<size_t>(m * cols)))
                     : static_cast<void*>(thread_buffer(out_f, static_cast<size_t>(m * cols)));
    execute(p, src, memory(p.wei, cpu_engine(), W.columns_data(c0)), out, prim_bias ? bias + c0 : nullptr);
    if (int8) {
      dequantize_rows(static_cast<const int32_t*>(out), cols, m, cols, x.scale, x.zero, W.scale.data() + c0,
                      W.colsum.data() + c0, bias ? bias + c0 : nullptr, c + c0, ldc);
      return;
    }
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(c + i * ldc + c0, static_cast<const float*>(out) + i * cols, static_cast<size_t>(cols) * sizeof(float));
  };
  parallel_for_rethrowing(slabs, run);
  W.slab_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Runs fn(b0, b1) over the blocks [0, blocks): on the calling thread when `serial`, else in runs of
// about an eighth of a thread's share, taken by whichever thread is free (the products read the weight
// from memory, and two cores sharing its bandwidth do not finish equal shares at the same time).
template <class F>
void over_blocks(bool serial, int64_t blocks, const F& fn) {
  if (serial) return fn(int64_t{0}, blocks);
#pragma omp parallel
  {
    const int64_t T = omp_get_num_threads();
    const int64_t run = std::max<int64_t>(1, blocks / (8 * T)), runs = ceil_div(blocks, run);
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < runs; ++r) fn(r * run, std::min(blocks, (r + 1) * run));
  }
}

// C (m, N) = A · Wᵀ (+ bias) for m ≤ kRowKernelRows rows in the row kernel (gemm_packed.h): bf16 rounds
// the rows once, int8 quantizes them once; the blocks of columns go to the threads in runs (over_blocks) when
// the weight is large enough to pay for the team (kSlabMinBytes), else to the calling thread. Each output
// is one fma chain (f32, bf16) or one exact int32 sum (int8), so the split changes no bit.
void gemm_rows(int64_t m, const float* a, int64_t lda, const PackedWeight& W, const float* bias, float* c,
               int64_t ldc) {
  const int64_t N = W.N, K = W.K;
  const PackedRows& w = W.rows;
  const int64_t blocks = ceil_div(N, w.n_block);
  const int64_t bytes = N * K * int64_t(memory::data_type_size(data_type(W.precision)));
  const bool serial = bytes < PackedWeight::kSlabMinBytes || omp_get_max_threads() == 1 || omp_in_parallel();
  if (W.precision == MatmulPrecision::MATMUL_INT8) {
    // The rows quantized once (each zero-padded to a multiple of 4 bytes, the kernel's step), the int32
    // sums of a thread's blocks dequantized by that thread.
    const int64_t K4 = ceil_div(K, 4) * 4;
    const QuantizedRows x = quantize_into_thread_buffers(a, m, K, lda, K4);
    thread_local std::vector<int32_t> acc_buf;
    int32_t* acc = thread_buffer(acc_buf, static_cast<size_t>(m * N));
    over_blocks(serial, blocks, [&](int64_t b0, int64_t b1) {
      gemm_rows_s8_avx512vnni(w, m, x.q, K4, acc, N, b0, b1);
      const int64_t n0 = b0 * w.n_block, n1 = std::min(N, b1 * w.n_block);
      if (n1 > n0)
        dequantize_rows(acc + n0, N, m, n1 - n0, x.scale, x.zero, W.scale.data() + n0, W.colsum.data() + n0,
                        bias ? bias + n0 : nullptr, c + n0, ldc);
    });
  } else {
    if (W.precision == MatmulPrecision::MATMUL_BF16) {  // the rows rounded, widened back to float (exact)
      thread_local std::vector<uint16_t> a16;
      thread_local std::vector<float> widened;
      uint16_t* h = thread_buffer(a16, static_cast<size_t>(m * K));
      float* f = thread_buffer(widened, static_cast<size_t>(m * K));
      convert_rows_to_bf16(a, lda, m, K, h);
      for (int64_t i = 0; i < m * K; ++i) f[i] = std::bit_cast<float>(uint32_t{h[i]} << 16);
      a = f;
      lda = K;
    }
    over_blocks(serial, blocks,
                [&](int64_t b0, int64_t b1) { gemm_rows_avx512(w, m, a, lda, bias, c, ldc, b0, b1); });
  }
  W.row_runs.fetch_add(1, std::memory_order_relaxed);
}

// The split every product on the AVX2 layouts takes. A few rows (≤ kSlabRows) are prepared once and read the
// weight once, its blocks of columns over the threads in runs (over_blocks) when the weight (weight_bytes) is
// large enough to pay for the team; more rows take fixed row panels (gemm_packed_panel_rows), each prepared and
// run by one thread over every block. prepare(a, m) readies rows [0, m) of a (at stride lda) in the calling
// thread's buffers; run(p, m, b0, b1, c) writes the columns of blocks [b0, b1) of those m rows into c (at
// stride ldc). Each output is one fma chain or one exact int32 sum, so no split changes a bit.
template <class Prepare, class Run>
void split_avx2(int64_t M, const float* A, int64_t lda, const PackedWeight& W, int64_t weight_bytes, float* C,
                int64_t ldc, const Prepare& prepare, const Run& run) {
  const int64_t blocks = ceil_div(W.N, 16);
  if (M <= kSlabRows) {
    const auto p = prepare(A, M);
    const bool serial = weight_bytes < PackedWeight::kSlabMinBytes || omp_get_max_threads() == 1 || omp_in_parallel();
    over_blocks(serial, blocks, [&](int64_t b0, int64_t b1) { run(p, M, b0, b1, C); });
    return;
  }
  const int64_t mt = gemm_packed_panel_rows(M, W.N, W.K), n_panels = ceil_div(M, mt);
  auto run_panel = [&](int64_t t) {
    const int64_t i0 = t * mt, m = std::min(mt, M - i0);
    run(prepare(A + i0 * lda, m), m, 0, blocks, C + i0 * ldc);
  };
  if (n_panels == 1) return run_panel(0);
  parallel_for_rethrowing(n_panels, run_panel);  // a buffer's allocation may throw
}

// C (M, N) = A · Wᵀ (+ bias) on the AVX2 layouts, split by split_avx2. f32 and bf16 (pack_rows16's layout,
// gemm_packed_avx2): bf16 rounds the rows first. int8 (pack_rows16_s8's layout): the rows quantized
// (quantize_rows_u8) and widened to int16, the exact int32 sums (gemm_packed_s8_avx2) dequantized with the bias
// by the thread that computed them — the portable loop's integer arithmetic and the same dequantize_rows.
void gemm_avx2(int64_t M, const float* A, int64_t lda, const PackedWeight& W, const float* bias, float* C,
               int64_t ldc) {
  const int64_t N = W.N, K = W.K;
  if (W.precision == MatmulPrecision::MATMUL_INT8) {
    const int64_t K2 = K + (K & 1);
    struct Rows {
      QuantizedRows x;
      int16_t* a;    // (m, K2)
      int32_t* acc;  // (m, N)
    };
    auto prepare = [&](const float* a, int64_t m) {
      thread_local std::vector<int16_t> wide;
      thread_local std::vector<int32_t> acc;
      Rows r{quantize_into_thread_buffers(a, m, K, lda, K), thread_buffer(wide, static_cast<size_t>(m * K2)),
             thread_buffer(acc, static_cast<size_t>(m * N))};
      widen_rows_u8_avx2(r.x.q, m, K, r.a);
      return r;
    };
    auto run = [&](const Rows& r, int64_t m, int64_t b0, int64_t b1, float* c) {
      gemm_packed_s8_avx2(W.rows, m, r.a, K2, r.acc, N, b0, b1);
      const int64_t n0 = b0 * 16, n1 = std::min(N, b1 * 16);
      if (n1 > n0)
        dequantize_rows(r.acc + n0, N, m, n1 - n0, r.x.scale, r.x.zero, W.scale.data() + n0, W.colsum.data() + n0,
                        bias ? bias + n0 : nullptr, c + n0, ldc);
    };
    return split_avx2(M, A, lda, W, N * K, C, ldc, prepare, run);
  }
  const bool bf16 = W.precision == MatmulPrecision::MATMUL_BF16;
  struct Rows {
    const float* a;
    int64_t ld;
  };
  auto prepare = [&](const float* a, int64_t m) {  // bf16: rounded into the calling thread's buffer
    if (!bf16) return Rows{a, lda};
    thread_local std::vector<float> rounded;
    float* r = thread_buffer(rounded, static_cast<size_t>(m * K));
    round_rows_to_bf16_avx2(a, lda, m, K, r);
    return Rows{r, K};
  };
  auto run = [&](const Rows& r, int64_t m, int64_t b0, int64_t b1, float* c) {
    gemm_packed_avx2(W.rows, m, r.a, r.ld, bias, c, ldc, b0, b1);
  };
  split_avx2(M, A, lda, W, N * K * int64_t(sizeof(float)), C, ldc, prepare, run);
}

}  // namespace

void gemm_packed(int64_t M, const float* A, int64_t lda, const PackedWeight& W, const float* bias,
                 float* C, int64_t ldc) {
  if (M <= 0) return;
  gemm_detail::keep_gemm_buffers_resident();
  if (W.K == 0) {  // an empty sum: 0 + bias, as the twins give it (the kernels' k loop never runs)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t n = 0; n < W.N; ++n) C[i * ldc + n] = 0.0f + (bias ? bias[n] : 0.0f);
    return;
  }
  if (W.avx2) return gemm_avx2(M, A, lda, W, bias, C, ldc);
  const int64_t N = W.N, K = W.K;
  if (!W.packed) {  // scalar twin requested, or oneDNN could not pack
    if (force_scalar() && W.precision != MatmulPrecision::MATMUL_INT8) {
      gemm_packed_scalar(M, N, K, A, lda, W.plain().data(), K, bias, C, ldc, W.precision);
      return;
    }
  }
  const int64_t mt = gemm_packed_panel_rows(M, N, K);
  const int64_t n_panels = ceil_div(M, mt), last = M - (n_panels - 1) * mt;
  if (M <= kRowKernelRows && W.row_kernel) return gemm_rows(M, A, lda, W, bias, C, ldc);
  if (n_panels == 1 && M <= kSlabRows && !W.slab_bounds.empty() && gemm_slabs(M, A, lda, W, bias, C, ldc)) return;
  // bf16 panels are converted into a dense buffer (lda = K) before the call.
  const bool int8 = W.precision == MatmulPrecision::MATMUL_INT8;
  if (int8) {  // panels of quantized rows (dense, lda = K) into dense int32 sums (ldc = N)
    std::shared_ptr<const PackedWeight::Prim> full, tail;
    if (W.packed) {
      full = W.prim(mt, K, N, false, N);
      tail = last == mt ? full : W.prim(last, K, N, false, N);
      if (!full->ok || !tail->ok) full = tail = nullptr;
    }
    if (!full) W.plain_q();  // made once, before the threads need it
    auto run_int8 = [&](int64_t t) {
      const int64_t i0 = t * mt, m = t == n_panels - 1 ? last : mt;
      panel_int8(m == mt ? full.get() : tail.get(), m, A + i0 * lda, lda, W, bias, C + i0 * ldc, ldc);
    };
    if (n_panels == 1) {
      run_int8(0);
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n_panels; ++t) run_int8(t);
    return;
  }
  const int64_t src_ld = W.precision == MatmulPrecision::MATMUL_BF16 ? K : lda;
  std::shared_ptr<const PackedWeight::Prim> full, tail;
  bool use_onednn = W.packed;
  if (use_onednn) {
    full = W.prim(mt, src_ld, ldc, bias != nullptr, N);
    tail = last == mt ? full : W.prim(last, src_ld, ldc, bias != nullptr, N);
    use_onednn = full->ok && tail->ok;
  }
  const std::vector<float>* plain = use_onednn ? nullptr : &W.plain();
  auto run_panel = [&](int64_t t) {
    const int64_t i0 = t * mt, m = t == n_panels - 1 ? last : mt;
    const float* a = A + i0 * lda;
    float* c = C + i0 * ldc;
    if (use_onednn)
      panel_onednn(m == mt ? *full : *tail, m, a, lda, W, bias, c);
    else
      panel_fallback(m, a, lda, W, *plain, bias, c, ldc);
  };
  if (n_panels == 1) {
    run_panel(0);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_panels; ++t) run_panel(t);
}

}  // namespace tfm::kernels
