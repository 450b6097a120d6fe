// src/kernels/attention_avx512.cc — flash-attention forward and backward for AVX-512: float32 products
// (FMA), or bfloat16 operands with float32 sums (vdpbf16ps) when AttentionParams::bf16.
//
// Compiled with AVX-512 flags (CMakeLists.txt's TFM_AVX512_OPTIONS, because of the *_avx512.cc name:
// the F, BW, DQ and VL subsets cpu_has_avx512() checks, and FMA) plus AVX512-BF16, whose instructions
// only the BF template instances contain; the dispatch in attention.cc calls it only when
// cpu_has_avx512(), and with bf16 set only when cpu_has_bf16_dot(). The specification is the scalar
// reference in attention_scalar.h; tests/kernels/attention_test.cc checks this file against it.
//
// Algorithm (Dao et al., FlashAttention-2), never materializing the (L,S) score matrix:
//   forward, per (bh, tile of Br ≤ 64 queries): for each tile of kBc = 64 keys,
//     Sᵀ(Bc,Br) = K_tile · Q_tileᵀ, then online softmax per query (running max m and sum l),
//     acc(Br,Dv) = acc·exp(m_old − m_new) + drop(P)·V_tile;  finally o = acc / l, lse = m + log l.
//     The scores are kept transposed (keys × queries) so the per-query max/sum are lane-wise
//     vector ops with no horizontal reductions, and Q_tileᵀ is packed once per query tile.
//     At most 8 query rows (decoding) take forward_rows instead: keys in the lanes, K_tileᵀ packed
//     once per key tile, the same arithmetic in the same order, so the same bits.
//   backward, per key tile (dk, dv accumulated in registers/scratch over query tiles in order):
//     S(Br,Bc) = Q·K_tileᵀ, P = exp(S − lse), dP = dO·V_tileᵀ, dS = P ⊙ (dP − D),
//     dv += drop(P)ᵀ·dO, dk += scale·dSᵀ·Q, dq += scale·dS·K_tile  (K_tileᵀ, V_tileᵀ packed once).
// Every product goes through one register-blocked micro-kernel (MR rows × NV·16 columns of C in
// zmm registers, A broadcast, B loaded as vectors), whose per-element arithmetic is a plain FMA
// chain in the reduction order — so a score has the same bits in the forward and the backward.
// bf16: the same tiles and schedule; each operand is rounded once into the layout vdpbf16ps reads
// ("bfloat16 pairs" below: q, k, v and dout per head before the tiles, drop(P) and scale·dS per tile),
// and the chain runs over pairs, still in the reduction order, so the scores still match.
// Long sequences (L·S ≥ 256²) on the tiles first copy each head's operand rows into contiguous blocks
// (worth_packing explains why); the arithmetic, and so every bit, is the same either way.
//
// Determinism: tile sizes are fixed; forward tiles are independent; in the backward every dk/dv
// row is reduced over query tiles in increasing order and every dq row over key tiles in
// increasing order, in both threading schemes (one (b,h) per thread, or key tiles then query tiles
// in two passes), so the result is bitwise the same for any thread count.
//
// To tune: kBc and the backward kBr are fixed constants (changing kBc changes the forward's
// rounding; re-run the bitwise tests); mr_for() picks the micro-kernel height for each width;
// bench/bench_attention.cc times the kernels alone; bench/RESULTS.md ("Design measurements behind the
// kernels") lists the variants that brought no gain.
// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 headers (the deliberately undefined
// pass-through operand of _mm512_undefined_ps, GCC PR 105593, fixed in GCC 13); silence just that.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>

#include "kernels/common_avx512.h"
#include "kernels/dropout_hash_avx512.h"
#include "kernels/kernels.h"
#include "kernels/transpose_avx512.h"

namespace tfm::kernels {
namespace {

constexpr int64_t kBc = 64;  // keys per tile (4 zmm of scores)
constexpr int64_t kBr = 64;  // queries per tile in the backward (the forward uses 16·NVQ ≤ 64)
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- thread-local scratch (Scratch, common_avx512.h: 64-byte aligned, grows once) ----------------
thread_local Scratch tl_scratch;   // per-tile buffers of the thread running the tile
thread_local Scratch tl_packed;    // the calling thread's packed operands, shared by all its workers

inline size_t round16(int64_t n) { return (static_cast<size_t>(n) + 15) & ~size_t(15); }

// ---- dropout --------------------------------------------------------------------------------------
// Element (bh, i, j) is kept iff dropout_keep(seed, offset + (bh·L + i)·S + j, p) (kernels.h), 16
// lanes at a time by DropoutMask16; kept probabilities are scaled by 1/(1 − p).
struct Dropout {
  bool on = false;
  float inv_keep = 1.0f;  // 1/(1−p), 0 when p ≥ 1
  uint64_t seed = 0, offset = 0;
  float p = 0.0f;

  explicit Dropout(const AttentionParams& prm)
      : on(prm.dropout_p > 0.0f),
        inv_keep(dropout_scale(prm.dropout_p)),
        seed(prm.seed),
        offset(prm.offset),
        p(prm.dropout_p) {}
  // Lane l's counter is first + l·stride (stride S: 16 queries of one key; 1: 16 keys of a query).
  DropoutMask16 lanes(uint64_t stride) const {
    return DropoutMask16::strided(seed, p, stride);
  }
};

// ---- the micro-kernel -----------------------------------------------------------------------------
// C(MR, NV·16) (+)= Σ_kk A(r, kk) · B(kk, :) with A(r, kk) = A[r·a_rs + kk·a_ks] (broadcast) and
// B row kk at B + kk·ldb (vectors); the last vector of each row uses the lane mask `tail`.
// Per element the arithmetic is c = fma(a, b, c) in increasing kk, starting from 0 or from C.
// BF: A and B hold bfloat16 pairs ("bfloat16 pairs" below), kk counts pairs, and each step is one
// vdpbf16ps: c ← (c + a₁·b₁) + a₀·b₀, exact products added in float32 one after the other, the pair's odd
// element first, with denormal inputs and results taken as zero (the instruction's definition; measured so
// on Zen 4).
template <int MR, int NV, bool ACC, bool BF = false>
inline void micro(int64_t K, const float* A, int64_t a_rs, int64_t a_ks, const float* B,
                  int64_t ldb, float* C, int64_t ldc, __mmask16 tail) {
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      c[r][v] = !ACC           ? _mm512_setzero_ps()
                : v == NV - 1 ? _mm512_maskz_loadu_ps(tail, C + r * ldc + 16 * v)
                              : _mm512_loadu_ps(C + r * ldc + 16 * v);
  for (int64_t kk = 0; kk < K; ++kk) {
    const float* bk = B + kk * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(tail, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
    const float* ak = A + kk * a_ks;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(ak[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if constexpr (BF) {
          c[r][v] = _mm512_dpbf16_ps(c[r][v], (__m512bh)a, (__m512bh)bv[v]);
        } else {
          c[r][v] = _mm512_fmadd_ps(a, bv[v], c[r][v]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1) {
        _mm512_mask_storeu_ps(C + r * ldc + 16 * v, tail, c[r][v]);
      } else {
        _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
      }
    }
}

// Rows per micro-kernel call for a width of NV vectors: MR·NV ≤ 24 accumulators + NV + 1 registers.
constexpr int mr_for(int nv) { return nv == 1 ? 8 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }

template <int NV, bool ACC, bool BF, int R>
void micro_rest(int64_t rows, int64_t K, const float* A, int64_t a_rs, int64_t a_ks,
                const float* B, int64_t ldb, float* C, int64_t ldc, __mmask16 tail) {
  if constexpr (R > 0) {
    if (rows == R) {
      micro<R, NV, ACC, BF>(K, A, a_rs, a_ks, B, ldb, C, ldc, tail);
    } else {
      micro_rest<NV, ACC, BF, R - 1>(rows, K, A, a_rs, a_ks, B, ldb, C, ldc, tail);
    }
  }
}

template <int NV, bool ACC, bool BF>
void rows_of(int64_t M, int64_t K, const float* A, int64_t a_rs, int64_t a_ks, const float* B,
             int64_t ldb, float* C, int64_t ldc, __mmask16 tail) {
  constexpr int MR = mr_for(NV);
  int64_t r = 0;
  for (; r + MR <= M; r += MR)
    micro<MR, NV, ACC, BF>(K, A + r * a_rs, a_rs, a_ks, B, ldb, C + r * ldc, ldc, tail);
  if (r < M)
    micro_rest<NV, ACC, BF, MR - 1>(M - r, K, A + r * a_rs, a_rs, a_ks, B, ldb, C + r * ldc, ldc, tail);
}

// C(M,N) (+)= A(M,K) · B(K,N) with the strides above, in column chunks of 64. ACC: add to C,
// else overwrite. Only the M×N elements of C are touched (masked tail stores). BF: A and B are
// bfloat16 pairs and K counts pairs (strides in pairs).
template <bool ACC, bool BF = false>
void gemm_small(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_ks,
                const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t c0 = 0; c0 < N; c0 += 64) {
    const int64_t n = std::min<int64_t>(64, N - c0);
    const __mmask16 tail = first_n(n - 16 * ((n - 1) / 16));
    switch ((n + 15) / 16) {
      case 1: rows_of<1, ACC, BF>(M, K, A, a_rs, a_ks, B + c0, ldb, C + c0, ldc, tail); break;
      case 2: rows_of<2, ACC, BF>(M, K, A, a_rs, a_ks, B + c0, ldb, C + c0, ldc, tail); break;
      case 3: rows_of<3, ACC, BF>(M, K, A, a_rs, a_ks, B + c0, ldb, C + c0, ldc, tail); break;
      default: rows_of<4, ACC, BF>(M, K, A, a_rs, a_ks, B + c0, ldb, C + c0, ldc, tail); break;
    }
  }
}

// ---- bfloat16 pairs ---------------------------------------------------------------------------------
// With AttentionParams::bf16 every product takes bfloat16 operands: vdpbf16ps multiplies pairs along
// the reduction, so each operand is stored as 32-bit words of two bfloat16 (element 2t in the low half,
// 2t+1 in the high half), held in float buffers (the words are only moved, never computed on, until
// vdpbf16ps reads them). Two forms, by which way the reduction runs through the matrix X (n, W):
//   rows  (n, ⌈W/2⌉): word (i, t) = (X[i][2t], X[i][2t+1]): the reduction runs along a row
//   pairs (⌈n/2⌉, W): word (t, d) = (X[2t][d], X[2t+1][d]): the reduction runs down the columns
// An odd count is padded with a bfloat16 zero. Rounding: bf16_hi (common_avx512.h), the twin's
// float_to_bf16.
inline int64_t half_up(int64_t n) { return (n + 1) / 2; }

// Source rows are one head's W floats out of each token's row (sl = H·W, or 3·H·W for the packed in-projection):
// for Dh 64 and D 512, 256 bytes every 6 KB, each row on another 4 KB page, where the hardware prefetchers stop.
// So each row's cache lines are prefetched kPrefetchRows rows ahead.
constexpr int64_t kPrefetchRows = 8;
inline void prefetch_row(const float* row, int64_t W) {
  for (int64_t c = 0; c < W; c += 16) _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}

// dst (n, ⌈W/2⌉ words, row stride ldw words) ← rows of src (n, W, row stride sl).
void to_bf16_rows(const float* src, int64_t sl, int64_t n, int64_t W, float* dst, int64_t ldw) {
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < n) prefetch_row(src + (i + kPrefetchRows) * sl, W);
    auto* d = reinterpret_cast<uint16_t*>(dst + i * ldw);
    round_run_to_bf16(src + i * sl, d, W);
    if (W % 2 != 0) {  // the pad of the last pair (a uint16_t store into float storage: memcpy)
      const uint16_t zero = 0;
      std::memcpy(d + W, &zero, sizeof zero);
    }
  }
}

// dst (⌈n/2⌉, W words, row stride ldw words) ← rows of src (n, W, row stride sl), paired.
void to_bf16_pairs(const float* src, int64_t sl, int64_t n, int64_t W, float* dst, int64_t ldw) {
  for (int64_t t = 0; 2 * t < n; ++t) {
    const float* s0 = src + 2 * t * sl;
    const float* s1 = 2 * t + 1 < n ? s0 + sl : nullptr;
    for (int64_t i = 2 * t + kPrefetchRows; i < std::min(n, 2 * t + kPrefetchRows + 2); ++i)
      prefetch_row(src + i * sl, W);
    float* d = dst + t * ldw;
    for (int64_t c = 0; c < W; c += 16) {
      const __mmask16 m = first_n(W - c);
      const __m512i lo = _mm512_srli_epi32(bf16_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, s0 + c))), 16);
      const __m512i hi =
          s1 ? bf16_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, s1 + c))) : _mm512_setzero_si512();
      _mm512_mask_storeu_ps(d + c, m, _mm512_castsi512_ps(_mm512_or_si512(lo, hi)));
    }
  }
}

// ⟨a, b⟩ over n floats: 16-lane FMA then a fixed-order horizontal sum.
inline float dot(const float* a, const float* b, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), s);
  if (d < n) {
    const __mmask16 m = first_n(n - d);
    s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + d), _mm512_maskz_loadu_ps(m, b + d), s);
  }
  return _mm512_reduce_add_ps(s);
}

// ---- operand layouts -------------------------------------------------------------------------------
// A (B, H, rows, W) operand, W = Dh for q and k, Dv for v, o and their gradients: element (b, h, i, d)
// at base[b·sb + h·sh + i·sl + d]. As the caller passes them, the heads of a token sit side by side
// (sh = W, sl = H·W or the packed projection's row); packed, each head's rows are contiguous
// (sh = rows·W, sl = W).
template <class T>
struct View {
  T* base = nullptr;
  int64_t sb = 0, sh = 0, sl = 0;  // sh is also the row width W
  T* head(int64_t b, int64_t h) const { return base + b * sb + h * sh; }
};

struct Layout {
  View<const float> q, k, v, dout;  // dout: the backward's incoming gradient, o's shape
  View<float> o, dq;                // dq: where the backward accumulates dq
  // bf16 (bfloat16 pairs, sh and sl in words): q, k and (backward) v hold the rows form, (forward) v
  // the pairs form; qp, kp, dop hold the pairs form of q, k, dout and dow the rows form of dout. dout
  // itself stays float32 (for D_i).
  View<const float> qp, kp, dow, dop;
  explicit Layout(const AttentionParams& p)
      : q{p.q, p.q_sb, p.Dh, p.q_sl}, k{p.k, p.k_sb, p.Dh, p.k_sl}, v{p.v, p.v_sb, p.dv(), p.v_sl},
        o{p.o, p.o_sb, p.dv(), p.o_sl} {}
};

// Why pack: in the caller's layout consecutive rows of one head are H·Dh or 3·H·Dh floats apart
// (3 KB for the packed in-projection of D = 256: 48 cache lines). Such a stride maps a head's rows
// onto a small subset of the cache sets: with Dh = 64 and S = 2048, a head's K and V rows (1 MB
// together) start only on every 16th set and compete for 512 of a 2048-set L2, so without the copy
// every query tile re-streams K and V from L3 (bench/RESULTS.md, "Design measurements behind the
// kernels", has what that cost). Copied once into contiguous (B, H, rows, Dh) blocks, a head's
// operands stay in L2 across all of its tiles. Short sequences fit either way and skip the copy.
inline bool worth_packing(const AttentionParams& p) { return p.L * p.S >= 256 * 256; }

// Rows [0, rows) of every head, W wide, src → dst (any two layouts), in parallel over (b, h) when `par`.
void copy_heads(const View<const float>& src, const View<float>& dst, const AttentionParams& p,
                int64_t rows, int64_t W, bool par) {
#pragma omp parallel for schedule(static) if (par)
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const float* s = src.head(bh / p.H, bh % p.H);
    float* d = dst.head(bh / p.H, bh % p.H);
    for (int64_t i = 0; i < rows; ++i) std::memcpy(d + i * dst.sl, s + i * src.sl, sizeof(float) * W);
  }
}

// The packed (B, H, rows, W) layout at base.
template <class T>
View<T> packed_view(T* base, const AttentionParams& p, int64_t rows, int64_t W) {
  return {base, p.H * rows * W, rows * W, W};
}

// dst (B, H, rows, W) ← src (W = src.sh); returns the packed view.
View<const float> pack_heads(const View<const float>& src, const AttentionParams& p, int64_t rows,
                             float* dst, bool par) {
  copy_heads(src, packed_view(dst, p, rows, src.sh), p, rows, src.sh, par);
  return packed_view<const float>(dst, p, rows, src.sh);
}

// One operand's bfloat16 packing: rows [0, rows) of every head of src (W = src.sh floats wide) → dst in the rows
// or pairs form, each head's block contiguous.
struct Bf16Pack {
  View<const float> src;
  int64_t rows = 0;
  bool pairs = false;
  float* dst = nullptr;
  int64_t n() const { return pairs ? half_up(rows) : rows; }      // rows of the packed block
  int64_t w() const { return pairs ? src.sh : half_up(src.sh); }  // its width in words
  View<float> out(const AttentionParams& p) const { return packed_view(dst, p, n(), w()); }
  View<const float> view(const AttentionParams& p) const {  // the packed operand (sh, sl in words)
    const View<float> o = out(p);
    return {o.base, o.sb, o.sh, o.sl};
  }
  void head(const AttentionParams& p, int64_t bh) const {
    const float* s = src.head(bh / p.H, bh % p.H);
    float* d = out(p).head(bh / p.H, bh % p.H);
    if (pairs) {
      to_bf16_pairs(s, src.sl, rows, src.sh, d, w());
    } else {
      to_bf16_rows(s, src.sl, rows, src.sh, d, w());
    }
  }
};

// Every job's packing in one pass over the heads (in parallel over (b, h) when `par`): one thread team, and a
// head's source rows read by its several jobs while they are in that thread's cache.
template <size_t K>
void pack_heads_bf16(const Bf16Pack (&jobs)[K], const AttentionParams& p, bool par) {
#pragma omp parallel for schedule(static) if (par)
  for (int64_t bh = 0; bh < p.B * p.H; ++bh)
    for (const Bf16Pack& job : jobs) job.head(p, bh);
}

// Words a packed bf16 form of (rows, W) per head takes, for all heads.
inline size_t bf16_words(const AttentionParams& p, int64_t rows, int64_t W, bool pairs) {
  return static_cast<size_t>(p.B * p.H * (pairs ? half_up(rows) * W : rows * half_up(W)));
}

// ---- per-(b,h) views ------------------------------------------------------------------------------
struct Head {
  int64_t bh, b, h;
  const float* q;     // row i at q + i·q_sl, (Dh)
  const float* k;     // row j at k + j·k_sl
  const float* v;     // row j at v + j·v_sl, (Dv)
  float* o;           // row i at o + i·o_sl, (Dv)
  const float* dout;  // row i at dout + i·do_sl (backward only)
  float* dq;          // row i at dq + i·dq_sl (backward only)
  const float *qp, *kp, *dow, *dop;  // bf16 only: Layout's pairs and rows forms
  int64_t q_sl, k_sl, v_sl, o_sl, do_sl, dq_sl, qp_sl, kp_sl, dow_sl, dop_sl;
  const float* mask;  // (L,S) additive, or null
  const float* kpm;   // (S) additive, or null
  Head(const AttentionParams& p, const Layout& lt, int64_t bh_)
      : bh(bh_), b(bh_ / p.H), h(bh_ % p.H),
        q(lt.q.head(b, h)), k(lt.k.head(b, h)), v(lt.v.head(b, h)), o(lt.o.head(b, h)),
        dout(lt.dout.base ? lt.dout.head(b, h) : nullptr),
        dq(lt.dq.base ? lt.dq.head(b, h) : nullptr),
        qp(lt.qp.base ? lt.qp.head(b, h) : nullptr), kp(lt.kp.base ? lt.kp.head(b, h) : nullptr),
        dow(lt.dow.base ? lt.dow.head(b, h) : nullptr), dop(lt.dop.base ? lt.dop.head(b, h) : nullptr),
        q_sl(lt.q.sl), k_sl(lt.k.sl), v_sl(lt.v.sl), o_sl(lt.o.sl), do_sl(lt.dout.sl),
        dq_sl(lt.dq.sl), qp_sl(lt.qp.sl), kp_sl(lt.kp.sl), dow_sl(lt.dow.sl), dop_sl(lt.dop.sl),
        mask(p.mask ? p.mask + bh_ * p.mask_sbh : nullptr), kpm(p.kpm ? p.kpm + b * p.S : nullptr) {}
};

// Pack rows [0, n) of src (row stride sl, Dh wide) transposed into dst (Dh, ld), zero for n ≤ col < ld;
// 16×16 blocks through registers (transpose_block, transpose_avx512.h): an element-by-element copy
// is a sizeable part of the attention backward (bench/RESULTS.md, "Design measurements behind the
// kernels").
void pack_transposed(const float* src, int64_t sl, int64_t n, int64_t Dh, float* dst, int64_t ld) {
  if (n < ld)
    for (int64_t d = 0; d < Dh; ++d) std::memset(dst + d * ld + n, 0, sizeof(float) * (ld - n));
  transpose_block(src, sl, n, Dh, dst, ld);
}

// ---- forward --------------------------------------------------------------------------------------
// The end of a forward for query rows [i0, i0 + ni) of head hd, from their accumulators acc (ni, Dv),
// running maxima m and sums l: o_i = acc_i / l_i, lse_i = m_i + log l_i; a row with no unmasked key has
// l_i = 0: o_i = 0, lse_i = −inf. Shared by forward_tile and forward_rows, whose rows must agree bit for bit.
void write_rows(const AttentionParams& p, const Head& hd, int64_t i0, int64_t ni, const float* acc,
                const float* m, const float* l) {
  const int64_t Dv = p.dv();
  for (int64_t i = 0; i < ni; ++i) {
    float* oi = hd.o + (i0 + i) * hd.o_sl;
    const float* ai = acc + i * Dv;
    const bool empty = !(l[i] > 0.0f);
    const float inv = empty ? 0.0f : 1.0f / l[i];
    for (int64_t d = 0; d < Dv; ++d) oi[d] = ai[d] * inv;
    if (p.lse) p.lse[hd.bh * p.L + i0 + i] = empty ? -kInf : m[i] + std::log(l[i]);
  }
}

// acc (Dv) ← a·acc, the rescale of a row's accumulator when its running max moves.
inline void scale_row(float* acc, float a, int64_t Dv) {
  const __m512 av = _mm512_set1_ps(a);
  const __mmask16 tail = first_n(Dv - 16 * ((Dv - 1) / 16));
  int64_t d = 0;
  for (; d + 16 < Dv; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(av, _mm512_loadu_ps(acc + d)));
  _mm512_mask_storeu_ps(acc + d, tail, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(tail, acc + d)));
}

// One tile of Br = 16·NVQ queries [i0, i0+ni) of head hd.
// BF (AttentionParams::bf16): hd.k holds K's bf16 rows form and hd.v V's pairs form; the query tile is
// rounded here, and drop(P) once per key tile before its product with V. When a causal tile ends on an odd
// key count below S, its last pair of V holds the next key's row too, multiplied by a zero probability (as
// the float32 path multiplies the masked keys of a diagonal tile): only an Inf or NaN there would show, as it
// does in PyTorch's masked matmul.
// noinline: the BF instances stay functions of their own, the only ones holding AVX512-BF16 instructions with
// the micro-kernel's (tests/kernels/check_isa.py checks it); a tile is far more work than a call.
template <int NVQ, bool BF>
__attribute__((noinline)) void forward_tile(const AttentionParams& p, const Dropout& dr, const Head& hd, int64_t i0) {
  constexpr int64_t Br = 16 * NVQ;
  const int64_t Dh = p.Dh, Dv = p.dv(), S = p.S;
  const int64_t Dk = BF ? half_up(Dh) : Dh;  // the product's reduction length over d (pairs when BF)
  const int64_t ni = std::min(Br, p.L - i0);
  const size_t nbf = BF ? round16(ni * Dk) + kBc / 2 * Br : 0;
  float* qt = tl_scratch.get(round16(Dk * Br) + kBc * Br + round16(Br * Dv) + Br + nbf);  // (Dk, Br)
  float* st = qt + round16(Dk * Br);  // (Bc, Br): scores, then dropped probabilities, transposed
  float* acc = st + kBc * Br;         // (Br, Dv): Σ_j drop(exp(s_ij − m_i)) v_j
  float* alpha = acc + round16(Br * Dv);  // (Br): exp(m_old − m_new) of the current key tile
  float* qw = alpha + Br;                 // BF: (ni, Dk) the query tile's rows form
  float* pw = qw + round16(ni * Dk);      // BF: (Bc/2, Br) drop(P) in the pairs form over keys

  if constexpr (BF) {
    to_bf16_rows(hd.q + i0 * hd.q_sl, hd.q_sl, ni, Dh, qw, Dk);
    pack_transposed(qw, Dk, ni, Dk, qt, Br);
  } else {
    pack_transposed(hd.q + i0 * hd.q_sl, hd.q_sl, ni, Dh, qt, Br);
  }
  std::fill(acc, acc + ni * Dv, 0.0f);

  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lane_S = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(S)));
  DropoutMask16 drop_mask = dr.lanes(static_cast<uint64_t>(S));
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(-kInf);
  __m512 m[NVQ], l[NVQ];
  __m512i row[NVQ];  // query index i of each lane (int32)
  __mmask16 valid[NVQ];
  for (int v = 0; v < NVQ; ++v) {
    m[v] = neg_inf;
    l[v] = _mm512_setzero_ps();
    row[v] = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(i0 + 16 * v)));
    valid[v] = first_n(ni - 16 * v > 0 ? ni - 16 * v : 0);
  }

  const int64_t jend = p.causal ? std::min(S, i0 + ni) : S;  // keys j > every i are skipped
  for (int64_t j0 = 0; j0 < jend; j0 += kBc) {
    const int64_t nk = std::min(kBc, jend - j0);
    const bool diag = p.causal && j0 + nk - 1 > i0;  // the tile holds some j > i
    // On the diagonal a causal tile is a triangle: the queries of vector v (rows i0 + 16v + lane) see only
    // keys j ≤ i0 + 16v + 15, the first nkv(v) of the tile, and in float32 each vector's products and
    // softmax run over those alone. A key past them would add exp(−inf) = 0 to l and 0·v_j to acc, which
    // changes no bit (unless v_j is ±inf or NaN, where PyTorch's masked product gives NaN), so every row
    // keeps the bits of the full tile. bf16 keeps the full tile (its pairs form rounds the tile at once).
    const bool tri = diag && !BF;
    const auto nkv = [&](int v) { return tri ? std::clamp<int64_t>(i0 + 16 * v + 16 - j0, 0, nk) : nk; };
    if (!tri) {
      gemm_small<false, BF>(nk, Br, Dk, hd.k + j0 * hd.k_sl, hd.k_sl, 1, qt, Br, st, Br);  // Sᵀ = K·Qᵀ
    } else {  // Sᵀ by 16 keys [j0 + c, j0 + c + 16), against the query vectors that see them: v ≥ v_min
      for (int64_t c = 0; c < nk; c += 16) {
        const int64_t x = j0 + c - i0 - 15;  // v_min = ⌈x / 16⌉, from 0
        const int64_t v_min = x <= 0 ? 0 : (x + 15) / 16;
        gemm_small<false>(std::min<int64_t>(16, nk - c), 16 * (NVQ - v_min), Dk, hd.k + (j0 + c) * hd.k_sl, hd.k_sl, 1,
                          qt + 16 * v_min, Br, st + c * Br + 16 * v_min, Br);
      }
    }
    // Query vector v's scores over its first nkj keys: scale, masks, the running max and sum, drop(P) stored.
    const auto vector_softmax = [&](int v, int64_t nkj) {
      // s_ij = scale·⟨q_i,k_j⟩ + mask(i,j) + kpm(j), −inf where causal and j > i; m_tile = max_j.
      __m512 mt = neg_inf;
      for (int64_t j = 0; j < nkj; ++j) {
        float* sj = st + j * Br + 16 * v;
        __m512 s = _mm512_loadu_ps(sj);
        if (hd.mask) {
          // The scores are transposed: this vector is one key j against 16 consecutive queries
          // i = i0 + 16v + lane, so mask(i, j) for its lanes is a column of the row-major (L,S) mask,
          // one element every S floats: a gather at lane·S (lane_S, scaled by 4 bytes) from
          // mask(i0 + 16v, j0 + j). Lanes past the tile's last query (not in valid) read nothing, 0.
          const __m512 mk = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid[v], lane_S,
                                                     hd.mask + (i0 + 16 * v) * S + j0 + j, 4);
          s = _mm512_fmadd_ps(s, scale, mk);
        } else {
          s = _mm512_mul_ps(s, scale);
        }
        if (hd.kpm) s = _mm512_add_ps(s, _mm512_set1_ps(hd.kpm[j0 + j]));
        if (diag) {
          const __mmask16 above =
              _mm512_cmplt_epi32_mask(row[v], _mm512_set1_epi32(static_cast<int>(j0 + j)));
          s = _mm512_mask_mov_ps(s, above, neg_inf);
        }
        _mm512_storeu_ps(sj, s);
        mt = _mm512_max_ps(mt, s);
      }
      // Online softmax: m_new = max(m, m_tile); rescale by exp(m − m_new). While a row has seen only
      // masked keys m_new = −inf; subtracting 0 instead keeps exp(−inf − 0) = 0 (not NaN).
      const __m512 m_new = _mm512_max_ps(m[v], mt);
      const __m512 m_use =
          _mm512_mask_mov_ps(m_new, _mm512_cmpeq_ps_mask(m_new, neg_inf), _mm512_setzero_ps());
      const __m512 a = exp_ps(_mm512_sub_ps(m[v], m_use));
      // l ← l·exp(m_old − m_new) + Σ_j exp(s_ij − m_new), undropped: lsum adds each e before the
      // dropout mask is applied, because dropout acts on softmax's output p = e/l, so the normaliser
      // l must not see the mask. Only the e stored for the product with V are dropped (and scaled).
      __m512 lsum = _mm512_setzero_ps();
      const uint64_t cbase = dr.offset + static_cast<uint64_t>((hd.bh * p.L + i0 + 16 * v) * S + j0);
      for (int64_t j = 0; j < nkj; ++j) {
        float* sj = st + j * Br + 16 * v;
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(sj), m_use));
        lsum = _mm512_add_ps(lsum, e);
        if (dr.on) {
          const __mmask16 keep = drop_mask.keep(cbase + j);
          e = _mm512_maskz_mul_ps(keep, e, _mm512_set1_ps(dr.inv_keep));
        }
        _mm512_storeu_ps(sj, e);
      }
      l[v] = _mm512_fmadd_ps(l[v], a, lsum);
      m[v] = m_new;
      _mm512_storeu_ps(alpha + 16 * v, a);
    };
    if (tri) {
      for (int v = 0; v < NVQ; ++v) vector_softmax(v, nkv(v));
    } else {  // every vector over the whole tile (a full tile: nkv(v) would be nk for each)
      for (int v = 0; v < NVQ; ++v) vector_softmax(v, nk);
    }
    // acc = diag(alpha)·acc + drop(P)·V_tile
    for (int64_t i = 0; i < ni; ++i) scale_row(acc + i * Dv, alpha[i], Dv);
    if constexpr (BF) {  // key pairs: j0 is even (kBc is)
      to_bf16_pairs(st, Br, nk, Br, pw, Br);
      gemm_small<true, true>(ni, Dv, half_up(nk), pw, 1, Br, hd.v + j0 / 2 * hd.v_sl, hd.v_sl, acc, Dv);
    } else if (tri) {  // each vector's rows over its own keys
      for (int v = 0; v < NVQ && 16 * v < ni; ++v)
        gemm_small<true>(std::min<int64_t>(16, ni - 16 * v), Dv, nkv(v), st + 16 * v, 1, Br, hd.v + j0 * hd.v_sl,
                         hd.v_sl, acc + 16 * v * Dv, Dv);
    } else {
      gemm_small<true>(ni, Dv, nk, st, 1, Br, hd.v + j0 * hd.v_sl, hd.v_sl, acc, Dv);
    }
  }

  // The rows' maxima and sums out of their vectors, for write_rows.
  alignas(64) float mm[64], ll[64];
  for (int v = 0; v < NVQ; ++v) {
    _mm512_store_ps(mm + 16 * v, m[v]);
    _mm512_store_ps(ll + 16 * v, l[v]);
  }
  write_rows(p, hd, i0, ni, acc, mm, ll);
}

// ---- forward, a few query rows (decoding) -----------------------------------------------------------
// A decoded token asks for one query row (or a few: beams, a short batch) against every cached key. The
// tiles above would put those rows in the 16 lanes of Sᵀ = K·Qᵀ, most lanes padding, and run the softmax
// bookkeeping once per key for 16 lanes. Here the keys are the lanes: each key tile is transposed once
// through registers (Kᵀ, Dh × Bc; transpose_block) and a row's 64 scores are 4 vectors of FMA chains over
// d. Every number is the tile path's: a score is the same chain (c = fma(k_jd, q_d, c) in increasing d
// from 0), then the same scale, mask, key padding and causal cut, the same running max and exp_ps, the
// same sum in increasing j, rescale and product with V (gemm_small, one chain per output in increasing
// j). So a decoded row equals that row of a full forward bit for bit (AttentionKernel.RowPathEqualsTilePath,
// AttentionCache.StepEqualsFullCausalForwardPositionByPosition). Float32 products without dropout only:
// bf16 and dropout (training, long L) take the tiles.
constexpr int64_t kRowPathRows = 8;

// The tile path's max over the scores of one tile, m_t = max_ps(…max_ps(max_ps(−inf, s_0), s_1)…, s_{n−1})
// (max_ps(a, b) = a > b ? a : b). A tree of vmaxps gives the same value whenever no score is NaN and the
// maximum is not zero (equal nonzero floats have equal bits); otherwise the fold itself is run, in key order.
inline float tile_max(const __m512 s[4], const float* stored, int64_t nk) {
  const __m512 t = _mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3]));
  const float m = _mm512_reduce_max_ps(t);
  __mmask16 nan = 0;
  for (int g = 0; g < 4; ++g) nan |= _mm512_cmp_ps_mask(s[g], s[g], _CMP_UNORD_Q);
  if (nan == 0 && m != 0.0f) return m;
  float f = -kInf;
  for (int64_t j = 0; j < nk; ++j) f = f > stored[j] ? f : stored[j];
  return f;
}

// Query rows [i0, i0 + ni) of head hd, ni ≤ kRowPathRows; p.bf16 and dropout off.
__attribute__((noinline)) void forward_rows(const AttentionParams& p, const Head& hd, int64_t i0, int64_t ni) {
  const int64_t Dh = p.Dh, Dv = p.dv(), S = p.S;
  float* kt = tl_scratch.get(round16(Dh * kBc) + ni * kBc + round16(ni * Dv));  // (Dh, Bc) K_tileᵀ
  float* e = kt + round16(Dh * kBc);  // (ni, Bc): row i's scores, then exp(s_ij − m_i)
  float* acc = e + ni * kBc;          // (ni, Dv): Σ_j exp(s_ij − m_i) v_j
  std::fill(acc, acc + ni * Dv, 0.0f);
  float m[kRowPathRows], l[kRowPathRows];
  std::fill(m, m + ni, -kInf);
  std::fill(l, l + ni, 0.0f);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 scale = _mm512_set1_ps(p.scale), neg_inf = _mm512_set1_ps(-kInf);

  const int64_t jend = p.causal ? std::min(S, i0 + ni) : S;  // as the tile of these rows would
  for (int64_t j0 = 0; j0 < jend; j0 += kBc) {
    const int64_t nk = std::min(kBc, jend - j0);
    transpose_block(hd.k + j0 * hd.k_sl, hd.k_sl, nk, Dh, kt, kBc);  // columns ≥ nk are not written
    __mmask16 in[4];  // lanes of keys < nk
    for (int g = 0; g < 4; ++g) in[g] = first_n(nk - 16 * g);
    for (int64_t r = 0; r < ni; ++r) {
      const int64_t i = i0 + r;
      const float* qi = hd.q + i * hd.q_sl;
      __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int64_t d = 0; d < Dh; ++d) {
        const __m512 qd = _mm512_set1_ps(qi[d]);
        const float* kd = kt + d * kBc;
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) s[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(in[g], kd + 16 * g), qd, s[g]);
      }
      // s_ij = scale·⟨q_i,k_j⟩ + mask(i,j) + kpm(j), −inf where causal and j > i, and past the tile's keys.
      float* ei = e + r * kBc;
      for (int g = 0; g < 4; ++g) {
        __m512 x = s[g];
        if (hd.mask) {
          x = _mm512_fmadd_ps(x, scale, _mm512_maskz_loadu_ps(in[g], hd.mask + i * S + j0 + 16 * g));
        } else {
          x = _mm512_mul_ps(x, scale);
        }
        if (hd.kpm) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(in[g], hd.kpm + j0 + 16 * g));
        if (p.causal) {
          const __m512i j = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(j0 + 16 * g)));
          x = _mm512_mask_mov_ps(x, _mm512_cmpgt_epi32_mask(j, _mm512_set1_epi32(static_cast<int>(i))), neg_inf);
        }
        s[g] = _mm512_mask_mov_ps(neg_inf, in[g], x);
        _mm512_storeu_ps(ei + 16 * g, s[g]);
      }
      // Online softmax, as the tiles run it (see forward_tile).
      const float mt = tile_max(s, ei, nk);
      const float m_new = m[r] > mt ? m[r] : mt;
      const float m_use = m_new == -kInf ? 0.0f : m_new;
      const float a = _mm512_cvtss_f32(exp_ps(_mm512_set1_ps(m[r] - m_use)));
      const __m512 mu = _mm512_set1_ps(m_use);
      for (int g = 0; g < 4; ++g) _mm512_storeu_ps(ei + 16 * g, exp_ps(_mm512_sub_ps(s[g], mu)));
      float lsum = 0.0f;
      for (int64_t j = 0; j < nk; ++j) lsum += ei[j];
      l[r] = std::fma(l[r], a, lsum);
      m[r] = m_new;
      scale_row(acc + r * Dv, a, Dv);
    }
    gemm_small<true>(ni, Dv, nk, e, kBc, 1, hd.v + j0 * hd.v_sl, hd.v_sl, acc, Dv);  // acc += P·V_tile
  }

  write_rows(p, hd, i0, ni, acc, m, l);
}

// ---- backward -------------------------------------------------------------------------------------
struct BackwardCall {
  const AttentionParams& p;
  const Layout& lt;  // q, k, v, dout as read (maybe packed), o, and dq as accumulated
  Dropout dr;
  float *dk, *dv;    // written in the caller's layout (p's k and v strides), once per row
};

// Per-thread buffers of the backward for one key tile.
struct BackwardScratch {
  float* kt;      // (Dh, Bc) K_tileᵀ
  float* vt;      // (Dv, Bc) V_tileᵀ
  float* sb;      // (Br, Bc) scores, then drop(P)
  float* dpb;     // (Br, Bc) dP, then scale·dS
  float* dk_acc;  // (Bc, Dh)
  float* dv_acc;  // (Bc, Dv)
  float* D;       // (L) D_i = ⟨do_i, o_i⟩
  // bf16: kt, vt hold the key tile's rows forms transposed, (⌈Dh/2⌉, Bc) and (⌈Dv/2⌉, Bc) words, and
  float* pw;      // (Br/2, Bc) drop(P) in the pairs form over queries
  float* dsp;     // (Br/2, Bc) scale·dS in the pairs form over queries
  float* dsw;     // (Br, Bc/2) scale·dS in the rows form (pairs over keys)
  explicit BackwardScratch(const AttentionParams& p) {
    const size_t t = round16(p.Dh * kBc), tv = round16(p.dv() * kBc), tb = p.bf16 ? kBr * kBc / 2 : 0;
    kt = tl_scratch.get(2 * t + 2 * tv + 2 * kBr * kBc + round16(p.L) + 3 * tb);
    vt = kt + t;
    sb = vt + tv;
    dpb = sb + kBr * kBc;
    dk_acc = dpb + kBr * kBc;
    dv_acc = dk_acc + t;
    D = dv_acc + tv;
    pw = D + round16(p.L);
    dsp = pw + tb;
    dsw = dsp + tb;
  }
};

// D_i = ⟨do_i, o_i⟩ for rows [i_begin, i_end) of head hd (the same function in every scheme).
void compute_D(const BackwardCall& c, const Head& hd, int64_t i_begin, int64_t i_end, float* D) {
  for (int64_t i = i_begin; i < i_end; ++i)
    D[i] = dot(hd.dout + i * hd.do_sl, hd.o + i * hd.o_sl, c.p.dv());
}

// Queries [i0, i0+ni) against keys [j0, j0+nk) (ws.kt, ws.vt hold that key tile). Adds the tile's
// share to ws.dk_acc/dv_acc (kFirst: overwrites them, the first query tile of the key tile), and
// to the rows of hd.dq when dq.
// BF (AttentionParams::bf16): the five products take the bfloat16 forms of Layout (hd.q, hd.k, hd.v the
// rows forms; hd.qp, hd.kp, hd.dop the pairs forms, hd.dow dout's rows form), and drop(P) and scale·dS are
// rounded once per pair of tiles; S has the forward's bits (the same pairs in the same order).
enum class DkDv { kNone, kFirst, kAccumulate };
template <bool BF>
__attribute__((noinline)) void backward_pair(const BackwardCall& c, const Head& hd, int64_t i0, int64_t ni,
                                             int64_t j0, int64_t nk, const BackwardScratch& ws, DkDv dkdv, bool dq) {
  const AttentionParams& p = c.p;
  const int64_t Dh = p.Dh, Dv = p.dv(), S = p.S;
  const float* qi = hd.q + i0 * hd.q_sl;
  const float* doi = hd.dout + i0 * hd.do_sl;
  // S(ni,nk) = Q·K_tileᵀ (unscaled), dP(ni,nk) = dO·V_tileᵀ, computed over nk rounded up to 16.
  const int64_t nk16 = 16 * ((nk + 15) / 16);
  if constexpr (BF) {
    gemm_small<false, true>(ni, nk16, half_up(Dh), qi, hd.q_sl, 1, ws.kt, kBc, ws.sb, kBc);
    gemm_small<false, true>(ni, nk16, half_up(Dv), hd.dow + i0 * hd.dow_sl, hd.dow_sl, 1, ws.vt, kBc, ws.dpb, kBc);
  } else {
    gemm_small<false>(ni, nk16, Dh, qi, hd.q_sl, 1, ws.kt, kBc, ws.sb, kBc);
    gemm_small<false>(ni, nk16, Dv, doi, hd.do_sl, 1, ws.vt, kBc, ws.dpb, kBc);
  }

  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  DropoutMask16 drop_mask = c.dr.lanes(1);
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(-kInf);
  const bool diag = p.causal && j0 + nk - 1 > i0;
  const int64_t nvk = (nk + 15) / 16;
  for (int64_t i = 0; i < ni; ++i) {
    const int64_t ia = i0 + i;
    const float lse = p.lse[hd.bh * p.L + ia];
    // A row with no unmasked key (lse = −inf) gets p = exp(s − (+inf)) = 0: no gradient, no NaN.
    const __m512 lse_v = _mm512_set1_ps(lse == -kInf ? kInf : lse);
    const __m512 Di = _mm512_set1_ps(ws.D[ia]);  // D_i in every lane
    const uint64_t cbase = c.dr.offset + static_cast<uint64_t>((hd.bh * p.L + ia) * S + j0);
    for (int64_t v = 0; v < nvk; ++v) {
      const __mmask16 jvalid = first_n(nk - 16 * v);
      float* sp = ws.sb + i * kBc + 16 * v;
      float* dpp = ws.dpb + i * kBc + 16 * v;
      __m512 s = _mm512_loadu_ps(sp);
      if (hd.mask) {
        s = _mm512_fmadd_ps(s, scale, _mm512_maskz_loadu_ps(jvalid, hd.mask + ia * S + j0 + 16 * v));
      } else {
        s = _mm512_mul_ps(s, scale);
      }
      if (hd.kpm) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(jvalid, hd.kpm + j0 + 16 * v));
      if (diag) {
        const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(j0 + 16 * v)));
        const __mmask16 above = _mm512_cmpgt_epi32_mask(col, _mm512_set1_epi32(static_cast<int>(ia)));
        s = _mm512_mask_mov_ps(s, above, neg_inf);
      }
      const __m512 pe = _mm512_maskz_mov_ps(jvalid, exp_ps(_mm512_sub_ps(s, lse_v)));
      __m512 dp = _mm512_loadu_ps(dpp);
      __m512 pd = pe;
      if (c.dr.on) {
        const __mmask16 keep = drop_mask.keep(cbase + 16 * v);
        const __m512 ik = _mm512_set1_ps(c.dr.inv_keep);
        pd = _mm512_maskz_mul_ps(keep, pe, ik);
        dp = _mm512_maskz_mul_ps(keep, dp, ik);
      }
      // scale·ds_ij = scale·(p_ij·(dp_ij − D_i))
      const __m512 ds = _mm512_mul_ps(scale, _mm512_mul_ps(pe, _mm512_sub_ps(dp, Di)));
      _mm512_storeu_ps(sp, pd);
      _mm512_storeu_ps(dpp, ds);
    }
  }
  if constexpr (BF) {
    // Query pairs: i0 is even (kBr is). The columns past nk are zero (masked above), so rounding
    // whole 16-wide blocks is exact padding.
    const int64_t ni2 = half_up(ni);
    if (dkdv != DkDv::kNone) {
      to_bf16_pairs(ws.sb, kBc, ni, nk16, ws.pw, kBc);
      to_bf16_pairs(ws.dpb, kBc, ni, nk16, ws.dsp, kBc);
      const float* dop = hd.dop + i0 / 2 * hd.dop_sl;
      const float* qp = hd.qp + i0 / 2 * hd.qp_sl;
      if (dkdv == DkDv::kFirst) {
        gemm_small<false, true>(nk, Dv, ni2, ws.pw, 1, kBc, dop, hd.dop_sl, ws.dv_acc, Dv);
        gemm_small<false, true>(nk, Dh, ni2, ws.dsp, 1, kBc, qp, hd.qp_sl, ws.dk_acc, Dh);
      } else {
        gemm_small<true, true>(nk, Dv, ni2, ws.pw, 1, kBc, dop, hd.dop_sl, ws.dv_acc, Dv);
        gemm_small<true, true>(nk, Dh, ni2, ws.dsp, 1, kBc, qp, hd.qp_sl, ws.dk_acc, Dh);
      }
    }
    if (dq) {
      to_bf16_rows(ws.dpb, kBc, ni, nk16, ws.dsw, kBc / 2);
      const float* kp = hd.kp + j0 / 2 * hd.kp_sl;
      float* dqi = hd.dq + i0 * hd.dq_sl;
      if (j0 == 0) {
        gemm_small<false, true>(ni, Dh, half_up(nk), ws.dsw, kBc / 2, 1, kp, hd.kp_sl, dqi, hd.dq_sl);
      } else {
        gemm_small<true, true>(ni, Dh, half_up(nk), ws.dsw, kBc / 2, 1, kp, hd.kp_sl, dqi, hd.dq_sl);
      }
    }
    return;
  }
  if (dkdv == DkDv::kFirst) {  // the same FMA chains as accumulating onto zeros
    gemm_small<false>(nk, Dv, ni, ws.sb, 1, kBc, doi, hd.do_sl, ws.dv_acc, Dv);
    gemm_small<false>(nk, Dh, ni, ws.dpb, 1, kBc, qi, hd.q_sl, ws.dk_acc, Dh);
  } else if (dkdv == DkDv::kAccumulate) {
    // dv(nk,Dv) += drop(P)ᵀ·dO;  dk(nk,Dh) += (scale·dS)ᵀ·Q
    gemm_small<true>(nk, Dv, ni, ws.sb, 1, kBc, doi, hd.do_sl, ws.dv_acc, Dv);
    gemm_small<true>(nk, Dh, ni, ws.dpb, 1, kBc, qi, hd.q_sl, ws.dk_acc, Dh);
  }
  if (dq) {
    // dq(ni,Dh) += (scale·dS)·K_tile. Key tile 0 is every query row's first (causal too), so it
    // overwrites dq instead of adding to a zero fill: the same FMA chains, one pass less.
    const float* kj = hd.k + j0 * hd.k_sl;
    float* dqi = hd.dq + i0 * hd.dq_sl;
    if (j0 == 0) {
      gemm_small<false>(ni, Dh, nk, ws.dpb, kBc, 1, kj, hd.k_sl, dqi, hd.dq_sl);
    } else {
      gemm_small<true>(ni, Dh, nk, ws.dpb, kBc, 1, kj, hd.k_sl, dqi, hd.dq_sl);
    }
  }
}

// K_tileᵀ, V_tileᵀ (bf16: of the rows forms, word by word).
void pack_key_tile(const AttentionParams& p, const Head& hd, int64_t j0, int64_t nk,
                   const BackwardScratch& ws) {
  const int64_t dk = p.bf16 ? half_up(p.Dh) : p.Dh, dv = p.bf16 ? half_up(p.dv()) : p.dv();
  pack_transposed(hd.k + j0 * hd.k_sl, hd.k_sl, nk, dk, ws.kt, kBc);
  pack_transposed(hd.v + j0 * hd.v_sl, hd.v_sl, nk, dv, ws.vt, kBc);
}

// Query rows per piece of a float32 pair on a causal mask's diagonal (backward_pair_of).
constexpr int64_t kCausalRows = 16;

// backward_pair with BF = p.bf16.
// In float32 a pair on a causal mask's diagonal (it holds some j > i) is a triangle: it runs as pieces of
// kCausalRows query rows, each over the keys its last row sees, j < i0 + s + ns. The keys left out would add
// exactly 0 (p_ij = 0, so ds_ij = 0) to every chain, and each
// dk, dv and dq chain still runs over i or j in increasing order, so the bits are the full pair's. The
// pieces add into dk_acc and dv_acc: for the key tile's first pair these start as zeros (the same chains
// as kFirst's).
void backward_pair_of(const BackwardCall& c, const Head& hd, int64_t i0, int64_t ni, int64_t j0, int64_t nk,
                      const BackwardScratch& ws, DkDv dkdv, bool dq) {
  if (c.p.bf16) {
    backward_pair<true>(c, hd, i0, ni, j0, nk, ws, dkdv, dq);
    return;
  }
  if (!c.p.causal || j0 + nk - 1 <= i0 || ni <= kCausalRows) {
    backward_pair<false>(c, hd, i0, ni, j0, nk, ws, dkdv, dq);
    return;
  }
  if (dkdv == DkDv::kFirst) {
    std::fill(ws.dk_acc, ws.dk_acc + nk * c.p.Dh, 0.0f);
    std::fill(ws.dv_acc, ws.dv_acc + nk * c.p.dv(), 0.0f);
    dkdv = DkDv::kAccumulate;
  }
  for (int64_t s = 0; s < ni; s += kCausalRows) {
    const int64_t ns = std::min(kCausalRows, ni - s);
    const int64_t seen = std::min(nk, i0 + s + ns - j0);  // keys j0 … j0 + seen − 1
    if (seen > 0) backward_pair<false>(c, hd, i0 + s, ns, j0, seen, ws, dkdv, dq);
  }
}

// First row of the first query tile that can see key j0 (causal: earlier query tiles are fully
// masked). Key j0 is first seen by query i = j0, which lies in the tile starting at ⌊j0/kBr⌋·kBr —
// correct only because every backward query tile starts at a multiple of kBr (backward_key_tile steps
// from here by kBr; scheme 2 passes backward_query_tile i0 = (t mod nqt)·kBr). With kBc = kBr, j0
// (a multiple of kBc) is already one, and the result is j0 itself.
inline int64_t first_query_tile_row(const AttentionParams& p, int64_t j0) {
  return p.causal ? (j0 / kBr) * kBr : 0;
}

// dk, dv of one key tile: Σ over query tiles in increasing order. Adds dq too when dq.
void backward_key_tile(const BackwardCall& c, const Head& hd, int64_t j0,
                       const BackwardScratch& ws, bool dq) {
  const AttentionParams& p = c.p;
  const int64_t Dh = p.Dh, Dv = p.dv(), nk = std::min(kBc, p.S - j0);
  pack_key_tile(p, hd, j0, nk, ws);
  const int64_t i_first = first_query_tile_row(p, j0);
  for (int64_t i0 = i_first; i0 < p.L; i0 += kBr)
    backward_pair_of(c, hd, i0, std::min(kBr, p.L - i0), j0, nk, ws,
                  i0 == i_first ? DkDv::kFirst : DkDv::kAccumulate, dq);
  if (i_first >= p.L) {  // no query sees these keys (causal, S > L): zero gradients
    std::fill(ws.dk_acc, ws.dk_acc + nk * Dh, 0.0f);
    std::fill(ws.dv_acc, ws.dv_acc + nk * Dv, 0.0f);
  }
  float* dkb = c.dk + hd.b * p.k_sb + hd.h * Dh;
  float* dvb = c.dv + hd.b * p.v_sb + hd.h * Dv;
  for (int64_t j = 0; j < nk; ++j) {
    std::memcpy(dkb + (j0 + j) * p.k_sl, ws.dk_acc + j * Dh, sizeof(float) * Dh);
    std::memcpy(dvb + (j0 + j) * p.v_sl, ws.dv_acc + j * Dv, sizeof(float) * Dv);
  }
}

// Scheme 1: one thread owns head bh and does everything (dq accumulated in place, key tile order).
void backward_head(const BackwardCall& c, int64_t bh) {
  const AttentionParams& p = c.p;
  const Head hd(p, c.lt, bh);
  const BackwardScratch ws(p);
  compute_D(c, hd, 0, p.L, ws.D);
  for (int64_t j0 = 0; j0 < p.S; j0 += kBc) backward_key_tile(c, hd, j0, ws, true);
}

// Scheme 2, pass B: dq of one query tile, Σ over key tiles in increasing order (same pairs and
// same per-pair arithmetic as scheme 1, so the same bits).
void backward_query_tile(const BackwardCall& c, const Head& hd, int64_t i0) {
  const AttentionParams& p = c.p;
  const BackwardScratch ws(p);
  const int64_t ni = std::min(kBr, p.L - i0);
  compute_D(c, hd, i0, i0 + ni, ws.D);
  for (int64_t j0 = 0; j0 < p.S; j0 += kBc) {
    if (first_query_tile_row(p, j0) > i0) break;  // the pairs scheme 1 skips
    const int64_t nk = std::min(kBc, p.S - j0);
    pack_key_tile(p, hd, j0, nk, ws);
    backward_pair_of(c, hd, i0, ni, j0, nk, ws, DkDv::kNone, true);
  }
}

// Below 2^21 multiply-adds (B·H·L·S·Dh; the GEMM's kSerialWork, gemm_backend.h) a parallel region
// costs more than it saves: run on the calling thread. A few query rows (decoding: one per sequence)
// read every cached key and value for two multiply-adds each, so they are bound by memory, which two
// threads read faster than one: there from 2^16 (GPT-2 small's 12 heads of 64 at one query: 86 keys).
// Results do not depend on it.
inline bool worth_threading(const AttentionParams& p) {
  const int64_t work = p.B * p.H * p.L * p.S * std::max<int64_t>(p.Dh, 1);
  if (p.L <= 16) return work >= (int64_t{1} << 16) && p.B * p.H > 1;  // one unit (B·H) per thread at least
  return work >= (int64_t{1} << 21);
}

}  // namespace

void attention_exp_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_ps(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = first_n(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void attention_forward_avx512(const AttentionParams& p) {
  const Dropout dr(p);
  const int64_t BH = p.B * p.H;
  // Query tile width: 16·NVQ ≤ 64 rows. Rows are independent in the forward, so the width changes
  // nothing numerically; short L (decoding) avoids computing padded rows.
  const int nvq = static_cast<int>(std::clamp<int64_t>((p.L + 15) / 16, 1, 4));
  const bool rows = !p.bf16 && !dr.on && p.L <= kRowPathRows;  // forward_rows: all L rows at once
  const int64_t br = rows ? kRowPathRows : 16 * nvq;
  const int64_t nqt = (p.L + br - 1) / br;
  const bool par = worth_threading(p);
  Layout lt(p);
  if (p.bf16) {  // K's rows form, V's pairs form (queries are rounded tile by tile)
    const size_t nk = bf16_words(p, p.S, p.Dh, false), nv = bf16_words(p, p.S, p.dv(), true);
    float* buf = tl_packed.get(nk + nv);
    const Bf16Pack jobs[] = {{lt.k, p.S, false, buf}, {lt.v, p.S, true, buf + nk}};
    pack_heads_bf16(jobs, p, par);
    lt.k = jobs[0].view(p);
    lt.v = jobs[1].view(p);
  } else if (!rows && worth_packing(p)) {  // forward_rows streams K and V once: nothing to keep in L2
    const size_t nk = static_cast<size_t>(BH * p.S * p.Dh), nv = static_cast<size_t>(BH * p.S * p.dv());
    float* buf = tl_packed.get(nk + nv);
    lt.k = pack_heads(lt.k, p, p.S, buf, par);
    lt.v = pack_heads(lt.v, p, p.S, buf + nk, par);
  }
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t t = 0; t < BH * nqt; ++t) {
    const Head hd(p, lt, t / nqt);
    const int64_t i0 = (t % nqt) * br;
    if (rows) {
      forward_rows(p, hd, i0, p.L);
      continue;
    }
    const auto tile = [&](auto bf) {  // forward_tile<nvq, BF>
      constexpr bool BF = decltype(bf)::value;
      switch (nvq) {
        case 1: forward_tile<1, BF>(p, dr, hd, i0); break;
        case 2: forward_tile<2, BF>(p, dr, hd, i0); break;
        case 3: forward_tile<3, BF>(p, dr, hd, i0); break;
        default: forward_tile<4, BF>(p, dr, hd, i0); break;
      }
    };
    if (p.bf16) {
      tile(std::true_type{});
    } else {
      tile(std::false_type{});
    }
  }
}

void attention_backward_avx512(const AttentionParams& p, const float* dout, float* dq, float* dk,
                               float* dv) {
  assert(p.lse != nullptr);
  const int64_t BH = p.B * p.H;
  if (p.S == 0) {  // no keys: dq = 0 (otherwise key tile 0 writes every dq row, backward_pair)
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t i = 0; i < p.L; ++i)
        std::fill_n(dq + (bh / p.H) * p.q_sb + i * p.q_sl + (bh % p.H) * p.Dh, p.Dh, 0.0f);
    return;
  }
  const bool par = worth_threading(p);
  const int64_t nth = omp_in_parallel() || !par ? 1 : omp_get_max_threads();
  Layout lt(p);
  lt.dout = {dout, p.o_sb, p.dv(), p.o_sl};
  lt.dq = {dq, p.q_sb, p.Dh, p.q_sl};
  const bool packed = worth_packing(p);
  if (p.bf16) {
    // The bfloat16 forms the five products read (sizes in words); dout stays float32 for D_i, and dq is
    // accumulated packed (float32) when worth_packing, like the float32 path's.
    const size_t nqw = bf16_words(p, p.L, p.Dh, false), nqp = bf16_words(p, p.L, p.Dh, true);
    const size_t nkw = bf16_words(p, p.S, p.Dh, false), nkp = bf16_words(p, p.S, p.Dh, true);
    const size_t nvw = bf16_words(p, p.S, p.dv(), false);
    const size_t ndw = bf16_words(p, p.L, p.dv(), false), ndp = bf16_words(p, p.L, p.dv(), true);
    const size_t nq = packed ? static_cast<size_t>(BH * p.L * p.Dh) : 0;
    float* buf = tl_packed.get(nqw + nqp + nkw + nkp + nvw + ndw + ndp + nq);
    float* const qp = buf;
    float* const qw = qp + nqp;
    float* const kp = qw + nqw;
    float* const kw = kp + nkp;
    float* const vw = kw + nkw;
    float* const dp = vw + nvw;
    float* const dw = dp + ndp;
    const Bf16Pack jobs[] = {{lt.q, p.L, true, qp},    {lt.q, p.L, false, qw}, {lt.k, p.S, true, kp},
                             {lt.k, p.S, false, kw},   {lt.v, p.S, false, vw}, {lt.dout, p.L, true, dp},
                             {lt.dout, p.L, false, dw}};
    pack_heads_bf16(jobs, p, par);
    lt.qp = jobs[0].view(p);
    lt.q = jobs[1].view(p);
    lt.kp = jobs[2].view(p);
    lt.k = jobs[3].view(p);
    lt.v = jobs[4].view(p);
    lt.dop = jobs[5].view(p);
    lt.dow = jobs[6].view(p);
    if (packed) lt.dq = packed_view(dw + ndw, p, p.L, p.Dh);
  } else if (packed) {  // q, k, v, dout read packed; dq accumulated packed, copied out at the end
    // q, dq (B,H,L,Dh), dout (B,H,L,Dv), k (B,H,S,Dh), v (B,H,S,Dv)
    const size_t nq = static_cast<size_t>(BH * p.L * p.Dh), ndo = static_cast<size_t>(BH * p.L * p.dv());
    const size_t nk = static_cast<size_t>(BH * p.S * p.Dh), nv = static_cast<size_t>(BH * p.S * p.dv());
    float* buf = tl_packed.get(2 * nq + ndo + nk + nv);
    lt.q = pack_heads(lt.q, p, p.L, buf, par);
    lt.dout = pack_heads(lt.dout, p, p.L, buf + nq, par);
    lt.k = pack_heads(lt.k, p, p.S, buf + nq + ndo, par);
    lt.v = pack_heads(lt.v, p, p.S, buf + nq + ndo + nk, par);
    lt.dq = packed_view(buf + nq + ndo + nk + nv, p, p.L, p.Dh);
  }
  const BackwardCall c{p, lt, Dropout(p), dk, dv};
  if (BH >= nth) {
    // Scheme 1: one head per task, no recomputation: preferred whenever there are at least as many
    // heads as threads, even when the last round leaves threads idle (B·H = 3 on 2 threads), since
    // scheme 2 computes S and dP in both of its passes.
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t bh = 0; bh < BH; ++bh) backward_head(c, bh);
  } else {
    // Scheme 2: fewer heads than threads. Pass A: (bh, key tile) → dk, dv; pass B: (bh, query
    // tile) → dq. Recomputes S and dP once more, but keeps all threads busy and deterministic.
    const int64_t nkt = (p.S + kBc - 1) / kBc;
    const int64_t nqt = (p.L + kBr - 1) / kBr;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * nkt; ++t) {
      const Head hd(p, lt, t / nkt);
      const BackwardScratch ws(p);
      const int64_t j0 = (t % nkt) * kBc;
      compute_D(c, hd, first_query_tile_row(p, j0), p.L, ws.D);
      backward_key_tile(c, hd, j0, ws, false);
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * nqt; ++t)
      backward_query_tile(c, Head(p, lt, t / nqt), (t % nqt) * kBr);
  }
  if (packed)  // dq (B, H, L, Dh) → the caller's layout
    copy_heads(packed_view<const float>(lt.dq.base, p, p.L, p.Dh), View<float>{dq, p.q_sb, p.Dh, p.q_sl}, p,
               p.L, p.Dh, par);
}

}  // namespace tfm::kernels
