// src/kernels/attention_avx2.cc — attention's forward for CPUs with AVX2 but not AVX-512 (an AVX2-only
// EPYC, say), compiled with AVX2 and FMA flags (CMakeLists.txt, the *_avx2.cc files). The backward is
// attention_backward_gemm (attention_gemm.cc), on oneDNN sgemm calls.
//
// Per (b, h) and tile of query rows, the keys of the head are transposed once into kT (Dh, S), then each
// query row on its own:
//   s_j = scale · Σ_d q_d·kT[d][j] + mask + key padding   (−inf where causal and j > i, not computed)
//   mx = max_j s_j;  e_j = exp(s_j − mx);  l = Σ_j e_j;  lse = mx + log l;  p_j = e_j · keep_j / l
//   o = Σ_j p_j · v_j
// The dot products run with the keys in the lanes (for each d, an fma of q_d into every s_j), and o as an
// fma of p_j·v_j into every d: each output element is one fma chain in a fixed order (d, or j, ascending)
// whichever lanes hold it, so a row's o and lse are the same bits whatever other rows the call has — a
// decoding step (one query row against the cached keys) equals the full causal forward's row, as the flash
// kernel's rows do (tests/ops/attention_cache_test.cc). Rows whose keys are all masked give o = 0 and
// lse = −inf. Dropout: the counter rule of kernels.h, as the twin.
// Determinism: (b, h, tile) over the threads, each a fixed sequence on its own rows. Memory: per thread
// kT (Dh·S floats) and one row of scores (S), thread-local, grown once.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kTileRows = 64;  // query rows per job: the transposed keys serve this many rows

float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& b = buf[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

}  // namespace

void attention_forward_avx2(const AttentionParams& p) {
  const int64_t S = p.S, Dh = p.Dh, Dv = p.dv(), BH = p.B * p.H;
  if (p.L <= 0 || BH <= 0) return;
  const int64_t mt = std::min(kTileRows, p.L), tiles = (p.L + mt - 1) / mt;
  const bool dropout = p.dropout_p > 0.0f;
  const float inv_keep = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
  auto run = [&](int64_t job) {
    const int64_t bh = job / tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = (job % tiles) * mt, i1 = std::min(p.L, i0 + mt);
    // kT (Dh, S): kT[d·S + j] = k_j[d]
    float* kT = scratch(0, Dh * S);
    const float* k = p.k + b * p.k_sb + h * Dh;
    for (int64_t j = 0; j < S; ++j)
      for (int64_t d = 0; d < Dh; ++d) kT[d * S + j] = k[j * p.k_sl + d];
    const float* v = p.v + b * p.v_sb + h * Dv;  // (S, Dv) at v_sl
    float* s = scratch(1, S);
    for (int64_t i = i0; i < i1; ++i) {
      const float* q = p.q + b * p.q_sb + i * p.q_sl + h * Dh;
      float* o = p.o + b * p.o_sb + i * p.o_sl + h * Dv;
      const int64_t n = p.causal ? std::min(S, i + 1) : S;  // keys j < n; the rest are −inf
      std::fill(s, s + n, 0.0f);
      for (int64_t d = 0; d < Dh; ++d) {
        const float qd = q[d];
        const float* kd = kT + d * S;
        for (int64_t j = 0; j < n; ++j) s[j] = std::fma(qd, kd[j], s[j]);
      }
      for (int64_t j = 0; j < n; ++j) s[j] *= p.scale;
      if (p.mask != nullptr) {
        const float* m = p.mask + bh * p.mask_sbh + i * S;
        for (int64_t j = 0; j < n; ++j) s[j] += m[j];
      }
      if (p.kpm != nullptr) {
        const float* m = p.kpm + b * S;
        for (int64_t j = 0; j < n; ++j) s[j] += m[j];
      }
      float mx = -kInf;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
      std::fill(o, o + Dv, 0.0f);
      if (mx == -kInf) {  // every key masked
        if (p.lse != nullptr) p.lse[bh * p.L + i] = -kInf;
        continue;
      }
      float l = 0.0f;
      for (int64_t j = 0; j < n; ++j) l += (s[j] = std::exp(s[j] - mx));
      if (p.lse != nullptr) p.lse[bh * p.L + i] = mx + std::log(l);
      const float w = 1.0f / l;
      for (int64_t j = 0; j < n; ++j) {
        float pj = s[j] * w;
        if (dropout) {
          const uint64_t counter = p.offset + static_cast<uint64_t>((bh * p.L + i) * S + j);
          pj *= dropout_keep(p.seed, counter, p.dropout_p) ? inv_keep : 0.0f;
        }
        const float* vj = v + j * p.v_sl;
        for (int64_t d = 0; d < Dv; ++d) o[d] = std::fma(pj, vj[d], o[d]);
      }
    }
  };
  const int64_t jobs = BH * tiles;
  if (jobs == 1) return run(0);
#pragma omp parallel for schedule(static)
  for (int64_t job = 0; job < jobs; ++job) run(job);
}

}  // namespace tfm::kernels
