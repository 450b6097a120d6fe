// tests/data/heap_counter.h — a test binary's heap, counted: included by exactly one source of a
// test executable, it replaces the global operator new / delete with ones that count the live heap
// bytes and their peak (each block carries its size in a 16-byte header), so the peak a call adds is
// exact and the same on every machine. Used by the memory tests of the data readers (bpe_memory_test.cc,
// tsv_memory_test.cc) and of the dataset (train/dataset_memory_test.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tfm::testing::heap {

inline std::atomic<int64_t> g_live{0}, g_peak{0};
inline constexpr size_t kHeader = 16;  // keeps the block 16-byte aligned

inline void* counted_alloc(size_t n) {
  void* p = std::malloc(n + kHeader);
  if (!p) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const int64_t live = g_live += static_cast<int64_t>(n);
  for (int64_t peak = g_peak.load(); live > peak && !g_peak.compare_exchange_weak(peak, live);) {
  }
  return static_cast<char*>(p) + kHeader;
}

inline void counted_free(void* q) {
  if (!q) return;
  void* p = static_cast<char*>(q) - kHeader;
  g_live -= static_cast<int64_t>(*static_cast<size_t*>(p));
  std::free(p);
}

// The peak of live heap bytes while f runs, above what was live when it started.
template <class F>
int64_t peak_added(F&& f) {
  const int64_t base = g_live.load();
  g_peak = base;
  f();
  return g_peak.load() - base;
}

}  // namespace tfm::testing::heap

void* operator new(size_t n) { return tfm::testing::heap::counted_alloc(n); }
void* operator new[](size_t n) { return tfm::testing::heap::counted_alloc(n); }
void operator delete(void* p) noexcept { tfm::testing::heap::counted_free(p); }
void operator delete[](void* p) noexcept { tfm::testing::heap::counted_free(p); }
void operator delete(void* p, size_t) noexcept { tfm::testing::heap::counted_free(p); }
void operator delete[](void* p, size_t) noexcept { tfm::testing::heap::counted_free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer is one, freed by the plain delete): a sanitizer's
// runtime replaces them apart from the plain ones, so a block of its nothrow new would reach counted_free.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return tfm::testing::heap::counted_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { tfm::testing::heap::counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { tfm::testing::heap::counted_free(p); }
