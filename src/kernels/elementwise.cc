// src/kernels/elementwise.cc — the element-wise kernels' dispatching entry points (add_forward, mul_forward,
// dropout_forward, add_dropout_forward, bias_grad, bias_grad_bf16 and mul_bias_grad_bf16, transpose; copy_bytes,
// which has no twin) and their float scalar twins. The twins instantiate the templates of elementwise_scalar.h
// (but transpose_scalar, a plain copy loop written here); the entry points run fixed chunks (parallel_chunks.h),
// so results never depend on the thread count, on the AVX-512 bodies of elementwise_avx512.cc when
// cpu_has_avx512(), else on the AVX2 ones of elementwise_avx2.cc when cpu_has_avx2().
// Contracts in kernels.h.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/elementwise_scalar.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"
#include "kernels/parallel_chunks.h"

namespace tfm::kernels {

void add_forward_scalar(const float* a, const float* b, float* y, int64_t n) {
  add_forward_scalar<float>(a, b, y, n);
}
void mul_forward_scalar(const float* a, const float* b, float* y, int64_t n) { mul_forward_scalar<float>(a, b, y, n); }
void dropout_forward_scalar(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  dropout_forward_scalar<float>(x, y, n, p, seed, offset);
}
void bias_grad_scalar(const float* dy, float* db, int64_t N, int64_t F) {
  bias_grad_scalar<float>(dy, F, db, N, F);
}
void transpose_scalar(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * sl + c];
}
void add_dropout_forward_scalar(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                                uint64_t offset) {
  add_dropout_forward_scalar<float>(a, x, y, n, p, seed, offset);
}

void transpose(const float* src, int64_t sl, int64_t rows, int64_t cols, float* dst, int64_t ld) {
  if (cpu_has_avx512())
    transpose_avx512(src, sl, rows, cols, dst, ld);
  else if (cpu_has_avx2())
    transpose_avx2(src, sl, rows, cols, dst, ld);
  else
    transpose_scalar(src, sl, rows, cols, dst, ld);
}

namespace {

// y = a op b over the element-wise chunks, each on the body this CPU has: the AVX-512 one, else the AVX2 one,
// else the twin.
using Binary = void (*)(const float*, const float*, float*, int64_t);
void binary_chunks(const float* a, const float* b, float* y, int64_t n, Binary avx512, Binary avx2, Binary twin) {
  const Binary body = cpu_has_avx512() ? avx512 : cpu_has_avx2() ? avx2 : twin;
  for_each_elem_chunk(n, 65536, [&](int64_t i0, int64_t m) { body(a + i0, b + i0, y + i0, m); });
}

}  // namespace

void add_forward(const float* a, const float* b, float* y, int64_t n) {
  binary_chunks(a, b, y, n, add_forward_avx512, add_forward_avx2, add_forward_scalar);
}

void mul_forward(const float* a, const float* b, float* y, int64_t n) {
  binary_chunks(a, b, y, n, mul_forward_avx512, mul_forward_avx2, mul_forward_scalar);
}

void copy_bytes(const void* src, void* dst, size_t bytes) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for_each_elem_chunk(static_cast<int64_t>(bytes), 256 << 10, [&](int64_t i0, int64_t m) {
    std::memcpy(d + i0, s + i0, static_cast<size_t>(m));  // the chunks, of bytes here
  });
}

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
  for_each_elem_chunk(n, 16384, [&](int64_t i0, int64_t m) {
    const uint64_t off = offset + static_cast<uint64_t>(i0);
    if (simd)
      dropout_forward_avx512(x + i0, y + i0, m, p, seed, off);
    else if (avx2)
      dropout_forward_avx2(x + i0, y + i0, m, p, seed, off);
    else
      dropout_forward_scalar(x + i0, y + i0, m, p, seed, off);
  });
}

// Columns are split in fixed blocks of kColChunk; each column still sums its rows in order.
static constexpr int64_t kColChunk = 256;

void bias_grad(const float* dy, float* db, int64_t N, int64_t F) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
  const int64_t chunks = (F + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (N * F > 65536 && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t f0 = c * kColChunk, m = std::min(kColChunk, F - f0);
    // The column block is strided in dy (row stride F).
    if (simd)
      bias_grad_avx512(dy + f0, F, db + f0, N, m);
    else if (avx2)
      bias_grad_avx2(dy + f0, F, db + f0, N, m);
    else
      bias_grad_scalar<float>(dy + f0, F, db + f0, N, m);
  }
}

void bias_grad_bf16_scalar(const float* dy, float* db, uint16_t* dy16, int64_t N, int64_t F) {
  bias_grad_scalar(dy, db, N, F);
  for (int64_t i = 0; i < N * F; ++i) dy16[i] = float_to_bf16(dy[i]);
}

void mul_bias_grad_bf16_scalar(const float* a, const float* b, float* db, uint16_t* dy16, int64_t N, int64_t F) {
  std::vector<float> dy(static_cast<size_t>(N * F));
  mul_forward_scalar(a, b, dy.data(), N * F);
  bias_grad_bf16_scalar(dy.data(), db, dy16, N, F);
}

// The column blocks of bias_grad, each also rounding its block of a (⊙ b) on AVX-512; elsewhere mul_forward
// into a float32 dy, then bias_grad and convert_to_bf16 (the same values).
void mul_bias_grad_bf16(const float* a, const float* b, float* db, uint16_t* dy16, int64_t N, int64_t F) {
  if (!cpu_has_avx512()) {
    std::vector<float> product;
    if (b) {
      product.resize(static_cast<size_t>(N * F));
      mul_forward(a, b, product.data(), N * F);
      a = product.data();
    }
    bias_grad(a, db, N, F);
    convert_to_bf16(a, N * F, dy16);
    return;
  }
  const int64_t chunks = (F + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (N * F > 65536 && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t f0 = c * kColChunk, m = std::min(kColChunk, F - f0);
    if (b)
      mul_bias_grad_bf16_avx512(a + f0, b + f0, F, db + f0, dy16 + f0, N, m);
    else
      bias_grad_bf16_avx512(a + f0, F, db + f0, dy16 + f0, N, m);
  }
}

void bias_grad_bf16(const float* dy, float* db, uint16_t* dy16, int64_t N, int64_t F) {
  mul_bias_grad_bf16(dy, nullptr, db, dy16, N, F);
}

void add_dropout_forward(const float* a, const float* x, float* y, int64_t n, float p, uint64_t seed,
                         uint64_t offset) {
  const bool simd = cpu_has_avx512(), avx2 = !simd && cpu_has_avx2();
  for_each_elem_chunk(n, 16384, [&](int64_t i0, int64_t m) {
    const uint64_t off = offset + static_cast<uint64_t>(i0);
    if (simd)
      add_dropout_forward_avx512(a + i0, x + i0, y + i0, m, p, seed, off);
    else if (avx2)
      add_dropout_forward_avx2(a + i0, x + i0, y + i0, m, p, seed, off);
    else
      add_dropout_forward_scalar(a + i0, x + i0, y + i0, m, p, seed, off);
  });
}

}  // namespace tfm::kernels
