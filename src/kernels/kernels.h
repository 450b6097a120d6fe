// src/kernels/kernels.h — the kernel layer: free functions over raw pointers and explicit sizes.
//
// Rules for everything declared here (docs/ARCHITECTURE.md):
//   * no tensor objects, no allocation beyond thread-local scratch that grows once to the largest
//     size a thread has needed (attention's tiles and packed operands, the GEMM's transposed
//     panels: the steady state allocates nothing), no exceptions but std::bad_alloc from that
//     growth; arguments are checked by the op that calls the kernel, kernels only assert in debug.
//   * every optimized kernel `foo` has a scalar twin `foo_scalar` with the same signature, compiled
//     into the library: it is the specification, the fallback and the test oracle.
//   * results do not depend on the thread count: work is split in fixed-size chunks whose reduction
//     order never changes with the number of threads.
//   * row-major everywhere; shapes use the legend B batch, T/L target (query) length, S source (key)
//     length, D model width, H heads, Dh head width, F FFN width, V vocab.
//
// To add a kernel: declare `foo` and `foo_scalar` here with the shapes in comments, put the scalar
// twin in a `*_scalar.cc` or the kernel's own .cc, the SIMD body in `*_avx512.cc` (compiled with
// AVX-512 flags by CMake), dispatch in `foo` via cpu_has_avx512(), and test both in
// tests/kernels/.
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>

namespace tfm::kernels {

// ---- CPU features and the scalar switch ----------------------------------------------------------
// TFM_FORCE_SCALAR=1 in the environment makes every dispatching kernel take its scalar twin
// (for bisecting numerical differences). Read once.
bool cpu_has_avx512();  // AVX-512F/BW/DQ/VL and not forced scalar
bool force_scalar();

// ---- GEMM -----------------------------------------------------------------------------------------
// C(M,N) = alpha * op(A)(M,K) · op(B)(K,N) + beta * C, all row-major.
// op(A) = A (M,K; lda ≥ K) or Aᵀ where A is (K,M; lda ≥ M); likewise B.
// beta == 0 overwrites C (C may hold garbage, even NaN); beta == 1 accumulates. alpha == 0 or
// K == 0 reads neither A nor B: C ← beta·C, as in BLAS.
// Deterministic: the result is bitwise identical for any thread count.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_scalar(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc);
// C(M,N) = op(A)·op(B) + bias, bias (N) added to every row (a Linear layer's y = x·Wᵀ + b); bias
// may be null (then beta = 0). Bitwise gemm with alpha = beta = 1 onto C rows preset to the bias,
// but the preset is done panel by panel on the thread that computes the panel, not in a serial
// pass over C beforehand. Same thread-count independence as gemm.
void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
               int64_t lda, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// ---- Attention ------------------------------------------------------------------------------------
// Multi-head scaled dot-product attention for one call over all (b, h):
//   s_ij  = scale · ⟨q_i, k_j⟩ + mask[bh](i, j) + kpm[b](j)   (−inf where causal and j > i)
//   p_ij  = softmax_j(s_ij);   o_i = Σ_j drop(p_ij) · v_j
// Element (b, i, h, d) of q lives at q[b*q_sb + i*q_sl + h*Dh + d]; likewise k, v (index j), o.
// This stride form covers batch_first (B,L,E) (sb = L*row, sl = row), sequence-first (L,B,E)
// (sb = row, sl = B*row) and packed projections: for a packed (.., 3E) qkv buffer, q = qkv,
// k = qkv + E, v = qkv + 2E, all with row = 3E.
// A query row whose keys are all masked (every s_ij = −inf) gets o_i = 0 and lse_i = −inf, never
// NaN, and contributes no gradient.
// Dropout on p (training): element (bh, i, j) is dropped iff dropout_keep(seed, offset + ((bh*L + i)*S
// + j), p) is false; kept values are scaled by 1/(1−p). Recomputed, not stored, in the backward.
struct AttentionParams {
  int64_t B = 0, H = 0, L = 0, S = 0, Dh = 0;
  const float* q = nullptr;
  int64_t q_sb = 0, q_sl = 0;
  const float* k = nullptr;
  int64_t k_sb = 0, k_sl = 0;
  const float* v = nullptr;
  int64_t v_sb = 0, v_sl = 0;
  float* o = nullptr;  // output, same layout rule (o_sb, o_sl)
  int64_t o_sb = 0, o_sl = 0;
  // Additive float mask (−inf allowed), (L,S) row-major for each bh = b*H + h at mask + bh*mask_sbh;
  // mask_sbh = 0 for a 2-D (L,S) mask shared by all, L*S for a 3-D (B*H, L, S) mask. May be null.
  const float* mask = nullptr;
  int64_t mask_sbh = 0;
  const float* kpm = nullptr;  // additive key-padding mask (B,S), or null
  bool causal = false;         // block j > i (on top of any mask)
  float scale = 1.0f;          // usually 1/sqrt(Dh)
  float dropout_p = 0.0f;      // 0 in eval
  uint64_t seed = 0, offset = 0;
  float* lse = nullptr;  // (B,H,L) log-sum-exp of s over j, written by forward (may be null in eval)
};

// Forward: writes o (and lse if non-null). Memory O(L + S) per tile, never (L,S).
void attention_forward(const AttentionParams& p);
void attention_forward_scalar(const AttentionParams& p);

// Backward, recomputing p from q, k and the saved lse:
//   dv_j = Σ_i drop(p_ij) do_i;  dp_ij = ⟨do_i, v_j⟩·keep/(1−p);  D_i = ⟨do_i, o_i⟩
//   ds_ij = p_ij (dp_ij − D_i);  dq_i = scale Σ_j ds_ij k_j;  dk_j = scale Σ_i ds_ij q_i
// dout has o's layout; dq, dk, dv have q's, k's, v's layout (same strides) and are OVERWRITTEN on
// the (b, i, h, ·) elements they address (packed buffers: the three blocks are disjoint).
void attention_backward(const AttentionParams& p, const float* dout, float* dq, float* dk,
                        float* dv);
void attention_backward_scalar(const AttentionParams& p, const float* dout, float* dq, float* dk,
                               float* dv);

// ---- LayerNorm (PyTorch nn.LayerNorm over the last dim) -----------------------------------------
// y = (x − μ) · rstd · w + b,  μ = mean(x),  rstd = 1/sqrt(var(x) + eps) (biased variance).
// x, y (N,D); w (D); b (D) or null; mean, rstd (N) written (may be null in eval). y may alias x.
void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t N, int64_t D, float eps);
void layer_norm_forward_scalar(const float* x, const float* w, const float* b, float* y,
                               float* mean, float* rstd, int64_t N, int64_t D, float eps);
// With x̂ = (x − μ)·rstd and g = dy ⊙ w:  dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))  (overwrite);
// dw += Σ_rows dy ⊙ x̂,  db += Σ_rows dy  (accumulate; db may be null).
// μ and rstd are recomputed from x in double (the forward's exact values), not taken from the
// forward's float outputs: the formula cancels to O(eps·rstd²) when eps is not negligible against
// var (e.g. D = 2: dx = rstd·(g₁ − g₂)/2 · eps·rstd²), so a float-rounded rstd (relative error up to
// 2⁻²⁴) would come back amplified by (var + eps)/eps — 2000× at var 1, eps 1e-3.
void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw,
                         float* db, int64_t N, int64_t D, float eps);
void layer_norm_backward_scalar(const float* dy, const float* x, const float* w, float* dx,
                                float* dw, float* db, int64_t N, int64_t D, float eps);

// ---- Activations ----------------------------------------------------------------------------------
// Plain: y = f(x), x and y (N,F).  Gated: x (N,2F) = [a | b] per row, y (N,F) = a ⊙ g(b)
// (F.glu's convention: the gate is the second half).
enum class ActivationKind : uint8_t {
  ACT_RELU,       // max(x, 0)
  ACT_GELU,       // x·Φ(x) = 0.5·x·(1 + erf(x/√2))
  ACT_GELU_TANH,  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  ACT_GLU,        // a·σ(b)
  ACT_GEGLU,      // a·gelu(b)
  ACT_SWIGLU,     // a·silu(b) = a·b·σ(b)
};
bool activation_is_gated(ActivationKind k);
// y may alias x for plain activations. The backward overwrites dx (x's shape) from dy (y's shape):
// relu' = [x > 0]; gelu' = Φ(x) + x·φ(x); glu: da = dy·g(b), db = dy·a·g'(b).
void activation_forward(ActivationKind k, const float* x, float* y, int64_t N, int64_t F);
void activation_forward_scalar(ActivationKind k, const float* x, float* y, int64_t N, int64_t F);
void activation_backward(ActivationKind k, const float* dy, const float* x, float* dx, int64_t N,
                         int64_t F);
void activation_backward_scalar(ActivationKind k, const float* dy, const float* x, float* dx,
                                int64_t N, int64_t F);

// ---- Softmax cross-entropy (PyTorch F.cross_entropy, reduction over rows done by the op) --------
// logits (N,V), target (N) class ids; rows with target == ignore_index give loss 0 and grad 0.
// With ε = label_smoothing: loss_n = (1−ε)·(lse − z_t) + ε·(lse − mean_v z_v)
// Writes loss (N) and lse (N).
void cross_entropy_forward(const float* logits, const int32_t* target, float* loss, float* lse,
                           int64_t N, int64_t V, int32_t ignore_index, float label_smoothing);
// dlogits_n = scale_n · (softmax(z) − (1−ε)·onehot(t) − ε/V)  (overwrite; zero for ignored rows).
void cross_entropy_backward(const float* logits, const int32_t* target, const float* lse,
                            const float* scale, float* dlogits, int64_t N, int64_t V,
                            int32_t ignore_index, float label_smoothing);

// ---- Random numbers -------------------------------------------------------------------------------
// Counter-based: the value for index i depends only on (seed, i), so results never depend on
// thread count or on the order in which elements are visited.
uint64_t philox_hash(uint64_t seed, uint64_t counter);  // splitmix-style 64-bit mix of (seed, counter)
inline float uniform01(uint64_t seed, uint64_t counter) {  // [0, 1), 24 random bits
  return static_cast<float>(philox_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

// Dropout's own hash, 32 bits per (seed, counter), built for 32-bit SIMD lanes: it is evaluated for
// every attention probability in the forward and again in the backward, and philox_hash's 64-bit
// lanes (8 per vector, two 64-bit multiplies each) cost 10–15% of a long-sequence training step.
// counter = hi·2³² + lo: a key per (seed, hi) from philox_hash, then Wellons' "lowbias32" integer
// mix of lo with the key xored in after its first multiply (xoring it into the input instead would
// make two seeds' masks permutations of each other). Statistics: tests/kernels/rowwise_test.cc.
constexpr uint32_t kDropoutMul1 = 0x7feb352du, kDropoutMul2 = 0x846ca68bu;
inline uint32_t dropout_key(uint64_t seed, uint64_t hi) {
  return static_cast<uint32_t>(philox_hash(seed, hi) >> 32);
}
inline uint32_t dropout_mix(uint32_t lo, uint32_t key) {
  uint32_t x = (lo ^ (lo >> 16)) * kDropoutMul1;
  x ^= key;
  x = (x ^ (x >> 15)) * kDropoutMul2;
  return x ^ (x >> 16);
}
inline uint32_t dropout_hash(uint64_t seed, uint64_t counter) {
  return dropout_mix(static_cast<uint32_t>(counter), dropout_key(seed, counter >> 32));
}
// Keep iff u ≥ p for the 24-bit uniform u = (hash >> 8)·2⁻²⁴, i.e. iff hash >> 8 ≥ ceil(p·2²⁴)
// (exact: p·2²⁴ is exact in double); p ≥ 1 keeps nothing (threshold 2²⁴), p ≤ 0 everything.
inline uint32_t dropout_threshold(float p) {
  if (!(p > 0.0f)) return 0;
  if (p >= 1.0f) return 1u << 24;
  return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
}
inline bool dropout_keep(uint64_t seed, uint64_t counter, float p) {
  return (dropout_hash(seed, counter) >> 8) >= dropout_threshold(p);
}

}  // namespace tfm::kernels
