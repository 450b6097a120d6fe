// src/tensor_impl.h — what a Tensor handle points to. Internal: ops and I/O may use it, users may not.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "tfm/autograd.h"
#include "tfm/tensor.h"

namespace tfm {

// Float32 values stored as int8 rows: value[r][c] = float(q[r·cols + c]) · scale[r] (an int8 directory's
// weight, tfm/models/quantize.h). `keeper` holds what q and scale point into.
struct Int8Rows {
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  int64_t rows = 0, cols = 0;
  bool file_pages = false;  // q lies in a read-only file mapping (drop_mapped_pages may give its pages back)
  // (q, scale) is what kernels::quantize_rows_s8 gives for the values q·scale, row by row: int8 packing may
  // take the integers as they are.
  bool fixed_point = false;
  std::shared_ptr<const void> keeper;
};

// 64-byte aligned bytes. Either owned (returned to the block cache on destruction) or borrowed from
// a keeper (e.g. a memory-mapped file) that outlives every tensor pointing into it.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  size_t capacity = 0;           // owned: size of the cached block behind ptr (≥ bytes)
  std::shared_ptr<void> keeper;  // set for borrowed memory; null when owned
  // Borrowed from a read-only mapping of a file (io::LoadOptions::read_only): nothing writes these
  // bytes, so their resident pages may be dropped (drop_file_pages) and are read again from the file
  // on the next touch.
  bool file_pages = false;
  // Values computed on first use: when set, ptr's bytes are unset until `fill` has written them, which
  // materialize() does once (thread-safe) on the first access through the tensor API (data(), copy_).
  // So a tensor nothing reads never touches its memory.
  std::function<void(void* ptr)> fill;
  std::once_flag filled;
  std::atomic<bool> is_filled{false};  // fill has run
  // Set when the Float32 values are int8 rows (Int8Rows; with `fill` their dequantization): InferenceMode's
  // int8 packing reads these instead, and never materializes the floats.
  std::shared_ptr<const Int8Rows> int8_rows;
  void materialize() {
    if (fill && !is_filled.load(std::memory_order_acquire))
      std::call_once(filled, [this] {
        fill(ptr);
        is_filled.store(true, std::memory_order_release);
      });
  }
  ~Storage();
};
// Owned storage from the process-wide block cache (src/tensor.cc): freed blocks are kept by size
// class and handed out again, so the steady state of an inference loop or a training step, which
// asks for the same sizes every iteration, does not reach malloc or fault in fresh pages.
// The cache holds at most TFM_ALLOC_CACHE_MB (default 2048) MiB of idle blocks; 0 disables it.
std::shared_ptr<Storage> allocate_storage(size_t bytes);
// Statistics for tests and benchmarks: blocks served from the cache vs. from malloc.
struct AllocatorStats {
  uint64_t cache_hits = 0, mallocs = 0;
  size_t cached_bytes = 0;
};
AllocatorStats allocator_stats();
void allocator_release_cache();  // frees every idle block

struct TensorImpl {
  Shape shape;
  DType dtype = DType::FLOAT32;
  int64_t numel = 0;
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  bool requires_grad = false;
  Tensor grad;                     // leaves: accumulated gradient
  std::shared_ptr<Node> grad_fn;   // non-leaves: the node that produced this tensor
};

// A tensor that views `bytes` owned by `keeper` (zero-copy loading). ptr must be 4-byte aligned
// for Float32. file_pages: the bytes lie in a read-only file mapping (Storage::file_pages).
Tensor tensor_from_borrowed(const Shape& shape, DType dtype, void* ptr, std::shared_ptr<void> keeper,
                            bool file_pages = false);

// Gives the process's resident pages of t's bytes back to the kernel (madvise MADV_DONTNEED on the
// whole pages inside them) when t's storage has file_pages; the values are unchanged, the next read
// of a dropped page takes it from the page cache or the file again. Returns the bytes of whole pages
// advised (0: not file pages, or no whole page inside). For a weight read once and kept in another
// form (InferenceMode's packed copies), so the process does not hold both.
size_t drop_file_pages(const Tensor& t);
// The same for any bytes of a read-only file mapping (the caller's to know): the whole pages inside
// [p, p + bytes) given back. Returns the bytes advised.
size_t drop_mapped_pages(const void* p, size_t bytes);

// A Float32 matrix (rows, cols) whose values are int8 rows' (q · scale per row), computed only when
// first read (Storage::fill, Storage::int8_rows): an int8 directory's weight that int8 inference packs
// from its integers, never holding the floats.
Tensor tensor_from_int8_rows(std::shared_ptr<const Int8Rows> rows);
// Where t's values start, without computing them (a key for t's storage; Tensor::data() would
// materialize a lazy tensor).
const void* storage_address(const Tensor& t);
// Whether t's values are in memory (false only for a lazy tensor not yet read).
bool materialized(const Tensor& t);

}  // namespace tfm
