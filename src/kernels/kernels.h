// src/kernels/kernels.h — the kernel layer's contract: free functions over raw pointers and explicit
// sizes, each with its formula, shapes, aliasing and whether it overwrites or accumulates.
//
// Rules for everything declared here (docs/ARCHITECTURE.md):
//   * no tensor objects, no allocation beyond thread-local scratch that grows once to the largest
//     size a thread has needed (attention's tiles and packed operands, the GEMM's transposed or
//     packed panels, the norms' per-chunk gradient partials: our code allocates nothing in the steady
//     state), no exceptions but std::bad_alloc from that growth; arguments are checked by the op
//     that calls the kernel, kernels only assert in debug. What does allocate, all behind the GEMMs:
//     oneDNN allocates inside its calls (sgemm's packing buffers, which keep_gemm_buffers_resident
//     keeps off the page-fault path; a matmul primitive's argument map and memory handles on each
//     panel of gemm_bf16 and gemm_packed), a primitive is created and cached on a panel shape's first
//     use, and the twins gemm_bf16_scalar and gemm_packed_scalar (the TFM_FORCE_SCALAR path and the
//     tests' oracle, never the default path) allocate their widened or rounded operands every call. Beside
//     the GEMMs, bf16 training's two fused backward passes without AVX-512 (mul_bias_grad_bf16 and
//     relu_dropout_backward_bf16_round on an AVX2 CPU, and their scalar twins) run the kernels they fuse
//     through an (N, F) float32 buffer allocated per call.
//   * names put the op first: the dispatching entry point is `<op>_forward` / `<op>_backward`, its
//     scalar twin `<same>_scalar` has the same signature and is compiled into the library (the
//     specification, the fallback and the test oracle), its AVX-512 body is `<same>_avx512`. Kernels
//     that are not one direction of an op (gemm, gemm_bias, bias_grad, transpose) are named by the
//     noun alone, with the same suffixes. No sub-namespaces: everything is tfm::kernels::<name>.
//     The templates of <op>_scalar.h carry the twins' names (cross_entropy_forward_scalar<T>, with T
//     label_smoothing too): a call with <float> is the template, one without it the float twin,
//     which runs that template. Where a kernel departs from the rule, it is for a reason:
//       - no twin of its own: gemm_bias (defined as gemm onto rows preset to the bias, which
//         TFM_FORCE_SCALAR runs over gemm_scalar: the bias is then added after the whole sum, as gemm_scalar
//         adds C; oneDNN adds C within its own blocking of K); copy_bytes and widen_rows_u8_avx2 (gemm_packed.h:
//         u8 → int16, no arithmetic; tested through gemm_packed_s8_avx2's exact sums); quantize_rows_s8 and
//         dequantize_rows_s8 (one scalar body each, run once per weight or per looked-up row).
//       - no AVX-512 body of its own: gemm, gemm_bias (oneDNN is their fast path there, gemm_backend.h;
//         their AVX2 body, gemm_avx2_serial in gemm_avx2.cc, is one panel's product, declared there too);
//         activation_forward (bias_activation_forward's body without a bias); add_layer_norm_forward
//         (add_(dropout_)forward_avx512, then layer_norm_forward_avx512, on each chunk of rows).
//       - bias_activation_forward_avx512 and activation_backward_avx512 return false for a kind they
//         do not handle (the entry point then runs the twin).
//       - bias_grad_avx512 and the template behind bias_grad_scalar take dy's row stride ld: the
//         dispatcher hands each a block of columns. So do bias_grad_bf16_avx512, mul_bias_grad_bf16_avx512
//         and relu_dropout_backward_bf16_round_avx512, which have no AVX2 body (bf16 training's fused passes:
//         without AVX-512, and under TFM_FORCE_SCALAR, their dispatchers run the kernels they fuse, one after
//         the other, so their twins are the specification and the test oracle but not the fallback).
//       - log_softmax_rows' AVX-512 body is per row, log_softmax_row_avx512, returning false on a row
//         the twin must take; its twin log_softmax_rows_scalar runs log_softmax_row_scalar
//         (cross_entropy_scalar.h, the one double log-softmax of a row, which decoding calls too).
//       - gemm_bf16, gemm_packed and convert_rows_to_bf16 are declared with their twins and bodies
//         in gemm_bf16.h and gemm_packed.h, beside the packed weight and the bfloat16 rounding they
//         share, not here.
//       - attention's bodies for CPUs without AVX-512 are attention_forward_avx2 (attention_avx2.cc) and
//         attention_backward_gemm (attention_gemm.cc: its products as single-threaded panel products,
//         gemm_backend.h's sgemm_serial, its rows' softmax in attention_avx2.cc).
//       - attention_exp_avx512 is not a kernel: it exposes attention's vector exp to its test.
//         Neither it nor exp_ps (common_avx512.h), the vector exp it wraps, has a twin: the test
//         (tests/kernels/attention_test.cc, VectorExpWithinTwoUlp) measures it against std::exp in
//         double rounded to float, ≤ 2 ulp over the normal range, plus ±inf, 0, −200 and NaN.
//       - convert_to_bf16 (gemm_bf16.h) has no twin of its own: it runs convert_rows_to_bf16 over fixed
//         blocks, and convert_rows_to_bf16_scalar (gemm_packed.h) is its twin.
//   * results do not depend on the thread count: work is split in fixed-size chunks whose reduction
//     order never changes with the number of threads.
//   * row-major everywhere; shapes use the legend B batch, T/L target (query) length, S source (key)
//     length, D model width, H heads, Dh head width, F FFN width, V vocab, N rows.
//
// Files are named for their op: src/kernels/<op>.cc holds the dispatching entry points and the
// float twins, <op>_scalar.h the scalar specification (templates over T with the twin's name, so the
// gradient checks run the same code in double), <op>_avx512.cc the AVX-512 bodies (compiled with
// AVX-512 flags because of the name; see CMakeLists.txt). The ops:
//   attention, layer_norm (with the residual add + LayerNorm), rms_norm, activation, cross_entropy (with
//     log_softmax_rows), elementwise (add, multiply, dropout, bias gradient, transpose, copy_bytes): all three files;
//   adam (one Adam/AdamW update, for src/optim.cc): adam.cc with its twin as a plain function (no _scalar.h),
//     adam_avx512.cc, adam_avx2.cc;
//   gemm and gemm_bias: gemm.cc (fixed panels, each one oneDNN sgemm, or gemm_avx2.cc's product on CPUs with
//     AVX2 but not AVX-512) and gemm_backend.h (the panel plan, shared with gemm_bf16, gemm_packed and
//     bench/); the twin's template in gemm_scalar.h and the float twin in gemm_scalar.cc, not gemm.cc; no
//     AVX-512 file (oneDNN is the fast path);
//   gemm_bf16.{h,cc} (bfloat16 operands: Autocast's matmuls) and gemm_packed.{h,cc} (weights packed once
//     for inference: f32, bf16, int8), each declared in its own header with its twin, a plain float
//     function in the .cc (no _scalar.h); gemm_packed_avx512.cc holds the bfloat16 rounding's body and
//     the few-row kernel;
//   quantize (int8 rules, declared here): quantize.cc with its twins as plain functions (no _scalar.h),
//     quantize_avx512.cc, quantize_avx2.cc.
// CPUs without AVX-512 (AVX2 and FMA: cpu_has_avx2) have bodies where a training step spends its time,
// <op>_avx2.cc, compiled with AVX2 flags because of the name: attention_avx2.cc (the forward, and the rows of
// the backward, attention_gemm.cc, whose products are gemm_avx2.cc's), gemm_avx2.cc (training's products, a panel
// at a time), activation_avx2.cc, cross_entropy_avx2.cc,
// layer_norm_avx2.cc, rms_norm_avx2.cc, elementwise_avx2.cc, adam_avx2.cc, gemm_packed_avx2.cc (inference's
// products on packed weights: f32 and bf16 on gemm_avx2.cc's kernel, and int8 where the CPU has no int8 dot product)
// and quantize_avx2.cc (int8's quantization of rows and dequantization). The other ops run their twins there. Shared
// pieces: onednn_primitives.h (the engine, the per-thread streams and grow-only buffers of gemm_bf16 and gemm_packed),
// parallel_chunks.h (the fixed work split, the norms' partials), common_avx512.h, dropout_hash_avx512.h and
// transpose_avx512.h (helpers for AVX-512 files only), common_avx2.h and dropout_hash_avx2.h (for AVX2 files only),
// gelu_erf.h (GELU's polynomials, for both widths), cpu.cc (the CPU checks, the scalar switch, splitmix64).
//
// To add a kernel `foo_forward`: declare it and `foo_forward_scalar` here with the shapes in
// comments (and `foo_forward_avx512` at the end), write the scalar template in foo_scalar.h, the
// SIMD body in foo_avx512.cc, dispatch in foo.cc via cpu_has_avx512(), and test SIMD against the
// twin in tests/kernels/foo_test.cc on sizes that are not multiples of 16.
#pragma once

#include <cstddef>
#include <cmath>
#include <cstdint>

#include "tfm/activation.h"

namespace tfm::kernels {

// ---- CPU features and the scalar switch ----------------------------------------------------------
// TFM_FORCE_SCALAR=1 in the environment makes every dispatching kernel take its scalar twin
// (for bisecting numerical differences). Read once.
bool cpu_has_avx512();  // AVX-512F/BW/DQ/VL and FMA (the *_avx512.cc files' flags) and not forced scalar
bool cpu_has_avx2();    // AVX2 and FMA (the *_avx2.cc files' flags) and not forced scalar
bool force_scalar();
// AVX512-VNNI (vpdpbusd) or AMX-INT8, and not forced scalar: the int8 Linear (gemm_packed.h) runs on
// oneDNN only then. Without them oneDNN's u8·s8 kernels pair products in saturating int16 (vpmaddubsw),
// so the int8 Linear takes exact int16 products of ours on AVX2 instead (gemm_packed_avx2.cc), or its
// exact portable loop without AVX2.
bool cpu_has_int8_dot();

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
// Element (b, i, h, d) of q lives at q[b*q_sb + i*q_sl + h*Dh + d]; likewise k (index j). Values
// and the output have their own head width Dv: v[b*v_sb + j*v_sl + h*Dv + d], o likewise (index i).
// This stride form covers batch_first (B,L,E) (sb = L*row, sl = row), sequence-first (L,B,E)
// (sb = row, sl = B*row) and packed projections: for a packed (.., 2E + Ev) qkv buffer (E = H·Dh,
// Ev = H·Dv), q = qkv, k = qkv + E, v = qkv + 2E, all with row = 2E + Ev.
// A query row whose keys are all masked (every s_ij = −inf) gets o_i = 0 and lse_i = −inf, never
// NaN, and contributes no gradient.
// Dropout on p (training): element (bh, i, j) is dropped iff dropout_keep(seed, offset + ((bh*L + i)*S
// + j), p) is false; kept values are scaled by 1/(1−p). Recomputed, not stored, in the backward.
struct AttentionParams {
  int64_t B = 0, H = 0, L = 0, S = 0, Dh = 0;
  int64_t Dv = 0;  // value (and output) head width; 0 means Dh
  int64_t dv() const { return Dv > 0 ? Dv : Dh; }
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
  float scale = 1.0f;          // 1/sqrt(Dh) unless the module sets attn_scale
  float dropout_p = 0.0f;      // 0 in eval
  uint64_t seed = 0, offset = 0;
  float* lse = nullptr;  // (B,H,L) log-sum-exp of s over j, written by forward (may be null in eval)
  // Products with bfloat16 operands and float32 sums, as Autocast's matmuls run (q, k, v, the dropped
  // probabilities, dout and scale·ds rounded to bfloat16 before they are multiplied; softmax, lse, D and
  // every sum stay float32). attention_forward/backward honour it where the CPU has bf16 dot products
  // (cpu_has_bf16_dot, gemm_bf16.h) and run float32 products elsewhere; the scalar twins always honour it.
  bool bf16 = false;
};

// Forward: writes o (and lse if non-null). Never an (L,S) buffer. Memory (attention_avx512.cc):
// per-thread tile scratch of O(Br·(Dh + Bc + Dv)) floats (Br ≤ 64 queries, Bc = 64 keys), the same for
// every L and S; plus, when bf16, or when L·S ≥ 256² with more than 8 query rows or dropout, one copy of K
// and V for all heads, B·H·S·(Dh + Dv) floats (half as many words in bf16). The scalar twin uses no scratch.
void attention_forward(const AttentionParams& p);
void attention_forward_scalar(const AttentionParams& p);

// Backward, recomputing p from q, k and the saved lse:
//   dv_j = Σ_i drop(p_ij) do_i;  dp_ij = ⟨do_i, v_j⟩·keep/(1−p);  D_i = ⟨do_i, o_i⟩
//   ds_ij = p_ij (dp_ij − D_i);  dq_i = scale Σ_j ds_ij k_j;  dk_j = scale Σ_i ds_ij q_i
// dout has o's layout; dq, dk, dv have q's, k's, v's layout (same strides) and are OVERWRITTEN on
// the (b, i, h, ·) elements they address (packed buffers: the three blocks are disjoint).
// Memory (attention_avx512.cc): per-thread scratch of one key tile, O(Bc·(Dh + Dv) + Br·Bc) with
// Br = Bc = 64, plus D (L floats); when L·S ≥ 256² or bf16, copies of q, k, v and dout for all heads,
// O(B·H·(L + S)·(Dh + Dv)), and when L·S ≥ 256² a float dq (B·H·L·Dh) accumulated before its copy
// into the caller's dq. Never an (L,S) buffer. The scalar twin uses no scratch.
void attention_backward(const AttentionParams& p, const float* dout, float* dq, float* dk,
                        float* dv);
void attention_backward_scalar(const AttentionParams& p, const float* dout, float* dq, float* dk,
                               float* dv);
// The bodies for CPUs without AVX-512: the forward with AVX2 (attention_avx2.cc: keys in the lanes, each row on
// its own, so a row's bits do not depend on the call's other rows), the backward as single-threaded products
// (gemm_avx2.cc's) on tiles of query rows with the softmax in AVX2 row functions (attention_gemm.cc). Float32 products
// only (p.bf16 false), S, Dh and Dv at least 1; the backward needs p.lse. They split the work over the threads
// themselves: the forward (b, h, tile of 64 query rows, or 192 from 768 rows up), the backward (b, h). Memory per
// thread, grown once: the forward (Dh + Dv + 6)·S floats (the packed keys and values, six rows of scores), the
// backward two tiles of at most max(64·1024, S) floats.
void attention_forward_avx2(const AttentionParams& p);
void attention_backward_gemm(const AttentionParams& p, const float* dout, float* dq, float* dk, float* dv);
// attention_backward_gemm's element-wise work on a query row's first n ≤ S keys, with AVX2 (attention_avx2.cc; the
// twin is attention_backward_scalar's, which computes the same per element); first = the row's first dropout counter,
// p.offset + (bh·L + i)·S. probs: s[j] ← exp(s[j] − lse), t[j] ← s[j]·keep_j. ds: t[j] ← P[j] = 0 ? 0 :
// scale·(P[j]·(t[j]·keep_j − D)), t holding dP on entry. keep_j ∈ {0, 1/(1 − p)}, 1 without dropout.
void attention_probs_row_avx2(const AttentionParams& p, int64_t n, uint64_t first, float lse, float* s, float* t);
void attention_ds_row_avx2(const AttentionParams& p, int64_t n, uint64_t first, float D, const float* P, float* t);

// ---- Dropout inside fused kernels -------------------------------------------------------------------
// Element i of the dropped tensor is kept iff dropout_keep(seed, offset + i, p) (below), kept values
// scaled by 1/(1 − p) (dropout_forward's rule).
struct DropoutSpec {
  float p;
  uint64_t seed, offset;
};

// ---- LayerNorm (PyTorch nn.LayerNorm over the last dim) -----------------------------------------
// y = (x − μ) · rstd · w + b,  μ = mean(x),  rstd = 1/sqrt(var(x) + eps) (biased variance).
// x, y (N,D); w (D); b (D) or null; mean, rstd (N) written (may be null in eval). y may alias x.
void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t N, int64_t D, float eps);
void layer_norm_forward_scalar(const float* x, const float* w, const float* b, float* y,
                               float* mean, float* rstd, int64_t N, int64_t D, float eps);
// With x̂ = (x − μ)·rstd and g = dy ⊙ w:  dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂))  (overwrite, or
// with accumulate_dx dx += that float value: bitwise add_forward(dx, the overwritten dx), for a residual
// stream whose gradient already holds the other branch's part); dw += Σ_rows dy ⊙ x̂,
// db += Σ_rows dy  (accumulate; db may be null).
// μ and rstd are recomputed from x in double (the forward's exact values), not taken from the
// forward's float outputs: the formula cancels to O(eps·rstd²) when eps is not negligible against
// var (e.g. D = 2: dx = rstd·(g₁ − g₂)/2 · eps·rstd²), so a float-rounded rstd (relative error up to
// 2⁻²⁴) would come back amplified by 2·var/eps — 2000× at var 1, eps 1e-3 (a relative error ε in rstd
// moves 1 − var·rstd² = eps·rstd² by 2ε·var·rstd², a relative 2ε·var/eps).
void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw,
                         float* db, int64_t N, int64_t D, float eps, bool accumulate_dx = false);
void layer_norm_backward_scalar(const float* dy, const float* x, const float* w, float* dx,
                                float* dw, float* db, int64_t N, int64_t D, float eps,
                                bool accumulate_dx = false);

// Residual add + LayerNorm in one pass over each chunk of rows: z = x + r, or z = x + dropout(r)
// when r_drop is non-null (PyTorch's norm(x + dropout(sublayer(x)))), then y = layer_norm(z)
// (layer_norm_forward above). Bitwise the unfused composition. z (N,D) is written when non-null
// (training keeps it for the backward); y may alias x or r. mean, rstd (N) may be null.
void add_layer_norm_forward(const float* x, const float* r, const float* w, const float* b, float* z,
                            float* y, float* mean, float* rstd, int64_t N, int64_t D, float eps,
                            const DropoutSpec* r_drop = nullptr);
void add_layer_norm_forward_scalar(const float* x, const float* r, const float* w, const float* b,
                                   float* z, float* y, float* mean, float* rstd, int64_t N,
                                   int64_t D, float eps, const DropoutSpec* r_drop = nullptr);

// ---- RMSNorm (root-mean-square normalisation over the last dim; no mean, no bias) ----------------
// y = x · rstd · w,  rstd = 1/sqrt(mean(x²) + eps). Reference: the formula in float64 (PyTorch 1.13
// has no nn.RMSNorm; it matches torch.nn.RMSNorm of later versions with elementwise_affine).
// x, y (N,D); w (D); rstd (N) written for the backward (may be null in eval). y may alias x.
// Σx² is accumulated in double.
void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D,
                      float eps);
void rms_norm_forward_scalar(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D,
                             float eps);
// Derivative: with r = rstd, x̂ = x·r, g = dy ⊙ w and ∂r/∂x_j = −r³·x_j/D,
//   dx_j = Σ_i g_i·∂(x_i·r)/∂x_j = r·g_j − r³·x_j·(Σ_i g_i·x_i)/D = r·(g_j − x̂_j·mean(g ⊙ x̂))
//   (overwrite);  dw += Σ_rows dy ⊙ x̂  (accumulate).
// dy, x, dx (N,D); w, dw (D); rstd (N) the forward's output (eps enters only through it). dx may
// alias dy. Sums in double. Taking the forward's float rstd (relative error ≤ 2⁻²⁴) rather than
// recomputing it in double, as LayerNorm's backward must, moves dx by at most
// 2⁻²⁴·r·(|g| + 3·|x̂|·|mean(g ⊙ x̂)|) to first order: a float rounding of its terms. That is large
// against dx only where dx cancels, which happens along x̂ alone (⟨dx, x̂⟩ = r·⟨g, x̂⟩·eps/(mean(x²) +
// eps)), all of dx only when D = 1: unlike LayerNorm at D = 2, no width ≥ 2 loses the rest of dx.
// The bound is checked against float64 in tests/ops/rms_norm_test.cc.
void rms_norm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                       float* dw, int64_t N, int64_t D);
void rms_norm_backward_scalar(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                              float* dw, int64_t N, int64_t D);

// ---- Activations (tfm::Activation, tfm/activation.h) ----------------------------------------------
// Plain: y = f(x), x and y (N,F).  Gated: x (N,2F) = [a | b] per row, y (N,F) = a ⊙ g(b)
// (F.glu's convention: the gate is the second half).
//   RELU       x < 0 ? 0 : x (torch.relu: NaN stays NaN, −0 stays −0)
//   GELU       x·Φ(x) = 0.5·x·(1 + erf(x/√2))
//   GELU_TANH  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): PyTorch's F.gelu(x, approximate='tanh')
//   GLU        a·σ(b)
//   GEGLU      a·gelu(b)
//   SWIGLU     a·silu(b) = a·b·σ(b)
// y may alias x, and dx dy, for plain activations. The backward overwrites dx (x's shape) from dy (y's shape):
// relu: dx = x ≤ 0 ? 0 : dy, a select as PyTorch's threshold_backward (a NaN or ±inf dy where x ≤ 0 gives 0; a NaN
// x passes dy). x may be relu's output y instead of its input: y ≤ 0 ⇔ x ≤ 0, NaN ⇔ NaN.
// gelu' = Φ(x) + x·φ(x); glu: da = dy·g(b), db = dy·a·g'(b).
void activation_forward(Activation k, const float* x, float* y, int64_t N, int64_t F);
void activation_forward_scalar(Activation k, const float* x, float* y, int64_t N, int64_t F);
void activation_backward(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                         int64_t F);
void activation_backward_scalar(Activation k, const float* dy, const float* x, float* dx,
                                int64_t N, int64_t F);
// Training's forward of a plain activation (RELU, GELU, GELU_TANH; not the gated kinds) with its derivative in
// the same pass: y = act(x) and d = act'(x), x, y, d (N, F); y may alias x. y is bitwise activation_forward's,
// and mul_forward(dy, d) is bitwise activation_backward's dx, a NaN's sign aside (every body computes dx = dy·act'(x)
// from this act'(x); for RELU, d = x ≤ 0 ? 0 : 1 and the two are equal in value where dy is finite — dy·0 may be
// −0 where the select gives +0 — and a NaN or ±inf dy gives NaN there, 0 from the select), so a backward can read d
// instead of evaluating act' again (GELU's erf and exp: the forward's own evaluation gives both).
void activation_forward_grad(Activation k, const float* x, float* y, float* d, int64_t N, int64_t F);
void activation_forward_grad_scalar(Activation k, const float* x, float* y, float* d, int64_t N, int64_t F);
// The same with y stored only rounded to bfloat16: y16 (N, F) = float_to_bf16 (gemm_packed.h) of the y
// activation_forward_grad gives (bitwise, body for body), d its d; y16 must not alias x or d. bf16 training's
// feed-forward keeps nothing else of y, so its float32 values are never stored.
void activation_forward_grad_bf16(Activation k, const float* x, uint16_t* y16, float* d, int64_t N, int64_t F);
void activation_forward_grad_bf16_scalar(Activation k, const float* x, uint16_t* y16, float* d, int64_t N, int64_t F);

// Bias + activation in one pass after a GEMM: x (N, Fin) with Fin = F (plain) or 2F (gated),
// bias (Fin) or null; y (N, F) = act(x + bias) (gated: a ⊙ g(b) of the biased halves).
// y may alias x for plain activations.
void bias_activation_forward(Activation k, const float* x, const float* bias, float* y, int64_t N,
                             int64_t F);
void bias_activation_forward_scalar(Activation k, const float* x, const float* bias, float* y,
                                    int64_t N, int64_t F);

// The FFN's inner dropout in the bias + ReLU pass after its first GEMM:
//   y = dropout(relu(x + bias)), element (n, f) kept iff dropout_keep(seed, offset + n·F + f, p):
// bitwise dropout_forward(bias_activation_forward(RELU)). x, y (N, F), bias (F) or null; y may
// alias x. The backward needs only y: y ≤ 0 where the element was dropped or relu shut, so
//   dx = y ≤ 0 ? 0 : dy / (1 − p)
// a select: a NaN or ±inf dy where y ≤ 0 gives 0. Where relu was shut that is PyTorch's result too
// (threshold_backward selects); where the element was dropped, PyTorch's dropout multiplies by the mask's 0, so a
// NaN z gives a NaN y and a NaN or ±inf dy a NaN dx there; tfm's dropout zeroes the dropped elements (both
// here, as dropout_forward).
void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop);
void bias_relu_dropout_forward_scalar(const float* x, const float* bias, float* y, int64_t N,
                                      int64_t F, const DropoutSpec& drop);
void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p);
void relu_dropout_backward_scalar(const float* dy, const float* y, float* dx, int64_t n, float p);
// The same backward from y rounded to bfloat16 (y16 = float_to_bf16(y), the copy a bf16-trained FFN keeps
// for its second Linear's weight gradient): dx = widen(y16) ≤ 0 ? 0 : dy / (1 − p). Rounding keeps a
// float's sign and NaN, and rounds no positive float to 0 but those below 2⁻¹³⁴ (subnormals a ReLU of a sum of
// products does not produce in practice), so this is relu_dropout_backward's result. dx may alias dy.
void relu_dropout_backward_bf16(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p);
void relu_dropout_backward_bf16_scalar(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p);
// That backward's dx (N, F) never stored in float32, for the bf16 feed-forward's first Linear: its bias gradient
// db (F) += Σ_rows dx and dx16 = float_to_bf16(dx) in one pass over dy and y16, bitwise
// relu_dropout_backward_bf16 followed by bias_grad_bf16.
void relu_dropout_backward_bf16_round(const float* dy, const uint16_t* y16, float p, float* db, uint16_t* dx16,
                                      int64_t N, int64_t F);
void relu_dropout_backward_bf16_round_scalar(const float* dy, const uint16_t* y16, float p, float* db, uint16_t* dx16,
                                             int64_t N, int64_t F);

// ---- Optimizer: one Adam/AdamW update (src/optim.cc runs it over its parameters' ranges) ----------------
// Per element, in float32, torch.optim.Adam's single-tensor formula (src/optim.cc derives the coefficients):
//   g ← grad·scale;   g ← g + wd·p (L2)   or   p ← p·decay (DECOUPLED, AdamW)
//   m ← m·β₁ + (1 − β₁)·g,   v ← v·β₂ + ((1 − β₂)·g)·g
//   p ← p + neg_step_size·(m / (√v / bc2_sqrt + eps))
// p, m, v updated in place, g read; n elements. Every body performs these float operations in this order,
// with no multiply and add fused (adam.cc says how), so each is bitwise the twin and any split of a parameter
// into runs gives the same bits. With p16 (else null), p16[j] = float_to_bf16(new p[j]) (gemm_packed.h) too, in
// the same pass: the bfloat16 copy bf16 training multiplies by (tfm::Bf16WeightCache), bitwise convert_to_bf16's.
enum class AdamDecay { NONE, L2, DECOUPLED };
struct AdamCoefficients {
  float beta1, beta2, one_m_b1, one_m_b2, eps, wd, decay, neg_step_size, bc2_sqrt;
};
void adam_update(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefficients& c,
                 float scale, uint16_t* p16 = nullptr);
void adam_update_scalar(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
                        const AdamCoefficients& c, float scale, uint16_t* p16 = nullptr);

// ---- Element-wise: add, dropout, bias gradient, transpose ------------------------------------------
// y = a + b over n elements. y may alias a or b.
void add_forward(const float* a, const float* b, float* y, int64_t n);
void add_forward_scalar(const float* a, const float* b, float* y, int64_t n);
// y = a ⊙ b over n elements. y may alias a or b.
void mul_forward(const float* a, const float* b, float* y, int64_t n);
void mul_forward_scalar(const float* a, const float* b, float* y, int64_t n);

// dst[0, bytes) = src[0, bytes) for buffers that do not overlap: memcpy over the element-wise kernels'
// fixed chunks (parallel_chunks.h, here of bytes), over the threads above 256 kB (a gradient clone of a
// (768, 128) activation is 384 kB). No arithmetic, so no scalar twin.
void copy_bytes(const void* src, void* dst, size_t bytes);

// y = x ⊙ keep / (1 − p),  keep_i = dropout_keep(seed, offset + i, p)   (0 ≤ p < 1); a dropped element is 0 even
// where x is NaN or ±inf (PyTorch multiplies by the mask: NaN there). The backward is the same map applied to dy. y may
// alias x. Bitwise equal to the scalar twin (integer hash, exact conversion of 24 bits, one multiply).
void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
void dropout_forward_scalar(const float* x, float* y, int64_t n, float p, uint64_t seed,
                            uint64_t offset);

// y = a + x ⊙ keep / (1 − p): the residual add of a dropped-out branch in one pass, bitwise
// add_forward(a, dropout_forward(x)). y may alias a or x.
void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset);
void add_dropout_forward_scalar(const float* a, const float* x, float* y, int64_t n, float p,
                                uint64_t seed, uint64_t offset);

// db (F) += Σ_rows dy (N, F)  (accumulate). Each column sums its rows in order 0..N−1, in float, in
// both the SIMD and the scalar version, so they agree bitwise for any thread count.
void bias_grad(const float* dy, float* db, int64_t N, int64_t F);
void bias_grad_scalar(const float* dy, float* db, int64_t N, int64_t F);
// bias_grad and the rounding of dy to bfloat16 in one pass over dy (a Linear's bf16 backward: its bias
// gradient, and its output gradient rounded once for both products): db (F) += Σ_rows dy bitwise as
// bias_grad, and dy16 (N, F) = float_to_bf16(dy) (gemm_packed.h) bitwise as convert_to_bf16.
void bias_grad_bf16(const float* dy, float* db, uint16_t* dy16, int64_t N, int64_t F);
void bias_grad_bf16_scalar(const float* dy, float* db, uint16_t* dy16, int64_t N, int64_t F);
// The same pass over dy = a ⊙ b (a, b (N, F)), dy never stored in float32: bitwise mul_forward followed by
// bias_grad_bf16 (the bf16 feed-forward's dz = dy ⊙ act'(z) for its first Linear). b null: bias_grad_bf16 of a
// (the dispatcher only; the twin takes a b).
void mul_bias_grad_bf16(const float* a, const float* b, float* db, uint16_t* dy16, int64_t N, int64_t F);
void mul_bias_grad_bf16_scalar(const float* a, const float* b, float* db, uint16_t* dy16, int64_t N, int64_t F);

// dst[c·ld + r] = src[r·sl + c] for r < rows, c < cols (a strided block copied transposed; nothing
// else of dst is written). Pure data movement: bitwise the twin.
void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld);
void transpose_scalar(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst,
                      int64_t ld);

// ---- Softmax cross-entropy (PyTorch F.cross_entropy, reduction over rows done by the op) --------
// logits (N,V), target (N) class ids; rows with target == ignore_index give loss 0 and grad 0.
// With ε = label_smoothing: loss_n = (1−ε)·(lse − z_t) + ε·(lse − mean_v z_v); with ε = 0 only lse − z_t,
// as torch, which forms the smoothing term only for ε > 0 (a −inf logit makes that term +inf, and 0·inf NaN).
// Writes loss (N) and lse (N). Rows in parallel, on AVX-512 bodies (cross_entropy_avx512.cc: vector
// exp, within float rounding of the twin) or the scalar twin (cross_entropy_scalar.h); the row
// statistics are accumulated in double.
void cross_entropy_forward(const float* logits, const int32_t* target, float* loss, float* lse,
                           int64_t N, int64_t V, int32_t ignore_index, float label_smoothing);
void cross_entropy_forward_scalar(const float* logits, const int32_t* target, float* loss, float* lse,
                                  int64_t N, int64_t V, int32_t ignore_index, float label_smoothing);
// One row's loss from its statistics, in double: lse − z_t, and with ε > 0 the smoothing term from the
// row's Σ_v z_v — the step every forward body (twin, AVX2, AVX-512) ends a row with (cross_entropy.cc,
// compiled for every CPU).
double cross_entropy_row_loss(double lse, double z_target, double zsum, int64_t V, double label_smoothing);
// log-softmax statistics of N rows z (N,V): lse_n = m + log Σ_v exp(z_v − m) in double and argmax_n
// (the first v with z_v = m), as log_softmax_row_scalar (cross_entropy_scalar.h) defines them — the
// teacher-forced scorer's loss and accuracy. Rows in parallel, on the AVX-512 body (cross_entropy_avx512.cc:
// exps by the vector exp, summed in double: lse within 2.6e-7 absolute of the twin, argmax the
// same) or the twin, which also takes any row whose maximum is not finite or that holds a NaN.
void log_softmax_rows(const float* logits, int64_t N, int64_t V, double* lse, int64_t* argmax);
// The twin: log_softmax_row_scalar row by row.
void log_softmax_rows_scalar(const float* logits, int64_t N, int64_t V, double* lse, int64_t* argmax);
// dlogits_n = scale_n · (softmax(z) − (1−ε)·onehot(t) − ε/V)  (overwrite; zero for ignored rows).
// scale (N): scale_n = ∂L/∂loss_n, the gradient of the reduced loss L with respect to row n's loss:
// dy/count for reduction='mean' over the count rows not ignored (ops::cross_entropy, src/ops/loss.cc,
// passes that to every row; 0 when count = 0).
void cross_entropy_backward(const float* logits, const int32_t* target, const float* lse,
                            const float* scale, float* dlogits, int64_t N, int64_t V,
                            int32_t ignore_index, float label_smoothing);
void cross_entropy_backward_scalar(const float* logits, const int32_t* target, const float* lse,
                                   const float* scale, float* dlogits, int64_t N, int64_t V,
                                   int32_t ignore_index, float label_smoothing);

// ---- Random numbers -------------------------------------------------------------------------------
// Counter-based: the value for index i depends only on (seed, i), so results never depend on
// thread count or on the order in which elements are visited.
// SplitMix64's output step (Steele, Lea, Flood 2014) on the state seed·φ + counter + φ, φ =
// 0x9E3779B97F4A7C15: a cheap, well-mixed 64-bit hash of (seed, counter). With seed 0 it is
// SplitMix64's next output from the state `counter`, a mix of one word.
uint64_t splitmix64(uint64_t seed, uint64_t counter);
inline float uniform01(uint64_t seed, uint64_t counter) {  // [0, 1), 24 random bits
  return static_cast<float>(splitmix64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

// Dropout's own hash, 32 bits per (seed, counter), built for 32-bit SIMD lanes: it is evaluated for
// every attention probability in the forward and again in the backward, where splitmix64's 64-bit
// lanes (8 per vector, two 64-bit multiplies each) would be a sizeable share of a long-sequence
// training step (bench/RESULTS.md, "Design measurements behind the kernels").
// counter = hi·2³² + lo: a key per (seed, hi) from splitmix64, then Wellons' "lowbias32" integer
// mix of lo with the key xored in after its first multiply (xoring it into the input instead would
// make two seeds' masks permutations of each other). Statistics: tests/kernels/elementwise_test.cc.
constexpr uint32_t kDropoutMul1 = 0x7feb352du, kDropoutMul2 = 0x846ca68bu;
inline uint32_t dropout_key(uint64_t seed, uint64_t hi) {
  return static_cast<uint32_t>(splitmix64(seed, hi) >> 32);
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
// The kept values' scale 1/(1 − p), in T (the twins' double or float); 0 for p ≥ 1, where nothing is kept.
template <class T = float>
inline T dropout_scale(float p) {
  return p < 1.0f ? T(1) / (T(1) - static_cast<T>(p)) : T(0);
}

// ---- int8 quantization (quantize.cc; the int8 Linear of gemm_packed.h and `tfm quantize`) ----------
// Rounding is round-to-nearest-even everywhere (std::nearbyint / vroundscaleps), with the same float
// operations in the AVX-512 bodies as in the twins, so they are bitwise equal.
//
// Weights, per row, symmetric: scale[n] = max_k |W[n,k]| / 127 (float32), q[n,k] = clamp(round(W[n,k] /
// scale[n]), −127, 127); a row of zeros gets scale 0 and q 0. W (N, K) at stride ldw ≥ K; q (N, K)
// dense; scale (N). Overwrites q and scale. The scalar twin is the only body: it runs once per
// weight (at pack or quantize time), never per call.
// W must be finite: a NaN is skipped by the max and quantizes to −127 (to 0 when the row's other
// weights are all zero: scale 0); an infinite weight makes scale[n] = inf, itself −127 (±inf/inf = NaN) and the row's
// finite weights 0. Model directories refuse NaN and infinite weights when they are loaded
// (src/models/model_dir.cc), so `tfm quantize` and the int8 pack of a loaded model never see one.
void quantize_rows_s8(const float* W, int64_t N, int64_t K, int64_t ldw, int8_t* q, float* scale);
// Its inverse, the values int8 rows stand for: W[n,k] = float(q[n,k]) · scale[n] (one float product, so
// every caller — a dequantized state_dict, a lazy matrix, an embedding row — gets the same bits). q (N, K)
// at stride ldq ≥ K; W (N, K) dense. The scalar twin is the only body (no arithmetic to vectorize that
// a compiler does not).
void dequantize_rows_s8(const int8_t* q, int64_t N, int64_t K, int64_t ldq, const float* scale, float* W);
// Activations, per row, asymmetric: lo = min(0, min_k x), hi = max(0, max_k x), scale[m] = (hi − lo) /
// 255 (1 for a row of zeros), zero[m] = round(−lo / scale[m]) ∈ [0, 255], q[m,k] = clamp(round(x[m,k] ·
// fl(1/scale[m])) + zero[m], 0, 255), so x ≈ scale·(q − zero) with |x − scale·(q − zero)| ≤ scale/2 (up to
// the rounding of the reciprocal and the product, ≤ (2u + u²)·|x/scale| ≤ 511u of a step). NaN inputs are skipped by the min/max and quantize to 0. x (M, K) at
// stride ldx ≥ K; q (M, K) dense; scale, zero (M). Overwrites q, scale and zero.
void quantize_rows_u8(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                      int32_t* zero);
void quantize_rows_u8_scalar(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                             int32_t* zero);
// y[m,n] = fma(float(acc[m,n] − zero_x[m]·colsum_w[n]), scale_x[m]·scale_w[n], bias[n] or 0): the int32
// sums of quantize_rows_u8's q_x times quantize_rows_s8's q_w turned back into x·Wᵀ + b, where colsum_w[n]
// = Σ_k q_w[n,k] removes the activations' zero point. acc (M, N) at stride ldacc ≥ N; y (M, N) at
// stride ldy ≥ N, overwritten (may alias acc only if ldy == ldacc and both are the same buffer: it
// reads each element before writing it); bias (N) or null.
void dequantize_rows(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                     const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w, const float* bias,
                     float* y, int64_t ldy);
void dequantize_rows_scalar(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                            const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w,
                            const float* bias, float* y, int64_t ldy);

// ---- AVX-512 bodies ---------------------------------------------------------------------------------
// Defined in the <op>_avx512.cc files (compiled with AVX-512 flags). Only the dispatching entry points
// above and the tests call them, and only when cpu_has_avx512(). Each has the contract of the entry
// point it is named after, run single-threaded over the rows or elements it is given — except the
// attention bodies, which split (b, h, tile) over the threads themselves (attention_avx512.cc,
// its "Determinism" note).
void layer_norm_forward_avx512(const float* x, const float* w, const float* b, float* y, float* mean,
                               float* rstd, int64_t N, int64_t D, float eps);
void layer_norm_backward_avx512(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                                int64_t N, int64_t D, float eps, bool accumulate_dx = false);
void rms_norm_forward_avx512(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D,
                             float eps);
void rms_norm_backward_avx512(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                              float* dw, int64_t N, int64_t D);
// Every kind; they return false (doing nothing) for a kind they do not handle, and the entry point
// then runs the scalar twin. Relu is bitwise the twin; the others use a vector erf / exp / sigmoid
// (a few float ulps from the twin's std::erf / std::exp / std::tanh, activation_avx512.cc).
bool bias_activation_forward_avx512(Activation k, const float* x, const float* bias, float* y,
                                    int64_t N, int64_t F);
bool activation_backward_avx512(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                                int64_t F);
// The plain kinds, over n elements (y, d as activation_forward_grad's).
bool activation_forward_grad_avx512(Activation k, const float* x, float* y, float* d, int64_t n);
bool activation_forward_grad_bf16_avx512(Activation k, const float* x, uint16_t* y16, float* d, int64_t n);
void bias_relu_dropout_forward_avx512(const float* x, const float* bias, float* y, int64_t N,
                                      int64_t F, const DropoutSpec& drop);
void relu_dropout_backward_avx512(const float* dy, const float* y, float* dx, int64_t n, float p);
void relu_dropout_backward_bf16_avx512(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p);
// dy, y16 and dx16 rows at stride ld (≥ F).
void relu_dropout_backward_bf16_round_avx512(const float* dy, const uint16_t* y16, int64_t ld, float p, float* db,
                                             uint16_t* dx16, int64_t N, int64_t F);
void add_forward_avx512(const float* a, const float* b, float* y, int64_t n);
void mul_forward_avx512(const float* a, const float* b, float* y, int64_t n);
void adam_update_avx512(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
                        const AdamCoefficients& c, float scale, uint16_t* p16);
void dropout_forward_avx512(const float* x, float* y, int64_t n, float p, uint64_t seed,
                            uint64_t offset);
void add_dropout_forward_avx512(const float* a, const float* x, float* y, int64_t n, float p,
                                uint64_t seed, uint64_t offset);
// dy rows at stride ld (≥ F).
void bias_grad_avx512(const float* dy, int64_t ld, float* db, int64_t N, int64_t F);
// The same sums, with dy16 (rows at stride ld too) = bf16_hi's rounding of dy (common_avx512.h); mul_: of
// dy = a ⊙ b (a and b rows at stride ld; b not null).
void bias_grad_bf16_avx512(const float* dy, int64_t ld, float* db, uint16_t* dy16, int64_t N, int64_t F);
void mul_bias_grad_bf16_avx512(const float* a, const float* b, int64_t ld, float* db, uint16_t* dy16, int64_t N,
                               int64_t F);
void transpose_avx512(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst,
                      int64_t ld);
// AVX2 bodies (the *_avx2.cc files, compiled with AVX2 and FMA flags), for CPUs without AVX-512: called by
// the entry points only when cpu_has_avx2() and not cpu_has_avx512(). Same method and bounds as the AVX-512
// ones. Activations: every kind (false, doing nothing, for a kind without a body: the entry point then runs
// the twin), and the relu + dropout backward.
bool bias_activation_forward_avx2(Activation k, const float* x, const float* bias, float* y, int64_t N, int64_t F);
bool activation_backward_avx2(Activation k, const float* dy, const float* x, float* dx, int64_t N, int64_t F);
bool activation_forward_grad_avx2(Activation k, const float* x, float* y, float* d, int64_t n);
bool activation_forward_grad_bf16_avx2(Activation k, const float* x, uint16_t* y16, float* d, int64_t n);
void bias_relu_dropout_forward_avx2(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                                    const DropoutSpec& drop);
void relu_dropout_backward_avx2(const float* dy, const float* y, float* dx, int64_t n, float p);
// The element-wise kernels (elementwise_avx2.cc): add, dropout, add + dropout, the bias gradient (dy's rows at
// stride ld ≥ F), the transpose.
void add_forward_avx2(const float* a, const float* b, float* y, int64_t n);
void mul_forward_avx2(const float* a, const float* b, float* y, int64_t n);
void adam_update_avx2(AdamDecay mode, float* p, const float* g, float* m, float* v, int64_t n,
                      const AdamCoefficients& c, float scale, uint16_t* p16);
void dropout_forward_avx2(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset);
void add_dropout_forward_avx2(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                              uint64_t offset);
void bias_grad_avx2(const float* dy, int64_t ld, float* db, int64_t N, int64_t F);
void transpose_avx2(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld);
// The softmax cross-entropy and log_softmax_rows' row (cross_entropy_avx2.cc): the contracts of their AVX-512
// namesakes.
void cross_entropy_forward_avx2(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                                int64_t V, int32_t ignore_index, float label_smoothing);
void cross_entropy_backward_avx2(const float* logits, const int32_t* target, const float* lse, const float* scale,
                                 float* dlogits, int64_t N, int64_t V, int32_t ignore_index, float label_smoothing);
bool log_softmax_row_avx2(const float* z, int64_t V, double* lse, int64_t* argmax);
// LayerNorm and RMSNorm (layer_norm_avx2.cc, rms_norm_avx2.cc).
void layer_norm_forward_avx2(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                             int64_t N, int64_t D, float eps);
void layer_norm_backward_avx2(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                              int64_t N, int64_t D, float eps, bool accumulate_dx);
void rms_norm_forward_avx2(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t D, float eps);
void rms_norm_backward_avx2(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                            int64_t N, int64_t D);
// Flash attention (attention_avx512.cc); the backward needs p.lse.
void attention_forward_avx512(const AttentionParams& p);
void attention_backward_avx512(const AttentionParams& p, const float* dout, float* dq, float* dk,
                               float* dv);
// Softmax cross-entropy rows (cross_entropy_avx512.cc), the contracts of cross_entropy_forward and
// cross_entropy_backward; the twins are the float instantiations of cross_entropy_scalar.h.
void cross_entropy_forward_avx512(const float* logits, const int32_t* target, float* loss, float* lse,
                                  int64_t N, int64_t V, int32_t ignore_index, float label_smoothing);
void cross_entropy_backward_avx512(const float* logits, const int32_t* target, const float* lse,
                                   const float* scale, float* dlogits, int64_t N, int64_t V,
                                   int32_t ignore_index, float label_smoothing);
// log_softmax_rows' body, one row: for a row whose entries are all finite; returns false, leaving lse
// and argmax unset, on a row that is not (the dispatcher sends it to the twin). Same statistics as
// cross_entropy_forward_avx512's (one row log-sum-exp in cross_entropy_avx512.cc).
bool log_softmax_row_avx512(const float* z, int64_t V, double* lse, int64_t* argmax);
// The attention kernel's vectorized exp, applied elementwise: exposed so the test can measure its
// error in ulp against std::exp.
void attention_exp_avx512(const float* x, float* y, int64_t n);

void quantize_rows_u8_avx512(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale,
                             int32_t* zero);
void dequantize_rows_avx512(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                            const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w,
                            const float* bias, float* y, int64_t ldy);
// Their AVX2 bodies (quantize_avx2.cc; call only when cpu_has_avx2()), bitwise equal to the same twins.
void quantize_rows_u8_avx2(const float* x, int64_t M, int64_t K, int64_t ldx, uint8_t* q, float* scale, int32_t* zero);
void dequantize_rows_avx2(const int32_t* acc, int64_t ldacc, int64_t M, int64_t N, const float* scale_x,
                          const int32_t* zero_x, const float* scale_w, const int32_t* colsum_w, const float* bias,
                          float* y, int64_t ldy);

}  // namespace tfm::kernels
