// src/kernels/attention.cc — multi-head scaled dot-product attention: the scalar twins and the
// run-time dispatch to the AVX-512 flash-attention bodies (attention_avx512.cc) or, on CPUs without
// AVX-512, to the AVX2 forward (attention_avx2.cc) and the sgemm-based backward (attention_gemm.cc).
//
// The scalar twins are the float instantiation of the specification in attention_scalar.h. The flash
// kernel handles every shape; without AVX-512 the other bodies take every shape with at least one key and
// nonzero head widths, and float32 products (both need AVX2). The twin is taken when
// TFM_FORCE_SCALAR is set, for what no body takes, or when the backward has no saved lse (every backward
// recomputes p from it). A bf16 request
// (AttentionParams::bf16) is kept only where the CPU has bf16 dot products, which the fast kernel then
// uses; elsewhere (and under TFM_FORCE_SCALAR) the products stay float32.
#include <cassert>

#include "kernels/attention_scalar.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

void attention_forward_scalar(const AttentionParams& p) {
  attention_forward_scalar<float>(p, attention_scalar_tensors(p));
}

void attention_backward_scalar(const AttentionParams& p, const float* dout, float* dq, float* dk,
                               float* dv) {
  attention_backward_scalar<float>(p, attention_scalar_tensors(p), dout, dq, dk, dv);
}

namespace {
// Whether attention_forward_avx2 / attention_backward_gemm take p (float32 products, no empty operand).
bool other_body_takes(const AttentionParams& p) {
  return !force_scalar() && !p.bf16 && p.S > 0 && p.Dh > 0 && p.dv() > 0;
}
// p with bf16 kept only where the CPU multiplies bfloat16 pairs (vdpbf16ps).
AttentionParams with_supported_precision(const AttentionParams& p) {
  AttentionParams r = p;
  r.bf16 = p.bf16 && cpu_has_bf16_dot();
  return r;
}
}  // namespace

void attention_forward(const AttentionParams& p) {
  assert(p.q && p.k && p.v && p.o);
  const AttentionParams r = with_supported_precision(p);
  if (cpu_has_avx512()) {
    attention_forward_avx512(r);
  } else if (cpu_has_avx2() && other_body_takes(r)) {
    attention_forward_avx2(r);
  } else {
    attention_forward_scalar(r);
  }
}

void attention_backward(const AttentionParams& p, const float* dout, float* dq, float* dk,
                        float* dv) {
  assert(p.q && p.k && p.v && p.o && dout && dq && dk && dv);
  const AttentionParams r = with_supported_precision(p);
  if (cpu_has_avx512() && p.lse != nullptr) {
    attention_backward_avx512(r, dout, dq, dk, dv);
  } else if (!cpu_has_avx512() && cpu_has_avx2() && p.lse != nullptr && other_body_takes(r)) {
    attention_backward_gemm(r, dout, dq, dk, dv);
  } else {
    attention_backward_scalar(r, dout, dq, dk, dv);
  }
}

}  // namespace tfm::kernels
