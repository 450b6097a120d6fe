// src/kernels/parallel_chunks.h — the fixed work split shared by the row-wise and element-wise
// dispatching kernels (layer_norm.cc, rms_norm.cc, activation.cc, elementwise.cc). Chunks depend only on the
// sizes, never on the thread count, and each chunk is computed by one thread in a fixed order, so
// results are bitwise the same for any number of threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tfm::kernels {

// Rows are processed in chunks of kRowChunk; each chunk is independent, so any schedule gives the
// same bits. Parameter-gradient reductions (LayerNorm's dw, db; RMSNorm's dw) sum per-chunk partials
// in chunk order.
inline constexpr int64_t kRowChunk = 64;

// n zeroed floats for those per-chunk partials: the calling thread's buffer, grown once to the
// largest n it has needed (no allocation in the steady state) and written by the chunks' threads.
// Valid until the calling thread's next call, so a reduction takes it once and sums it before
// returning.
inline float* zeroed_chunk_partials(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  std::fill_n(buf.data(), n, 0.0f);
  return buf.data();
}

// Calls body(c, r0, rn) for chunk c = rows [r0, r0 + rn), in parallel when N·width is large enough to
// pay for the threads. The chunking depends only on N, never on the thread count.
template <typename Body>
void for_each_row_chunk(int64_t N, int64_t width, const Body& body) {
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static) if (N * width > 32768)
  for (int64_t c = 0; c < chunks; ++c) body(c, c * kRowChunk, std::min(kRowChunk, N - c * kRowChunk));
}

// Element-wise kernels run over fixed chunks of kElemChunk elements (a multiple of 16, so every
// chunk but the last is whole vectors), in parallel above `min_parallel` elements; body(i0, m)
// handles elements [i0, i0 + m).
inline constexpr int64_t kElemChunk = 16384;

template <typename Body>
void for_each_elem_chunk(int64_t n, int64_t min_parallel, const Body& body) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static) if (n > min_parallel)
  for (int64_t c = 0; c < chunks; ++c) body(c * kElemChunk, std::min(kElemChunk, n - c * kElemChunk));
}

}  // namespace tfm::kernels
