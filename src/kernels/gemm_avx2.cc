// src/kernels/gemm_avx2.cc — one panel of kernels::gemm and gemm_bias on CPUs with AVX2 but without AVX-512: a
// blocked product of our own (gemm_backend.h says when it runs; gemm_scalar is its twin); and, on the same kernel,
// gemm_packed's float products against a weight packed once (gemm_avx2_rows16: B's strips are the weight's blocks,
// only A is packed per call; gemm_rows_scalar is that one's twin). Compiled with AVX2 and FMA flags by CMake.
//
//   C(m,n) = alpha · op(A)(m,K) · op(B)(K,n) + beta · C  (+ bias, broadcast over rows)   operands as in gemm_scalar.h
//
// GotoBLAS's loops, with both operands packed so the kernel reads them contiguously whatever their
// transposition:
//   for each chunk of kRowChunk rows:
//     for each pass of kKc consecutive k:
//       pack op(B)'s kc rows into strips of 16 columns (k-major: 16 floats per k, zeros past n; b_strip_stride)
//       (with more than one chunk, by the first chunk only: every pass of op(B) kept for the others)
//       for each block of kMc rows:
//         pack op(A)'s block into strips of 6 rows (k-major: 6 floats per k, zeros past m; a_strip_stride)
//         for each strip of B:             its kc·16 floats (16 KiB) stay in L1 while...
//           for each strip of A:           ...the block's strips (kMc·kc floats, 144 KiB) stream from L2
//             6 × 16 sums in 12 ymm accumulators: acc = the sums so far (or 0), acc += a[r, k]·b[k, :]
//             (the next tile's lines of C prefetched first: prefetch_tile16)
// A step of the kernel is 2 loads of B, 6 broadcasts of A and 12 FMAs: the two FMA pipes are the limit.
//
// The numbers, as gemm_scalar's formula: each output's sum acc is one k-ascending fma chain from 0; between
// passes it waits, in float (storing and reloading it changes no bit of the chain), in C itself when C's old
// values are not needed (beta = 0), else in a scratch panel; the last pass writes alpha·acc + beta·C (beta = 0
// never reads C: it may hold NaN; alpha = 1 and beta = 1 are no multiplications), + bias[j] when given, each
// operation rounded on its own: CMake compiles this file with -ffp-contract=off, so every lane of every tile
// rounds the epilogue alike (the products' FMAs are written as such). So a gemm_bias is, bit for bit, the
// product added to rows preset to the bias (kernels.h's definition of it), and the bits of an output depend on K
// and the inputs only: not on m, n, the panel or the thread count, so the panels of gemm_paneled give the same
// bits however they are cut or spread. The chain's fused multiply-adds make it differ from gemm_scalar's
// separate products and sums within the bound tests/kernels/gemm_test.cc derives for any summation order.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common_avx2.h"
#include "kernels/gemm_backend.h"
#include "kernels/kernels.h"

namespace tfm::kernels::gemm_detail {

namespace {

constexpr int kMr = 6, kNr = 16;   // the kernel's tile: 6 rows × 16 columns
constexpr int64_t kKc = 256;       // k per pass
constexpr int64_t kMc = 24 * kMr;  // rows per packed block of A (144)
// Rows per chunk of a call (gemm_avx2_serial): as many as gemm_paneled's tallest panel, whose sums between passes
// (512 rows × N) stay near the core; a longer call runs chunk after chunk.
constexpr int64_t kRowChunk = kMaxPanelRows;
// The largest op(B) (K·N floats, 4 MiB) a call packs whole for all its chunks: a language model's output layer
// (N = 50,257 at GPT-2's vocabulary) would otherwise hold hundreds of MB per thread for a few percent of its time.
constexpr int64_t kWholeB = int64_t(1) << 20;

// What the last pass does to a tile's sums before storing them to C: C = alpha·acc + beta·C (+ bias).
struct Epilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // the tile's first column's (its cols floats are read)
};

// Tile (R ≤ 6 rows, cols ≤ 16 columns): acc = (in ? in's tile : 0) + Σ_k a[k·6 + r]·b[k·16 + :], k = 0 … kc−1,
// each output one fma chain in k order, whatever R and cols; then out's tile ← acc, or with e, the epilogue of acc
// and out's tile (read only for beta ≠ 0). in and out may be the same tile. A tile at the panel's edge (R < 6
// rows, or cols < 16) computes only its rows, and reads and writes only its columns (load_n / store_n), so no
// element outside C (or the scratch) is touched; its columns' lanes past cols compute on B's zero padding.
template <int R>
void kernel(int64_t kc, const float* a, const float* b, const float* in, int64_t ldin, float* out, int64_t ldout,
            const Epilogue* e, int cols) {
  const int n0 = std::min(cols, 8), n1 = cols - 8;  // the columns in each half of the tile (n1 ≤ 0: none)
  __m256 c[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    c[r][0] = in ? load_n(in + r * ldin, n0) : _mm256_setzero_ps();
    c[r][1] = in && n1 > 0 ? load_n(in + r * ldin + 8, n1) : _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + kNr * k), b1 = _mm256_loadu_ps(b + kNr * k + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + kMr * k + r);
      c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
    }
  }
  if (e) {
    const __m256 alpha = _mm256_set1_ps(e->alpha), beta = _mm256_set1_ps(e->beta);
    const __m256 bias0 = e->bias ? load_n(e->bias, n0) : _mm256_setzero_ps();
    const __m256 bias1 = e->bias && n1 > 0 ? load_n(e->bias + 8, n1) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) {
        __m256 v = e->alpha == 1.0f ? c[r][h] : _mm256_mul_ps(alpha, c[r][h]);
        if (e->beta != 0.0f && (h == 0 || n1 > 0)) {
          const __m256 old = load_n(out + r * ldout + 8 * h, h == 0 ? n0 : n1);
          v = _mm256_add_ps(v, e->beta == 1.0f ? old : _mm256_mul_ps(beta, old));
        }
        if (e->bias) v = _mm256_add_ps(v, h == 0 ? bias0 : bias1);
        c[r][h] = v;
      }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    store_n(out + r * ldout, c[r][0], n0);
    if (n1 > 0) store_n(out + r * ldout + 8, c[r][1], n1);
  }
}

using KernelFn = void (*)(int64_t, const float*, const float*, const float*, int64_t, float*, int64_t, const Epilogue*,
                          int);
constexpr KernelFn kKernels[kMr + 1] = {nullptr, kernel<1>, kernel<2>, kernel<3>, kernel<4>, kernel<5>, kernel<6>};

// Floats from one packed strip of B to the next: its kc·16 floats and one cache line more, so that the strips'
// starts (16 KiB apart at kc = 256 without it) fall in different L1 sets when the packing writes to all of them
// in turn (a_strip_stride says what happens otherwise). A multiple of 16 floats: every k's 16 floats stay one line.
int64_t b_strip_stride(int64_t kc) { return kc * kNr + 16; }

// op(B)'s rows [0, kc) (already offset to the pass's first k) and columns [0, n) → strips of 16 columns,
// strip s at dst + s·b_strip_stride(kc), element (k, j) at [k·16 + j − 16s]; columns past n are 0.
void pack_b(bool trans_b, const float* B, int64_t ldb, int64_t kc, int64_t n, float* dst) {
  const int64_t stride = b_strip_stride(kc);
  if (!trans_b) {  // op(B)(k, j) = B[k·ldb + j]: row by row, each row read in one sweep into every strip
    const int64_t full = n / kNr * kNr;
    const int tail = static_cast<int>(n - full);
    const __m256i lo = first_n_lanes(tail), hi = first_n_lanes(tail - 8);
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + k * ldb;
      float* d = dst + k * kNr;
      for (int64_t j0 = 0; j0 < full; j0 += kNr, d += stride) {
        _mm256_storeu_ps(d, _mm256_loadu_ps(src + j0));
        _mm256_storeu_ps(d + 8, _mm256_loadu_ps(src + j0 + 8));
      }
      if (tail > 0) {
        _mm256_storeu_ps(d, _mm256_maskload_ps(src + full, lo));
        _mm256_storeu_ps(d + 8, tail > 8 ? _mm256_maskload_ps(src + full + 8, hi) : _mm256_setzero_ps());
      }
    }
    return;
  }
  // op(B)(k, j) = B[j·ldb + k]: strip by strip, B's rows j0 … j0+cols transposed
  for (int64_t j0 = 0; j0 < n; j0 += kNr, dst += stride) {
    const int cols = static_cast<int>(std::min<int64_t>(kNr, n - j0));
    transpose_avx2(B + j0 * ldb, ldb, cols, kc, dst, kNr);
    for (int64_t k = 0; k < kc && cols < kNr; ++k) std::fill(dst + k * kNr + cols, dst + (k + 1) * kNr, 0.0f);
  }
}

// Floats from one packed strip of A to the next: its kc·6 floats and one cache line more. Without the line, the
// strips of a block (6 KiB apart at kc = 256) start in only 2 of L1's 64 sets, and packing a transposed A, which
// writes to every strip in turn, kept evicting its own half-written lines.
int64_t a_strip_stride(int64_t kc) { return kc * kMr + 16; }

// d[0, 6) ← v's first 6 lanes, in two plain stores: AMD's vmaskmovps store is microcoded, and packing a
// transposed A with it took a fifth of a product's time.
inline void store6(float* d, __m256 v) {
  _mm_storeu_ps(d, _mm256_castps256_ps128(v));
  _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), _mm256_extractf128_ps(v, 1));
}

// One strip of a plain op(A) (A[i·lda + k]): its `rows` rows (6, or fewer in a block's last strip, zeros past
// them) 8 k at a time, transposed in registers. The full strips' instance has no test per row.
template <bool kFull>
void pack_a_strip(const float* src, int64_t lda, int rows, int64_t kc, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      r[i] = (kFull ? i < kMr : i < rows) ? _mm256_loadu_ps(src + i * lda + k) : _mm256_setzero_ps();
    transpose8x8(r);  // r[c]: the strip's values at k + c (lanes past 6 unused)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) store6(dst + (k + c) * kMr, r[c]);
  }
  for (; k < kc; ++k)
    for (int i = 0; i < kMr; ++i) dst[k * kMr + i] = i < rows ? src[i * lda + k] : 0.0f;
}

// op(A)'s rows [0, m) and columns [0, kc) (already offset to the block's first row and the pass's
// first k) → strips of 6 rows, strip s at dst + s·a_strip_stride(kc), element (i, k) at [k·6 + i − 6s]; rows past
// m are 0.
void pack_a(bool trans_a, const float* A, int64_t lda, int64_t m, int64_t kc, float* dst) {
  const int64_t stride = a_strip_stride(kc);
  if (trans_a) {  // op(A)(i, k) = A[k·lda + i]: a k's m rows are contiguous
    // kq consecutive k at a time, every strip in turn: each strip gets kq·6 contiguous floats per visit.
    for (int64_t k0 = 0; k0 < kc; k0 += 4) {
      const int kq = static_cast<int>(std::min<int64_t>(4, kc - k0));
      float* d = dst + k0 * kMr;
      int64_t i0 = 0;
      for (; i0 + 8 <= m; i0 += kMr, d += stride)  // whole 8-float loads inside the block's rows
        for (int q = 0; q < kq; ++q) store6(d + q * kMr, _mm256_loadu_ps(A + (k0 + q) * lda + i0));
      for (; i0 < m; i0 += kMr, d += stride)
        for (int q = 0; q < kq; ++q)
          store6(d + q * kMr, _mm256_maskload_ps(A + (k0 + q) * lda + i0, first_n_lanes(m - i0)));
    }
    return;
  }
  // op(A)(i, k) = A[i·lda + k]: strip by strip
  for (int64_t i0 = 0; i0 < m; i0 += kMr, dst += stride) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, m - i0));
    if (rows == kMr)
      pack_a_strip<true>(A + i0 * lda, lda, rows, kc, dst);
    else
      pack_a_strip<false>(A + i0 * lda, lda, rows, kc, dst);
  }
}

// The first 64-byte boundary at or after p (p is at least float-aligned).
float* line_aligned(float* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return p + ((64 - u % 64) % 64) / sizeof(float);
}

// The calling thread's buffer for one packed block of A (pack_a's strips of min(M, kMc) rows × min(K, kKc) k),
// starting on a cache line; grown once per thread, shared by gemm_avx2_serial and gemm_avx2_rows16 (neither calls
// the other).
float* a_block_buffer(int64_t M, int64_t K) {
  thread_local std::vector<float> buf;
  const size_t size =
      static_cast<size_t>(round_up(std::min(M, kMc), kMr) / kMr * a_strip_stride(std::min(K, kKc))) + 16;
  if (buf.size() < size) buf.resize(size);
  return line_aligned(buf.data());
}

// One strip of B (b: kc·16 floats, `cols` ≤ 16 of them C's columns) times a packed block of A (ap: mc rows in
// strips of 6) — the tiles down the strip: each starts from in's tile (the sums so far; nullptr: 0) and goes to
// out's, through e on the last pass. Before a tile's k loop the next tile's lines of C are prefetched (the strip's
// next tile, or at its end the next strip's first, `next_cols` wide; 0: no next strip).
void strip_times_block(int64_t kc, const float* ap, int64_t mc, const float* b, int cols, int next_cols,
                       const float* in, int64_t ldin, float* out, int64_t ldout, const Epilogue* e) {
  for (int64_t r0 = 0; r0 < mc; r0 += kMr) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, mc - r0));
    if (r0 + kMr < mc)
      prefetch_tile16(out + (r0 + kMr) * ldout, ldout, static_cast<int>(std::min<int64_t>(kMr, mc - r0 - kMr)), cols);
    else if (next_cols > 0)
      prefetch_tile16(out + kNr, ldout, static_cast<int>(std::min<int64_t>(kMr, mc)), next_cols);
    kKernels[rows](kc, ap + (r0 / kMr) * a_strip_stride(kc), b, in ? in + r0 * ldin : nullptr, ldin, out + r0 * ldout,
                   ldout, e, cols);
  }
}

}  // namespace

void gemm_avx2_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  thread_local std::vector<float> b_buf, sums_buf;  // grow once per thread
  const int64_t kc_max = std::min(K, kKc), n_strips = round_up(N, kNr) / kNr;
  // Rows in chunks of kRowChunk, each chunk all its passes (its sums wait in a chunk-sized part of C or the scratch,
  // as a panel of gemm_paneled would); with more than one chunk and op(B) of at most kWholeB floats, op(B) is packed
  // once for all chunks (by the first, each pass just before its use), every pass in its own part of b_buf; else
  // one pass at a time, just before its use, in every chunk.
  const bool b_whole = M > kRowChunk && K * N <= kWholeB;
  const int64_t pass_floats = n_strips * b_strip_stride(kc_max);  // one pass's strips (the last pass's fit too)
  const size_t b_size = static_cast<size_t>(pass_floats * (b_whole ? ceil_div(K, kKc) : 1));
  // 16 floats of slack: B's strips start on a cache line (each k's 16 floats one line), so none of the kernel's
  // loads of B splits across two.
  if (b_buf.size() < b_size + 16) b_buf.resize(b_size + 16);
  // Where the sums wait between passes: C, unless the last pass needs C's old values.
  const int64_t chunk_rows = std::min(M, kRowChunk);
  float* sums = C;
  int64_t lds = ldc;
  const bool scratch = beta != 0.0f && K > kKc;
  if (scratch) {
    if (sums_buf.size() < static_cast<size_t>(chunk_rows * N)) sums_buf.resize(static_cast<size_t>(chunk_rows * N));
    sums = sums_buf.data(), lds = N;
  }
  float* bp = line_aligned(b_buf.data());
  float* ap = a_block_buffer(M, K);
  for (int64_t c0 = 0; c0 < M; c0 += kRowChunk) {
    const int64_t c1 = std::min(M, c0 + kRowChunk);
    float* chunk_sums = scratch ? sums : sums + c0 * lds;  // the scratch holds one chunk, from its row 0
    for (int64_t p0 = 0; p0 < K; p0 += kKc) {
      const int64_t kc = std::min(kKc, K - p0);
      const bool first = p0 == 0, last = p0 + kc == K;
      float* bpass = b_whole ? bp + p0 / kKc * pass_floats : bp;
      if (!b_whole || c0 == 0) pack_b(trans_b, trans_b ? B + p0 : B + p0 * ldb, ldb, kc, N, bpass);
      for (int64_t i0 = c0; i0 < c1; i0 += kMc) {
        const int64_t mc = std::min(kMc, c1 - i0);
        pack_a(trans_a, trans_a ? A + p0 * lda + i0 : A + i0 * lda + p0, lda, mc, kc, ap);
        float* s = chunk_sums + (i0 - c0) * lds;
        for (int64_t j0 = 0; j0 < N; j0 += kNr) {
          const Epilogue e{alpha, beta, bias ? bias + j0 : nullptr};
          strip_times_block(kc, ap, mc, bpass + (j0 / kNr) * b_strip_stride(kc),
                            static_cast<int>(std::min<int64_t>(kNr, N - j0)),
                            static_cast<int>(std::clamp<int64_t>(N - j0 - kNr, 0, kNr)), first ? nullptr : s + j0, lds,
                            (last ? C + i0 * ldc : s) + j0, last ? ldc : lds, last ? &e : nullptr);
        }
      }
    }
  }
}

void gemm_avx2_rows16(int64_t m, const float* A, int64_t lda, const float* W, int64_t w_stride, int64_t N, int64_t K,
                      int64_t b0, int64_t b1, const float* bias, float* C, int64_t ldc) {
  float* ap = a_block_buffer(m, K);
  for (int64_t p0 = 0; p0 < K; p0 += kKc) {
    const int64_t kc = std::min(kKc, K - p0);
    const bool first = p0 == 0, last = p0 + kc == K;
    for (int64_t i0 = 0; i0 < m; i0 += kMc) {
      const int64_t mc = std::min(kMc, m - i0);
      pack_a(false, A + i0 * lda + p0, lda, mc, kc, ap);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t j0 = b * kNr;
        const Epilogue e{1.0f, 0.0f, bias ? bias + j0 : nullptr};
        float* c = C + i0 * ldc + j0;
        strip_times_block(kc, ap, mc, W + b * w_stride + p0 * kNr, static_cast<int>(std::min<int64_t>(kNr, N - j0)),
                          b + 1 < b1 ? static_cast<int>(std::min<int64_t>(kNr, N - j0 - kNr)) : 0, first ? nullptr : c,
                          ldc, c, ldc, last ? &e : nullptr);
      }
    }
  }
}

}  // namespace tfm::kernels::gemm_detail
