// src/kernels/layer_norm.cc — LayerNorm's dispatching kernels (layer_norm_forward, layer_norm_backward,
// add_layer_norm_forward) and their float scalar twins. The twins instantiate the templates of
// layer_norm_scalar.h; the entry points run fixed chunks of rows (parallel_chunks.h), so results never
// depend on the thread count, on the AVX-512 bodies of layer_norm_avx512.cc when cpu_has_avx512(), else on
// the AVX2 bodies of layer_norm_avx2.cc when cpu_has_avx2(). Contracts in kernels.h.
#include "kernels/elementwise_scalar.h"
#include "kernels/kernels.h"
#include "kernels/layer_norm_scalar.h"
#include "kernels/parallel_chunks.h"

namespace tfm::kernels {

void layer_norm_forward_scalar(const float* x, const float* w, const float* b, float* y, float* mean,
                               float* rstd, int64_t N, int64_t D, float eps) {
  layer_norm_forward_scalar<float>(x, w, b, y, mean, rstd, N, D, eps);
}
void layer_norm_backward_scalar(const float* dy, const float* x, const float* w, float* dx, float* dw,
                                float* db, int64_t N, int64_t D, float eps, bool accumulate_dx) {
  layer_norm_backward_scalar<float>(dy, x, w, dx, dw, db, N, D, eps, accumulate_dx);
}
void add_layer_norm_forward_scalar(const float* x, const float* r, const float* w, const float* b, float* z,
                                   float* y, float* mean, float* rstd, int64_t N, int64_t D, float eps,
                                   const DropoutSpec* r_drop) {
  // z = x + r (or x + dropout(r)) into z (or into y when z is not kept), then LayerNorm of it into y.
  float* sum = z ? z : y;
  if (r_drop)
    add_dropout_forward_scalar<float>(x, r, sum, N * D, r_drop->p, r_drop->seed, r_drop->offset);
  else
    add_forward_scalar<float>(x, r, sum, N * D);
  layer_norm_forward_scalar<float>(sum, w, b, y, mean, rstd, N, D, eps);
}

namespace {

using ForwardBody = void (*)(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t, float);
using BackwardBody = void (*)(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t, float,
                              bool);
// The bodies this CPU runs (the float twins' overloads named by their pointer types).
ForwardBody forward_body() {
  return cpu_has_avx512() ? layer_norm_forward_avx512
         : cpu_has_avx2() ? layer_norm_forward_avx2
                          : static_cast<ForwardBody>(layer_norm_forward_scalar);
}
BackwardBody backward_body() {
  return cpu_has_avx512() ? layer_norm_backward_avx512
         : cpu_has_avx2() ? layer_norm_backward_avx2
                          : static_cast<BackwardBody>(layer_norm_backward_scalar);
}

}  // namespace

void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t N, int64_t D, float eps) {
  const ForwardBody body = forward_body();
  for_each_row_chunk(N, D, [&](int64_t, int64_t r0, int64_t rn) {
    body(x + r0 * D, w, b, y + r0 * D, mean ? mean + r0 : nullptr, rstd ? rstd + r0 : nullptr, rn, D, eps);
  });
}

void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                         int64_t N, int64_t D, float eps, bool accumulate_dx) {
  const BackwardBody body = backward_body();
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  if (chunks <= 1) return body(dy, x, w, dx, dw, db, N, D, eps, accumulate_dx);
  // Each chunk accumulates its dw, db into its own zeroed partial; the partials are added to dw, db in
  // chunk order, so the sums do not depend on which thread ran which chunk.
  float* part = zeroed_chunk_partials(static_cast<size_t>(chunks * 2 * D));  // (chunks, 2, D): (dw, db)
  for_each_row_chunk(N, D, [&](int64_t c, int64_t r0, int64_t rn) {
    float* pw = part + c * 2 * D;
    body(dy + r0 * D, x + r0 * D, w, dx + r0 * D, pw, db ? pw + D : nullptr, rn, D, eps, accumulate_dx);
  });
  for (int64_t c = 0; c < chunks; ++c) {
    const float* pw = part + c * 2 * D;
    for (int64_t d = 0; d < D; ++d) dw[d] += pw[d];
    if (db)
      for (int64_t d = 0; d < D; ++d) db[d] += pw[D + d];
  }
}

void add_layer_norm_forward(const float* x, const float* r, const float* w, const float* b, float* z, float* y,
                            float* mean, float* rstd, int64_t N, int64_t D, float eps, const DropoutSpec* r_drop) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
  const ForwardBody body = forward_body();
  for_each_row_chunk(N, D, [&](int64_t, int64_t r0, int64_t rn) {
    float* sum = (z ? z : y) + r0 * D;  // the chunk's sum stays in cache for the LayerNorm
    float* m = mean ? mean + r0 : nullptr;
    float* s = rstd ? rstd + r0 : nullptr;
    const float* xc = x + r0 * D;
    const float* rc = r + r0 * D;
    const uint64_t off = r_drop ? r_drop->offset + static_cast<uint64_t>(r0 * D) : 0;
    if (simd) {
      if (r_drop)
        add_dropout_forward_avx512(xc, rc, sum, rn * D, r_drop->p, r_drop->seed, off);
      else
        add_forward_avx512(xc, rc, sum, rn * D);
    } else if (avx2) {
      if (r_drop)
        add_dropout_forward_avx2(xc, rc, sum, rn * D, r_drop->p, r_drop->seed, off);
      else
        add_forward_avx2(xc, rc, sum, rn * D);
    } else {
      if (r_drop)
        add_dropout_forward_scalar(xc, rc, sum, rn * D, r_drop->p, r_drop->seed, off);
      else
        add_forward_scalar(xc, rc, sum, rn * D);
    }
    body(sum, w, b, y + r0 * D, m, s, rn, D, eps);
  });
}

}  // namespace tfm::kernels
