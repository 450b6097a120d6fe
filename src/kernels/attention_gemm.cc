// src/kernels/attention_gemm.cc — attention's backward for CPUs with AVX2 but without AVX-512 (an AVX2-only
// EPYC, say): the products as single-threaded panel products (gemm_backend.h's sgemm_serial: gemm_avx2.cc's
// blocked product there), the softmax between them
// a row at a time by attention_probs_row_avx2 and attention_ds_row_avx2 (attention_avx2.cc, compiled with
// AVX2 flags; this file is not). The flash kernel (attention_avx512.cc) needs AVX-512; the scalar twin
// (attention_scalar.h) is the specification, written to be obviously correct: it recomputes every score, one
// product at a time, on one thread. This body computes what the twin does, up to float rounding (the same
// masks, the same dropout elements; exp is common_avx2.h's vector exp), and is what attention_backward runs
// where cpu_has_avx512() is false and cpu_has_avx2() true; the forward there is attention_forward_avx2.
//
// Per (b, h) and per tile of m ≤ kMaxRows query rows i0..i0+m (q_t, o_t, do_t: the tile's rows), against the
// keys the tile sees (all S, or under a causal mask j < i0 + m: keys_seen; the products below then run on those n
// columns, and dv, dk gain nothing past them, as the masked keys' zero probabilities would add):
//   S(m,n) = scale · q_t · kᵀ  (one sgemm), + mask, + key padding, −inf where causal and j > i
//   p_ij = exp(s_ij − lse_i) from the forward's lse; keep_ij ∈ {0, 1/(1−p)}: dropout's counter rule
//   dv(n,Dv) += (p ∘ keep)ᵀ · do_t;  dP(m,n) = do_t · vᵀ;  D_i = ⟨do_i, o_i⟩
//   G_ij = scale · p_ij · (keep_ij · dP_ij − D_i)   (scale · ds)
//   dq_t(m,Dh) = G · k;  dk(n,Dh) += Gᵀ · q_t      (four sgemms)
// A row whose keys are all masked (lse_i = −inf) gets no gradient (its p is 0).
//
// Memory: per thread two tiles of m·n floats (thread-local, grown once), m = kMaxRows query rows (kCausalRows
// under a causal mask), fewer when S is long (m·S ≤ kTileFloats, at least one row): never the whole (L,S) matrix.
// Determinism: (b, h) over the threads, its tiles adding into one dk, dv in tile order; every job is a
// fixed sequence of single-threaded calls on its own rows, so the bits do not depend on the thread count.
// Products with bfloat16 operands (AttentionParams::bf16) need bf16 dot products, which no CPU without AVX-512
// has: attention.cc clears the flag there (float32 products, as on every CPU without them).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/gemm_backend.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Query rows per tile, and the most scores a tile holds (64 rows of 1024 keys: 256 KB) unless one row
// alone is longer.
constexpr int64_t kMaxRows = 64, kTileFloats = int64_t(64) * 1024;
// Under a causal mask a tile of rows i0 … i0+m−1 sees keys j < i0 + m only, so shorter tiles skip more of the
// masked triangle: 24 rows (four of the products' 6-row tiles) do two thirds of the full square's work at 64 keys.
constexpr int64_t kCausalRows = 24;

int64_t tile_rows(const AttentionParams& p) {
  const int64_t rows = p.causal ? kCausalRows : kMaxRows;
  return std::clamp<int64_t>(kTileFloats / std::max<int64_t>(p.S, 1), 1, std::min(rows, p.L));
}

// The keys rows i0 … i0+m−1 can see: all S, or under a causal mask those up to the last row's (j ≤ i0 + m − 1);
// the scores past them are −inf, their probabilities 0, and the products skip them.
int64_t keys_seen(const AttentionParams& p, int64_t i0, int64_t m) { return p.causal ? std::min(p.S, i0 + m) : p.S; }

// C = alpha·op(A)·op(B) + beta·C on the calling thread (gemm_backend.h's sgemm_serial).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (alpha == 0.0f) {  // C = beta·C (BLAS): the panel products take alpha ≠ 0 (gemm.cc says why)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  gemm_detail::sgemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The calling thread's scratch number `slot` with room for n floats (grows once).
float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& b = buf[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// One (b, h) pair's operands.
struct HeadView {
  const AttentionParams& p;
  int64_t bh, b, h;
  const float* q(int64_t i) const { return p.q + b * p.q_sb + i * p.q_sl + h * p.Dh; }  // (Dh)
  const float* k() const { return p.k + b * p.k_sb + h * p.Dh; }                        // (S, Dh) at k_sl
  const float* v() const { return p.v + b * p.v_sb + h * p.dv(); }                      // (S, Dv) at v_sl
  int64_t o_at(int64_t i) const { return b * p.o_sb + i * p.o_sl + h * p.dv(); }        // o, dout: (Dv)
  int64_t q_at(int64_t i) const { return b * p.q_sb + i * p.q_sl + h * p.Dh; }          // dq
  int64_t k_at() const { return b * p.k_sb + h * p.Dh; }                                // dk
  int64_t v_at() const { return b * p.v_sb + h * p.dv(); }                              // dv

  // s(m, n) ← the scores of query rows i0..i0+m against keys j < n: scale·q·kᵀ + mask + key padding, −inf
  // where causal and j > i (the twin's score()).
  void scores(int64_t i0, int64_t m, int64_t n, float* s) const {
    const int64_t S = p.S;
    sgemm(false, true, m, n, p.Dh, p.scale, q(i0), p.q_sl, k(), p.k_sl, 0.0f, s, n);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = i0 + r;
      float* row = s + r * n;
      if (p.mask != nullptr) {
        const float* mr = p.mask + bh * p.mask_sbh + i * S;
        for (int64_t j = 0; j < n; ++j) row[j] += mr[j];
      }
      if (p.kpm != nullptr) {
        const float* kr = p.kpm + b * S;
        for (int64_t j = 0; j < n; ++j) row[j] += kr[j];
      }
      if (p.causal)
        for (int64_t j = i + 1; j < n; ++j) row[j] = -kInf;
    }
  }

  // Dropout's counter of element (i, 0) (kernels.h's counter rule).
  uint64_t counter(int64_t i) const { return p.offset + static_cast<uint64_t>((bh * p.L + i) * p.S); }
};

}  // namespace

void attention_backward_gemm(const AttentionParams& p, const float* dout, float* dq, float* dk, float* dv) {
  const int64_t S = p.S, Dh = p.Dh, Dv = p.dv(), BH = p.B * p.H;
  if (BH <= 0) return;
  const int64_t mt = p.L > 0 ? tile_rows(p) : 1;
  auto run = [&](int64_t bh) {
    const HeadView hv{p, bh, bh / p.H, bh % p.H};
    float* dk_h = dk + hv.k_at();  // (S, Dh) at k_sl
    float* dv_h = dv + hv.v_at();  // (S, Dv) at v_sl
    for (int64_t j = 0; j < S; ++j) {
      std::fill(dk_h + j * p.k_sl, dk_h + j * p.k_sl + Dh, 0.0f);
      std::fill(dv_h + j * p.v_sl, dv_h + j * p.v_sl + Dv, 0.0f);
    }
    for (int64_t i0 = 0; i0 < p.L; i0 += mt) {
      const int64_t m = std::min(mt, p.L - i0), n = keys_seen(p, i0, m);
      float* P = scratch(0, m * n);  // (m, n): p_ij
      float* T = scratch(1, m * n);  // (m, n): p·keep, then dP, then G
      hv.scores(i0, m, n, P);
      for (int64_t r = 0; r < m; ++r) {
        const int64_t i = i0 + r;
        const float lse = p.lse[bh * p.L + i];
        float* row = P + r * n;
        float* trow = T + r * n;
        if (lse == -kInf) {  // every key masked: no gradient
          std::fill(row, row + n, 0.0f);
          std::fill(trow, trow + n, 0.0f);
          continue;
        }
        attention_probs_row_avx2(p, n, hv.counter(i), lse, row, trow);  // exp(−inf) = 0 where masked
      }
      const float* do_t = dout + hv.o_at(i0);                                        // (m, Dv) at o_sl
      sgemm(true, false, n, Dv, m, 1.0f, T, n, do_t, p.o_sl, 1.0f, dv_h, p.v_sl);    // dv += (p·keep)ᵀ · do
      sgemm(false, true, m, n, Dv, 1.0f, do_t, p.o_sl, hv.v(), p.v_sl, 0.0f, T, n);  // dP = do · vᵀ
      for (int64_t r = 0; r < m; ++r) {
        const int64_t i = i0 + r;
        const float* doi = do_t + r * p.o_sl;
        const float* oi = p.o + hv.o_at(i);
        float D = 0.0f;
        for (int64_t d = 0; d < Dv; ++d) D += doi[d] * oi[d];
        attention_ds_row_avx2(p, n, hv.counter(i), D, P + r * n, T + r * n);
      }
      sgemm(false, false, m, Dh, n, 1.0f, T, n, hv.k(), p.k_sl, 0.0f, dq + hv.q_at(i0), p.q_sl);  // dq = G·k
      sgemm(true, false, n, Dh, m, 1.0f, T, n, hv.q(i0), p.q_sl, 1.0f, dk_h, p.k_sl);             // dk += Gᵀ·q
    }
  };
  if (BH == 1) return run(0);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh) run(bh);
}

}  // namespace tfm::kernels
