// src/kernels/attention_avx2.cc — attention's forward for CPUs with AVX2 but not AVX-512 (an AVX2-only
// EPYC, say), compiled with AVX2 and FMA flags (CMakeLists.txt, the *_avx2.cc files). The backward is
// attention_backward_gemm (attention_gemm.cc), on oneDNN sgemm calls; its rows' element-wise work is here
// (attention_probs_row_avx2, attention_ds_row_avx2, at the end).
//
// Per (b, h) and tile of query rows, the keys and values of the head are packed once (pack_keys: blocks of 16
// keys, each d's 16 values contiguous; pack_values: blocks of 16 columns, each key's 16 contiguous), then the
// rows in groups of kRows (each load of the keys and of v serves the group), each row's arithmetic its own:
//   s_j = scale · Σ_d q_d·k_j[d] + mask + key padding   (−inf where causal and j > i, not computed)
//   mx = max_j s_j;  e_j = exp(s_j − mx);  l = Σ_j e_j;  lse = mx + log l;  p_j = e_j · keep_j / l
//   (exp: the vector exp of common_avx2.h, ≤ 2 ulp; l summed 8 lanes apart)
//   o = Σ_j p_j · v_j
// The dot products run with the keys in the lanes (for each d, an fma of q_d into every s_j), and o as an
// fma of p_j·v_j into every d: each output element is one fma chain in a fixed order (d, or j, ascending)
// whichever lanes hold it, so a row's o and lse are the same bits whatever other rows the call has — a
// decoding step (one query row against the cached keys) equals the full causal forward's row, as the flash
// kernel's rows do (tests/ops/attention_cache_test.cc). (For finite values: under a causal mask a group's rows
// run to the group's last row's keys, a row's extra keys at probability 0, and 0·inf is NaN.) Rows whose keys
// are all masked give o = 0 and lse = −inf. Dropout: the counter rule of kernels.h, as the twin.
// Determinism: (b, h, tile) over the threads, each a fixed sequence on its own rows. Memory: per thread
// the packed keys and values ((Dh + Dv)·S floats, S rounded up to 16) and kRows rows of scores (kRows·S),
// thread-local, grown once.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>

#include "kernels/common_avx2.h"
#include "kernels/dropout_hash_avx2.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Query rows per job: each job packs the head's keys and values once for its rows. 192 where there are at least
// 768 query rows (the packing's share of a long sequence's time: 8–14% less at S = 2048), else 64, so that a
// short batch still has jobs for every thread. Only which thread computes a row depends on it, never its bits.
int64_t tile_rows(int64_t L) { return std::min(L >= 768 ? int64_t{192} : int64_t{64}, L); }

// A thread's grow-only float buffer. Not a std::vector: its out-of-line members, compiled here with AVX2 flags,
// would be weak symbols the linker may pick for the whole library, CPUs without AVX2 included.
struct Buffer {
  float* data = nullptr;
  size_t cap = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data); }
};
float* scratch(int slot, int64_t n) {
  thread_local Buffer buf[3];
  Buffer& b = buf[slot];
  if (b.cap < static_cast<size_t>(n)) {
    std::free(b.data);
    b.data = nullptr;
    b.cap = 0;
    void* p = std::malloc(sizeof(float) * static_cast<size_t>(n));
    if (p == nullptr) throw std::bad_alloc();
    b.data = static_cast<float*>(p);
    b.cap = static_cast<size_t>(n);
  }
  return b.data;
}

// Query rows computed together: each load of the packed keys (and of the values) serves this many rows, and
// their 6 × 16 sums fill 12 of the 16 ymm registers (the GEMM kernel's tile, gemm_avx2.cc): enough independent
// fma chains to keep both FMA pipes busy through the FMA's latency.
constexpr int64_t kRows = 6;

// The head's keys packed for dots: blocks of 16 keys, each Dh runs of 16 floats — kP[(j/16)·16·Dh + 16d + j%16]
// = k_j[d] — so a block's loads are one contiguous stream. The last block's keys past S are left unwritten: dots
// never reads them (a masked load, and lanes past n are not stored).
void pack_keys(const float* k, int64_t k_sl, int64_t S, int64_t Dh, float* kP) {
  for (int64_t j0 = 0; j0 < S; j0 += 16)
    transpose_avx2(k + j0 * k_sl, k_sl, std::min<int64_t>(16, S - j0), Dh, kP + j0 * Dh, 16);
}

// The head's values' first Dv/16·16 columns packed for weighted_values: for each block of 16 columns, the S rows'
// 16 floats one after another — vP[(d/16)·16·S + 16j + d%16] = v_j[d] — so a block's pass over the keys reads
// one contiguous stream (v's rows are v_sl apart, a line or more each).
void pack_values(const float* v, int64_t v_sl, int64_t S, int64_t Dv, float* vP) {
  for (int64_t d = 0; d + 16 <= Dv; d += 16, vP += 16 * S)
    for (int64_t j = 0; j < S; ++j) {
      _mm256_storeu_ps(vP + 16 * j, _mm256_loadu_ps(v + j * v_sl + d));
      _mm256_storeu_ps(vP + 16 * j + 8, _mm256_loadu_ps(v + j * v_sl + d + 8));
    }
}

// s[r][j] = Σ_d q[r][d]·k_j[d] for j < n and the kRows rows (keys packed by pack_keys): for each element one fma
// chain over d ascending from 0, keys in the lanes (16, then 8, then the last fewer than 8 under a lane mask), so
// its bits do not depend on the other rows or on where j falls. Under a causal mask most rows end in such a
// remainder.
void dots(const float* const* q, const float* kP, int64_t Dh, int64_t n, float* const* s) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const float* kb = kP + j * Dh;  // the block's Dh runs of 16
    __m256 acc[kRows][2];
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < Dh; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kb + 16 * d), k1 = _mm256_loadu_ps(kb + 16 * d + 8);
#pragma GCC unroll 6
      for (int64_t r = 0; r < kRows; ++r) {
        const __m256 qd = _mm256_broadcast_ss(q[r] + d);
        acc[r][0] = _mm256_fmadd_ps(qd, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qd, k1, acc[r][1]);
      }
    }
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) {
      _mm256_storeu_ps(s[r] + j, acc[r][0]);
      _mm256_storeu_ps(s[r] + j + 8, acc[r][1]);
    }
  }
  for (; j < n; j += 8) {  // 8 keys, or the last n − j (lanes past n read as 0 and are not stored)
    const int64_t w = std::min<int64_t>(8, n - j);
    const __m256i live = first_n_lanes(w);
    const float* kb = kP + (j / 16 * 16) * Dh + j % 16;  // j's block, at j's lane
    __m256 acc[kRows];
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < Dh; ++d) {
      const __m256 k0 = w == 8 ? _mm256_loadu_ps(kb + 16 * d) : _mm256_maskload_ps(kb + 16 * d, live);
#pragma GCC unroll 6
      for (int64_t r = 0; r < kRows; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[r] + d), k0, acc[r]);
    }
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) {
      if (w == 8)
        _mm256_storeu_ps(s[r] + j, acc[r]);
      else
        store_tail(s[r] + j, acc[r], w);
    }
  }
}

// o[r][d] = Σ_j p[r][j]·v_j[d] for j < n and the kRows rows (those past R are computed and not stored: the
// caller points them at a live row): for each element one fma chain over j ascending from 0, 16 columns in two
// vectors' lanes (from vP, pack_values' blocks of the S keys), then 8, then the last columns one at a time (the
// same fma, from v).
void weighted_values(const float* const* p, int64_t R, const float* vP, int64_t S, const float* v, int64_t v_sl,
                     int64_t Dv, int64_t n, float* const* o) {
  int64_t d = 0;
  for (; d + 16 <= Dv; d += 16) {
    const float* vb = vP + d * S;  // the block's rows, 16 floats each
    __m256 acc[kRows][2];
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m256 v0 = _mm256_loadu_ps(vb + 16 * j), v1 = _mm256_loadu_ps(vb + 16 * j + 8);
#pragma GCC unroll 6
      for (int64_t r = 0; r < kRows; ++r) {
        const __m256 pj = _mm256_broadcast_ss(p[r] + j);
        acc[r][0] = _mm256_fmadd_ps(pj, v0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(pj, v1, acc[r][1]);
      }
    }
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r)  // a constant bound, unrolled: acc stays in registers
      if (r < R) {
        _mm256_storeu_ps(o[r] + d, acc[r][0]);
        _mm256_storeu_ps(o[r] + d + 8, acc[r][1]);
      }
  }
  for (; d + 8 <= Dv; d += 8) {
    __m256 acc[kRows];
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m256 vj = _mm256_loadu_ps(v + j * v_sl + d);
#pragma GCC unroll 6
      for (int64_t r = 0; r < kRows; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p[r] + j), vj, acc[r]);
    }
#pragma GCC unroll 6
    for (int64_t r = 0; r < kRows; ++r)
      if (r < R) _mm256_storeu_ps(o[r] + d, acc[r]);
  }
  for (; d < Dv; ++d)
    for (int64_t r = 0; r < R; ++r) {
      float a = 0.0f;
      for (int64_t j = 0; j < n; ++j) a = std::fma(p[r][j], v[j * v_sl + d], a);
      o[r][d] = a;
    }
}

// max_j s[j] over j < n (−inf for n = 0), 8 lanes then the tail.
float row_max(const float* s, int64_t n) {
  __m256 m = _mm256_set1_ps(-kInf);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
  float mx = reduce_max_ps(m);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  return mx;
}

// s[j] ← exp(s[j] − mx) for j < n (common_avx2.h's exp_ps), and returns their sum: lane j mod 8 sums its
// terms in order (the tail's padding adds 0), the lanes added in a fixed order at the end — a function of n
// alone, so a row's bits do not depend on the call.
float exp_and_sum(float* s, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    const __m256 e = exp_ps(_mm256_sub_ps(load_tail(s + j, n - j, -kInf), m));  // exp(−inf) = 0 past n
    store_tail(s + j, e, n - j);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float l = 0.0f;
  for (float x : lanes) l += x;
  return l;
}

// s[j] ← keep_j ? s[j]·inv_keep : 0 for j < n, keep_j = dropout_keep(seed, first + j, p), as the twin (which
// skips a dropped element). The mask is applied after the product: a multiply by a masked factor would leave
// −0 or NaN where the twin has 0, and in the backward (attention_ds_row_avx2) keeps GCC from fusing the product
// into the subtraction that follows, which the twin rounds twice.
inline __m256 kept_times(__m256 keep, __m256 x, __m256 inv) { return _mm256_and_ps(keep, _mm256_mul_ps(x, inv)); }

void scale_kept(float* s, int64_t n, const AttentionParams& p, uint64_t first) {
  DropoutMask8 mask(p.seed, p.dropout_p);
  const __m256 inv = _mm256_set1_ps(dropout_scale(p.dropout_p));
  for (int64_t j = 0; j < n; j += 8) {
    const __m256 keep = mask.keep(first + static_cast<uint64_t>(j));
    if (j + 8 <= n)
      _mm256_storeu_ps(s + j, kept_times(keep, _mm256_loadu_ps(s + j), inv));
    else
      store_tail(s + j, kept_times(keep, load_tail(s + j, n - j), inv), n - j);
  }
}

}  // namespace

void attention_probs_row_avx2(const AttentionParams& p, int64_t n, uint64_t first, float lse, float* s, float* t) {
  const bool dropout = p.dropout_p > 0.0f;
  const __m256 l = _mm256_set1_ps(lse), inv = _mm256_set1_ps(dropout_scale(p.dropout_p));
  DropoutMask8 mask(p.seed, p.dropout_p);
  for (int64_t j = 0; j < n; j += 8) {
    const bool full = j + 8 <= n;
    const __m256 e = exp_ps(_mm256_sub_ps(full ? _mm256_loadu_ps(s + j) : load_tail(s + j, n - j, -kInf), l));
    const __m256 te = dropout ? kept_times(mask.keep(first + static_cast<uint64_t>(j)), e, inv) : e;
    if (full) {
      _mm256_storeu_ps(s + j, e);
      _mm256_storeu_ps(t + j, te);
    } else {
      store_tail(s + j, e, n - j);
      store_tail(t + j, te, n - j);
    }
  }
}

void attention_ds_row_avx2(const AttentionParams& p, int64_t n, uint64_t first, float D, const float* P, float* t) {
  const bool dropout = p.dropout_p > 0.0f;
  const __m256 d = _mm256_set1_ps(D), scale = _mm256_set1_ps(p.scale), inv = _mm256_set1_ps(dropout_scale(p.dropout_p));
  DropoutMask8 mask(p.seed, p.dropout_p);
  for (int64_t j = 0; j < n; j += 8) {
    const bool full = j + 8 <= n;
    const __m256 pj = full ? _mm256_loadu_ps(P + j) : load_tail(P + j, n - j);
    __m256 dp = full ? _mm256_loadu_ps(t + j) : load_tail(t + j, n - j);
    if (dropout) dp = kept_times(mask.keep(first + static_cast<uint64_t>(j)), dp, inv);
    const __m256 g = _mm256_mul_ps(scale, _mm256_mul_ps(pj, _mm256_sub_ps(dp, d)));
    const __m256 r = _mm256_andnot_ps(_mm256_cmp_ps(pj, _mm256_setzero_ps(), _CMP_EQ_OQ), g);  // p = 0: no gradient
    if (full)
      _mm256_storeu_ps(t + j, r);
    else
      store_tail(t + j, r, n - j);
  }
}

void attention_forward_avx2(const AttentionParams& p) {
  const int64_t S = p.S, Dh = p.Dh, Dv = p.dv(), BH = p.B * p.H;
  if (p.L <= 0 || BH <= 0) return;
  const int64_t mt = tile_rows(p.L), tiles = (p.L + mt - 1) / mt;
  const bool dropout = p.dropout_p > 0.0f;
  auto run = [&](int64_t job) {
    const int64_t bh = job / tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = (job % tiles) * mt, i1 = std::min(p.L, i0 + mt);
    float* kP = scratch(0, (S + 15) / 16 * 16 * Dh);  // pack_keys' blocks
    pack_keys(p.k + b * p.k_sb + h * Dh, p.k_sl, S, Dh, kP);
    const float* v = p.v + b * p.v_sb + h * Dv;  // (S, Dv) at v_sl
    float* vP = scratch(2, Dv / 16 * 16 * S);    // pack_values' blocks
    pack_values(v, p.v_sl, S, Dv, vP);
    float* sbuf = scratch(1, kRows * S);         // the group's scores, then probabilities
    for (int64_t g0 = i0; g0 < i1; g0 += kRows) {
      const int64_t R = std::min(kRows, i1 - g0);
      // keys j < n(i) for row i; the rest are −inf (causal), not computed. The group computes up to its
      // largest n: a row's extra keys are then set to −inf, and its own are the same fma chains.
      auto n_of = [&](int64_t i) { return p.causal ? std::min(S, i + 1) : S; };
      const int64_t n_max = n_of(g0 + R - 1);
      const float* q[kRows];
      float* s[kRows];
      for (int64_t r = 0; r < kRows; ++r) {
        q[r] = p.q + b * p.q_sb + (g0 + std::min(r, R - 1)) * p.q_sl + h * Dh;  // unused rows repeat the last
        s[r] = sbuf + r * S;
      }
      dots(q, kP, Dh, n_max, s);
      float* o[kRows];
      int64_t live = 0;  // rows with a key left, in o_rows/p_rows order
      const float* p_rows[kRows];
      float* o_rows[kRows];
      for (int64_t r = 0; r < R; ++r) {
        const int64_t i = g0 + r, n = n_of(i);
        float* si = s[r];
        o[r] = p.o + b * p.o_sb + i * p.o_sl + h * Dv;
        for (int64_t j = 0; j < n; ++j) si[j] *= p.scale;
        if (p.mask != nullptr) {
          const float* m = p.mask + bh * p.mask_sbh + i * S;
          for (int64_t j = 0; j < n; ++j) si[j] += m[j];
        }
        if (p.kpm != nullptr) {
          const float* m = p.kpm + b * S;
          for (int64_t j = 0; j < n; ++j) si[j] += m[j];
        }
        const float mx = row_max(si, n);
        if (mx == -kInf) {  // every key masked: o = 0
          std::fill(o[r], o[r] + Dv, 0.0f);
          if (p.lse != nullptr) p.lse[bh * p.L + i] = -kInf;
          continue;
        }
        const float l = exp_and_sum(si, n, mx);
        if (p.lse != nullptr) p.lse[bh * p.L + i] = mx + std::log(l);
        const float w = 1.0f / l;
        for (int64_t j = 0; j < n; ++j) si[j] *= w;
        if (dropout) scale_kept(si, n, p, p.offset + static_cast<uint64_t>((bh * p.L + i) * S));
        std::fill(si + n, si + n_max, 0.0f);  // keys past the row's: probability 0
        p_rows[live] = si;
        o_rows[live++] = o[r];
      }
      if (live == 0) continue;
      for (int64_t r = live; r < kRows; ++r) p_rows[r] = p_rows[0];  // computed, not stored
      weighted_values(p_rows, live, vP, S, v, p.v_sl, Dv, n_max, o_rows);
    }
  };
  const int64_t jobs = BH * tiles;
  if (jobs == 1) return run(0);
#pragma omp parallel for schedule(static)
  for (int64_t job = 0; job < jobs; ++job) run(job);
}

}  // namespace tfm::kernels
