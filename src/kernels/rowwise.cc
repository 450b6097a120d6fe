// src/kernels/rowwise.cc — LayerNorm, activations, softmax cross-entropy and the element-wise
// kernels of rowwise.h. Scalar twins instantiate the templates of rowwise_scalar.h; the dispatching
// entry points parallelize over rows (or elements) in fixed chunks, so results never depend on the
// thread count, and run the AVX-512 bodies of rowwise_avx512.cc when cpu_has_avx512().
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/rowwise.h"
#include "kernels/rowwise_scalar.h"

namespace tfm::kernels {

bool activation_is_gated(ActivationKind k) {
  return k == ActivationKind::ACT_GLU || k == ActivationKind::ACT_GEGLU || k == ActivationKind::ACT_SWIGLU;
}

void layer_norm_forward_scalar(const float* x, const float* w, const float* b, float* y, float* mean,
                               float* rstd, int64_t N, int64_t D, float eps) {
  ref::layer_norm_forward<float>(x, w, b, y, mean, rstd, N, D, eps);
}
void layer_norm_backward_scalar(const float* dy, const float* x, const float* w, float* dx, float* dw,
                                float* db, int64_t N, int64_t D, float eps) {
  ref::layer_norm_backward<float>(dy, x, w, dx, dw, db, N, D, eps);
}
void activation_forward_scalar(ActivationKind k, const float* x, float* y, int64_t N, int64_t F) {
  ref::activation_forward<float>(k, x, y, N, F);
}
void activation_backward_scalar(ActivationKind k, const float* dy, const float* x, float* dx, int64_t N,
                                int64_t F) {
  ref::activation_backward<float>(k, dy, x, dx, N, F);
}

void add_forward_scalar(const float* a, const float* b, float* y, int64_t n) { ref::add_forward<float>(a, b, y, n); }
void dropout_forward_scalar(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  ref::dropout_forward<float>(x, y, n, p, seed, offset);
}
void bias_activation_forward_scalar(ActivationKind k, const float* x, const float* bias, float* y, int64_t N,
                                    int64_t F) {
  ref::bias_activation_forward<float>(k, x, bias, y, N, F);
}
void bias_grad_scalar(const float* dy, float* db, int64_t N, int64_t F) { ref::bias_grad<float>(dy, db, N, F); }
void transpose_scalar(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * sl + c];
}
void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  if (cpu_has_avx512())
    avx512::transpose(src, sl, rows, cols, dst, ld);
  else
    transpose_scalar(src, sl, rows, cols, dst, ld);
}
void add_dropout_forward_scalar(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                                uint64_t offset) {
  ref::add_dropout_forward<float>(a, x, y, n, p, seed, offset);
}
void bias_relu_dropout_forward_scalar(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                                      const DropoutSpec& drop) {
  ref::bias_relu_dropout_forward<float>(x, bias, y, N, F, drop.p, drop.seed, drop.offset);
}
void relu_dropout_backward_scalar(const float* dy, const float* y, float* dx, int64_t n, float p) {
  ref::relu_dropout_backward<float>(dy, y, dx, n, p);
}
void add_layer_norm_forward_scalar(const float* x, const float* r, const float* w, const float* b, float* z,
                                   float* y, float* mean, float* rstd, int64_t N, int64_t D, float eps,
                                   const DropoutSpec* r_drop) {
  // z = x + r (or x + dropout(r)) into z (or into y when z is not kept), then LayerNorm of it into y.
  float* sum = z ? z : y;
  if (r_drop)
    ref::add_dropout_forward<float>(x, r, sum, N * D, r_drop->p, r_drop->seed, r_drop->offset);
  else
    ref::add_forward<float>(x, r, sum, N * D);
  ref::layer_norm_forward<float>(sum, w, b, y, mean, rstd, N, D, eps);
}

// Rows are processed in chunks of kRowChunk; each chunk is independent, so any schedule gives the
// same bits. Parameter-gradient reductions (LayerNorm dw, db) sum per-chunk partials in chunk order.
static constexpr int64_t kRowChunk = 64;

// Calls body(c, r0, rn) for chunk c = rows [r0, r0 + rn), in parallel when N·width is large enough to
// pay for the threads. The chunking depends only on N, never on the thread count.
template <typename Body>
static void for_each_row_chunk(int64_t N, int64_t width, const Body& body) {
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static) if (N * width > 32768)
  for (int64_t c = 0; c < chunks; ++c) body(c, c * kRowChunk, std::min(kRowChunk, N - c * kRowChunk));
}

void layer_norm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                        float* rstd, int64_t N, int64_t D, float eps) {
  const bool simd = cpu_has_avx512();
  for_each_row_chunk(N, D, [&](int64_t, int64_t r0, int64_t rn) {
    if (simd)
      avx512::layer_norm_forward(x + r0 * D, w, b, y + r0 * D, mean ? mean + r0 : nullptr,
                                 rstd ? rstd + r0 : nullptr, rn, D, eps);
    else
      layer_norm_forward_scalar(x + r0 * D, w, b, y + r0 * D, mean ? mean + r0 : nullptr,
                                rstd ? rstd + r0 : nullptr, rn, D, eps);
  });
}

void layer_norm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                         int64_t N, int64_t D, float eps) {
  const bool simd = cpu_has_avx512();
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  if (chunks <= 1) {
    if (simd)
      avx512::layer_norm_backward(dy, x, w, dx, dw, db, N, D, eps);
    else
      layer_norm_backward_scalar(dy, x, w, dx, dw, db, N, D, eps);
    return;
  }
  std::vector<float> part(static_cast<size_t>(chunks * 2 * D), 0.0f);  // per-chunk (dw, db)
  for_each_row_chunk(N, D, [&](int64_t c, int64_t r0, int64_t rn) {
    float* pw = part.data() + c * 2 * D;
    if (simd)
      avx512::layer_norm_backward(dy + r0 * D, x + r0 * D, w, dx + r0 * D, pw, db ? pw + D : nullptr, rn, D,
                                  eps);
    else
      layer_norm_backward_scalar(dy + r0 * D, x + r0 * D, w, dx + r0 * D, pw, db ? pw + D : nullptr, rn, D, eps);
  });
  for (int64_t c = 0; c < chunks; ++c) {
    const float* pw = part.data() + c * 2 * D;
    for (int64_t d = 0; d < D; ++d) dw[d] += pw[d];
    if (db)
      for (int64_t d = 0; d < D; ++d) db[d] += pw[D + d];
  }
}

void activation_forward(ActivationKind k, const float* x, float* y, int64_t N, int64_t F) {
  bias_activation_forward(k, x, nullptr, y, N, F);
}

void bias_activation_forward(ActivationKind k, const float* x, const float* bias, float* y, int64_t N, int64_t F) {
  const bool simd = cpu_has_avx512();
  const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    if (!simd || !avx512::bias_activation_forward(k, x + r0 * in_row, bias, y + r0 * F, rn, F))
      bias_activation_forward_scalar(k, x + r0 * in_row, bias, y + r0 * F, rn, F);
  });
}

void activation_backward(ActivationKind k, const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
  const bool simd = cpu_has_avx512();
  const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    if (!simd || !avx512::activation_backward(k, dy + r0 * F, x + r0 * in_row, dx + r0 * in_row, rn, F))
      activation_backward_scalar(k, dy + r0 * F, x + r0 * in_row, dx + r0 * in_row, rn, F);
  });
}

// Element-wise kernels run over fixed chunks of kElemChunk elements (a multiple of 16, so every
// chunk but the last is whole vectors), in parallel above `min_parallel` elements; body(i0, m)
// handles elements [i0, i0 + m).
static constexpr int64_t kElemChunk = 16384;

template <typename Body>
static void for_each_elem_chunk(int64_t n, int64_t min_parallel, const Body& body) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static) if (n > min_parallel)
  for (int64_t c = 0; c < chunks; ++c) body(c * kElemChunk, std::min(kElemChunk, n - c * kElemChunk));
}

void add_forward(const float* a, const float* b, float* y, int64_t n) {
  const bool simd = cpu_has_avx512();
  for_each_elem_chunk(n, 65536, [&](int64_t i0, int64_t m) {
    if (simd)
      avx512::add_forward(a + i0, b + i0, y + i0, m);
    else
      add_forward_scalar(a + i0, b + i0, y + i0, m);
  });
}

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const bool simd = cpu_has_avx512();
  for_each_elem_chunk(n, 16384, [&](int64_t i0, int64_t m) {
    const uint64_t off = offset + static_cast<uint64_t>(i0);
    if (simd)
      avx512::dropout_forward(x + i0, y + i0, m, p, seed, off);
    else
      dropout_forward_scalar(x + i0, y + i0, m, p, seed, off);
  });
}

void bias_relu_dropout_forward(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                               const DropoutSpec& drop) {
  const bool simd = cpu_has_avx512();
  for_each_row_chunk(N, F, [&](int64_t, int64_t r0, int64_t rn) {
    const DropoutSpec d{drop.p, drop.seed, drop.offset + static_cast<uint64_t>(r0 * F)};
    if (simd)
      avx512::bias_relu_dropout_forward(x + r0 * F, bias, y + r0 * F, rn, F, d);
    else
      bias_relu_dropout_forward_scalar(x + r0 * F, bias, y + r0 * F, rn, F, d);
  });
}

void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const bool simd = cpu_has_avx512();
  for_each_elem_chunk(n, 65536, [&](int64_t i0, int64_t m) {
    if (simd)
      avx512::relu_dropout_backward(dy + i0, y + i0, dx + i0, m, p);
    else
      relu_dropout_backward_scalar(dy + i0, y + i0, dx + i0, m, p);
  });
}

// Columns are split in fixed blocks of kColChunk; each column still sums its rows in order.
static constexpr int64_t kColChunk = 256;

void bias_grad(const float* dy, float* db, int64_t N, int64_t F) {
  const bool simd = cpu_has_avx512();
  const int64_t chunks = (F + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (N * F > 65536 && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t f0 = c * kColChunk, m = std::min(kColChunk, F - f0);
    // The column block is strided in dy (row stride F).
    if (simd) {
      avx512::bias_grad(dy + f0, F, db + f0, N, m);
    } else {
      for (int64_t n = 0; n < N; ++n) add_forward_scalar(db + f0, dy + n * F + f0, db + f0, m);
    }
  }
}

void add_layer_norm_forward(const float* x, const float* r, const float* w, const float* b, float* z, float* y,
                            float* mean, float* rstd, int64_t N, int64_t D, float eps, const DropoutSpec* r_drop) {
  const bool simd = cpu_has_avx512();
  for_each_row_chunk(N, D, [&](int64_t, int64_t r0, int64_t rn) {
    float* sum = (z ? z : y) + r0 * D;  // the chunk's sum stays in cache for the LayerNorm
    float* m = mean ? mean + r0 : nullptr;
    float* s = rstd ? rstd + r0 : nullptr;
    const float* xc = x + r0 * D;
    const float* rc = r + r0 * D;
    const uint64_t off = r_drop ? r_drop->offset + static_cast<uint64_t>(r0 * D) : 0;
    if (simd) {
      if (r_drop)
        avx512::add_dropout_forward(xc, rc, sum, rn * D, r_drop->p, r_drop->seed, off);
      else
        avx512::add_forward(xc, rc, sum, rn * D);
      avx512::layer_norm_forward(sum, w, b, y + r0 * D, m, s, rn, D, eps);
    } else {
      if (r_drop)
        add_dropout_forward_scalar(xc, rc, sum, rn * D, r_drop->p, r_drop->seed, off);
      else
        add_forward_scalar(xc, rc, sum, rn * D);
      layer_norm_forward_scalar(sum, w, b, y + r0 * D, m, s, rn, D, eps);
    }
  });
}

void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset) {
  const bool simd = cpu_has_avx512();
  for_each_elem_chunk(n, 16384, [&](int64_t i0, int64_t m) {
    const uint64_t off = offset + static_cast<uint64_t>(i0);
    if (simd)
      avx512::add_dropout_forward(a + i0, x + i0, y + i0, m, p, seed, off);
    else
      add_dropout_forward_scalar(a + i0, x + i0, y + i0, m, p, seed, off);
  });
}

// Rows are independent: any schedule gives the same bits.
void cross_entropy_forward(const float* logits, const int32_t* target, float* loss, float* lse, int64_t N,
                           int64_t V, int32_t ignore_index, float label_smoothing) {
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n)
    ref::cross_entropy_forward<float>(logits + n * V, target + n, loss + n, lse + n, 1, V, ignore_index,
                                      label_smoothing);
}

void cross_entropy_backward(const float* logits, const int32_t* target, const float* lse, const float* scale,
                            float* dlogits, int64_t N, int64_t V, int32_t ignore_index, float label_smoothing) {
#pragma omp parallel for schedule(static) if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n)
    ref::cross_entropy_backward<float>(logits + n * V, target + n, lse + n, scale + n, dlogits + n * V, 1, V,
                                       ignore_index, label_smoothing);
}

}  // namespace tfm::kernels
