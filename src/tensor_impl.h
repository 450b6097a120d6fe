// src/tensor_impl.h — what a Tensor handle points to. Internal: ops and I/O may use it, users may not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tfm/autograd.h"
#include "tfm/tensor.h"

namespace tfm {

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

}  // namespace tfm
