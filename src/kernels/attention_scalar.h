// src/kernels/attention_scalar.h — the scalar specification of multi-head scaled dot-product
// attention, forward and backward, as templates over the arithmetic type T.
//
// The float twins attention_forward_scalar / attention_backward_scalar (kernels.h, attention.cc)
// instantiate them with T = float; tests/kernels/attention_test.cc instantiates them with T = double
// for a finite-difference gradient check. Sizes, strides and flags come from AttentionParams
// (kernels.h); the tensors come from an AttentionScalarTensors<T>, so the same code runs on float or
// double buffers.
//
// It is written to be obviously correct, not fast: every score s_ij is recomputed from q and k
// whenever it is needed (three passes per query row: max, sum, output), so it needs no scratch
// memory at all. The fast kernel (attention_avx512.cc) must agree with it up to rounding, and
// exactly on which elements dropout removes.
//
// With AttentionParams::bf16 every product's operands are rounded to bfloat16 first (bf(), below): q and
// k in the scores, the dropped probability and v in o, dout and v in dp, the dropped probability and
// dout in dv, scale·ds and k in dq, scale·ds and q in dk; the sums stay in T. The fast kernel rounds the
// forward's probabilities before dividing by the row sum (online softmax), this spec after, so the two
// forwards differ by bfloat16 rounding there, not only by summation order. Its vdpbf16ps also adds each
// pair's odd product before the even one and takes denormal operands and sums as zero; this spec sums in
// order and keeps denormals (differences of float rounding size).
//
// To add a feature (another mask kind, say): add it to score() below and to the fast kernel's score
// step, then extend the mask cases in the test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

// The tensors of one attention call, typed T. Layout and strides are those of AttentionParams.
template <typename T>
struct AttentionScalarTensors {
  const T* q = nullptr;     // (b, i, h, d) at q[b*q_sb + i*q_sl + h*Dh + d]
  const T* k = nullptr;     // (b, j, h, d) at k[b*k_sb + j*k_sl + h*Dh + d]
  const T* v = nullptr;     // (b, j, h, d) at v[b*v_sb + j*v_sl + h*Dv + d]
  T* o = nullptr;           // (b, i, h, d) at o[b*o_sb + i*o_sl + h*Dv + d]; read by the backward
  const T* mask = nullptr;  // (L,S) at mask + bh*mask_sbh, additive, or null
  const T* kpm = nullptr;   // (B,S) additive key-padding mask, or null
  T* lse = nullptr;         // (B,H,L) log-sum-exp of the scores, or null
};

inline AttentionScalarTensors<float> attention_scalar_tensors(const AttentionParams& p) {
  AttentionScalarTensors<float> t;
  t.q = p.q;
  t.k = p.k;
  t.v = p.v;
  t.o = p.o;
  t.mask = p.mask;
  t.kpm = p.kpm;
  t.lse = p.lse;
  return t;
}

namespace attention_scalar_detail {

// Everything about one (b, h) pair that the per-row loops need.
template <typename T>
struct Head {
  const AttentionParams& p;
  const AttentionScalarTensors<T>& t;
  int64_t bh, b, h;

  // x rounded to bfloat16 (float_to_bf16, round to nearest even) when p.bf16, else x.
  T bf(T x) const {
    return p.bf16 ? static_cast<T>(bf16_to_float(float_to_bf16(static_cast<float>(x)))) : x;
  }

  const T* q(int64_t i) const { return t.q + b * p.q_sb + i * p.q_sl + h * p.Dh; }  // (Dh)
  const T* k(int64_t j) const { return t.k + b * p.k_sb + j * p.k_sl + h * p.Dh; }  // (Dh)
  const T* v(int64_t j) const { return t.v + b * p.v_sb + j * p.v_sl + h * p.dv(); }  // (Dv)
  T* o(int64_t i) const { return t.o + b * p.o_sb + i * p.o_sl + h * p.dv(); }        // (Dv)

  // s_ij = scale·⟨q_i, k_j⟩ + mask[bh](i, j) + kpm[b](j), or −inf when causal and j > i.
  T score(int64_t i, int64_t j) const {
    if (p.causal && j > i) return -std::numeric_limits<T>::infinity();
    const T* qi = q(i);
    const T* kj = k(j);
    T dot = 0;
    for (int64_t d = 0; d < p.Dh; ++d) dot += bf(qi[d]) * bf(kj[d]);
    T s = static_cast<T>(p.scale) * dot;
    if (t.mask != nullptr) s += t.mask[bh * p.mask_sbh + i * p.S + j];
    if (t.kpm != nullptr) s += t.kpm[b * p.S + j];
    return s;
  }

  // log Σ_j exp(s_ij), computed as m + log Σ_j exp(s_ij − m) with m = max_j s_ij; −inf when every
  // key of row i is masked.
  T row_lse(int64_t i) const {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < p.S; ++j) m = std::max(m, score(i, j));
    if (m == -std::numeric_limits<T>::infinity()) return m;
    T l = 0;
    for (int64_t j = 0; j < p.S; ++j) l += std::exp(score(i, j) - m);
    return m + std::log(l);
  }

  // Dropout decision for element (bh, i, j) — the counter rule of kernels.h.
  bool keep(int64_t i, int64_t j) const {
    if (!(p.dropout_p > 0.0f)) return true;
    const uint64_t counter = p.offset + static_cast<uint64_t>((bh * p.L + i) * p.S + j);
    return dropout_keep(p.seed, counter, p.dropout_p);
  }
};

}  // namespace attention_scalar_detail

// Forward: o_i = Σ_j drop(p_ij)·v_j with p_ij = exp(s_ij − lse_i); writes o and (if non-null) lse.
// nn.MultiheadAttention's inner product (torch 1.13's _scaled_dot_product_attention), up to rounding: torch scales q
// by 1/√Dh before q·kᵀ, this scales the dot product (s_ij = scale·⟨q_i, k_j⟩).
template <typename T>
void attention_forward_scalar(const AttentionParams& p, const AttentionScalarTensors<T>& t) {
  const T inv_keep = dropout_scale<T>(p.dropout_p);
  const int64_t Dv = p.dv();
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const attention_scalar_detail::Head<T> hd{p, t, bh, bh / p.H, bh % p.H};
    for (int64_t i = 0; i < p.L; ++i) {
      const T lse = hd.row_lse(i);
      if (t.lse != nullptr) t.lse[bh * p.L + i] = lse;
      T* oi = hd.o(i);  // (Dv)
      for (int64_t d = 0; d < Dv; ++d) oi[d] = 0;
      if (lse == -std::numeric_limits<T>::infinity()) continue;  // all keys masked: o_i = 0
      for (int64_t j = 0; j < p.S; ++j) {
        if (!hd.keep(i, j)) continue;
        const T pij = hd.bf(std::exp(hd.score(i, j) - lse) * inv_keep);
        const T* vj = hd.v(j);
        for (int64_t d = 0; d < Dv; ++d) oi[d] += pij * hd.bf(vj[d]);
      }
    }
  }
}

// Backward (see kernels.h): with keep_ij ∈ {0, 1/(1−p)} the dropout factor,
//   dv_j = Σ_i p_ij keep_ij do_i;  dp_ij = keep_ij ⟨do_i, v_j⟩;  D_i = ⟨do_i, o_i⟩ = Σ_j p_ij dp_ij
//   ds_ij = p_ij (dp_ij − D_i);    dq_i = scale Σ_j ds_ij k_j;  dk_j = scale Σ_i ds_ij q_i
// dq, dk, dv are overwritten. Reads o (the forward's output) for D_i, and lse when non-null
// (otherwise it recomputes it). Rows whose keys are all masked contribute nothing.
template <typename T>
void attention_backward_scalar(const AttentionParams& p, const AttentionScalarTensors<T>& t,
                               const T* dout, T* dq, T* dk, T* dv) {
  const T inv_keep = dropout_scale<T>(p.dropout_p);
  const T scale = static_cast<T>(p.scale);
  const int64_t Dv = p.dv();
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const attention_scalar_detail::Head<T> hd{p, t, bh, bh / p.H, bh % p.H};
    const int64_t qoff = hd.b * p.q_sb + hd.h * p.Dh;
    const int64_t koff = hd.b * p.k_sb + hd.h * p.Dh;
    const int64_t voff = hd.b * p.v_sb + hd.h * Dv;
    const int64_t ooff = hd.b * p.o_sb + hd.h * Dv;
    for (int64_t i = 0; i < p.L; ++i)
      for (int64_t d = 0; d < p.Dh; ++d) dq[qoff + i * p.q_sl + d] = 0;
    for (int64_t j = 0; j < p.S; ++j) {
      for (int64_t d = 0; d < p.Dh; ++d) dk[koff + j * p.k_sl + d] = 0;
      for (int64_t d = 0; d < Dv; ++d) dv[voff + j * p.v_sl + d] = 0;
    }

    for (int64_t i = 0; i < p.L; ++i) {
      const T lse = t.lse != nullptr ? t.lse[bh * p.L + i] : hd.row_lse(i);
      if (lse == -std::numeric_limits<T>::infinity()) continue;  // all keys masked: no gradient
      const T* doi = dout + ooff + i * p.o_sl;  // (Dv)
      const T* oi = hd.o(i);                    // (Dv)
      const T* qi = hd.q(i);                    // (Dh)
      T* dqi = dq + qoff + i * p.q_sl;          // (Dh)
      T D = 0;
      for (int64_t d = 0; d < Dv; ++d) D += doi[d] * oi[d];
      for (int64_t j = 0; j < p.S; ++j) {
        const T s = hd.score(i, j);
        if (s == -std::numeric_limits<T>::infinity()) continue;  // p_ij = 0
        const T pij = std::exp(s - lse);
        const T* vj = hd.v(j);
        const T* kj = hd.k(j);
        T* dkj = dk + koff + j * p.k_sl;  // (Dh)
        T* dvj = dv + voff + j * p.v_sl;  // (Dv)
        const bool kept = hd.keep(i, j);
        T dp = 0;
        if (kept) {
          T dot = 0;
          for (int64_t d = 0; d < Dv; ++d) dot += hd.bf(doi[d]) * hd.bf(vj[d]);
          dp = dot * inv_keep;
          const T w = hd.bf(pij * inv_keep);
          for (int64_t d = 0; d < Dv; ++d) dvj[d] += w * hd.bf(doi[d]);
        }
        const T g = hd.bf(scale * (pij * (dp - D)));  // scale·ds_ij
        for (int64_t d = 0; d < p.Dh; ++d) {
          dqi[d] += g * hd.bf(kj[d]);
          dkj[d] += g * hd.bf(qi[d]);
        }
      }
    }
  }
}

}  // namespace tfm::kernels
