// src/ops/inference.cc — InferenceMode (include/tfm/inference.h), its per-scope cache of packed
// Linear weights (src/ops/packed_linear.h), and PackedWeightCache, the cache a caller keeps across scopes.
#include "tfm/inference.h"

#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"
#include "ops/packed_linear.h"
#include "quote.h"
#include "tensor_impl.h"

namespace tfm {
namespace {

// Key: where the weight's data starts, its shape (out, in), and the precision. The entry keeps
// the weight's storage alive, so no other tensor can reuse the address while the scope lives.
using Key = std::tuple<const float*, int64_t, int64_t, Precision>;
struct Entry {
  Tensor keep;
  std::shared_ptr<const kernels::PackedWeight> packed;
};
using Cache = std::map<Key, Entry>;

struct ScopeState {
  int depth = 0;
  Precision precision = Precision::FLOAT32;
  Cache own;                  // the outermost scope's cache, cleared when it ends
  std::vector<Cache*> cache;  // per open scope, innermost last: where it packs (own or a PackedWeightCache)
};
thread_local ScopeState g_scope;

kernels::MatmulPrecision kernel_precision(Precision p) {
  switch (p) {
    case Precision::BFLOAT16: return kernels::MatmulPrecision::MATMUL_BF16;
    case Precision::INT8: return kernels::MatmulPrecision::MATMUL_INT8;
    case Precision::FLOAT32: break;
  }
  return kernels::MatmulPrecision::MATMUL_F32;
}

// Packs the rows [r0, r0 + out) of an int8 weight for `precision` from their float32 values q·scale, computed into
// a buffer of their own: an anonymous mapping, whose pages go back to the system when it is unmapped after the
// packing (a malloc'd one that size would leave the heap holding freed pages between the packed weights). The
// integers' file pages are given back as they are read, so the run never holds them beside the floats.
std::shared_ptr<const kernels::PackedWeight> pack_weight_from_int8_rows(const Int8Rows& rows, int64_t r0, int64_t out,
                                                                        kernels::MatmulPrecision precision) {
  const int64_t in = rows.cols;
  const size_t bytes = static_cast<size_t>(out * in) * sizeof(float);
  void* buffer = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED) throw std::bad_alloc();
  const std::unique_ptr<void, std::function<void(void*)>> unmap(buffer, [bytes](void* p) { ::munmap(p, bytes); });
  float* w = static_cast<float*>(buffer);                               // (out, in)
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / in);  // rows of about 1 MiB of integers
  for (int64_t r = 0; r < out; r += chunk) {
    const int64_t n = std::min(chunk, out - r);
    const int8_t* q = rows.q + (r0 + r) * in;
    kernels::dequantize_rows_s8(q, n, in, in, rows.scale + r0 + r, w + r * in);
    if (rows.file_pages) drop_mapped_pages(q, static_cast<size_t>(n * in));
  }
  if (rows.file_pages) drop_mapped_pages(rows.q + r0 * in, static_cast<size_t>(out * in));  // (the chunks' edges)
  return kernels::pack_weight(w, out, in, in, precision);
}

}  // namespace

bool int8_matmul_accelerated() { return kernels::cpu_has_int8_dot() || kernels::cpu_has_avx2(); }

struct PackedWeightCache::Impl {
  Cache entries;
};
PackedWeightCache::PackedWeightCache() : impl_(std::make_unique<Impl>()) {}
PackedWeightCache::~PackedWeightCache() = default;
size_t PackedWeightCache::size() const { return impl_->entries.size(); }
void PackedWeightCache::clear() { impl_->entries.clear(); }

InferenceMode::InferenceMode(Precision precision)
    : previous_precision_(g_scope.precision), outermost_(g_scope.depth == 0) {
  g_scope.cache.push_back(outermost_ ? &g_scope.own : g_scope.cache.back());
  ++g_scope.depth;
  g_scope.precision = precision;
}

InferenceMode::InferenceMode(Precision precision, PackedWeightCache& cache)
    : previous_precision_(g_scope.precision), outermost_(g_scope.depth == 0) {
  g_scope.cache.push_back(&cache.impl_->entries);
  ++g_scope.depth;
  g_scope.precision = precision;
}

InferenceMode::~InferenceMode() {
  --g_scope.depth;
  g_scope.precision = previous_precision_;
  g_scope.cache.pop_back();
  if (outermost_) g_scope.own.clear();
}

size_t InferenceMode::cached_weights() { return g_scope.cache.empty() ? 0 : g_scope.cache.back()->size(); }

Precision InferenceMode::current_precision() {
  return g_scope.depth > 0 ? g_scope.precision : Precision::FLOAT32;
}

namespace ops {

bool inference_scope_active() { return g_scope.depth > 0; }

bool linear_forward_packed(int64_t N, const float* x, const Tensor& weight, const float* bias,
                           float* y) {
  if (g_scope.depth == 0) return false;
  const int64_t out = weight.size(0), in = weight.size(1);
  if (out == 0 || in == 0) return false;  // degenerate: the plain path handles it
  // storage_address: the key must not compute a lazy weight's values (an int8 directory's, below).
  const Key key{static_cast<const float*>(storage_address(weight)), out, in, g_scope.precision};
  Cache& cache = *g_scope.cache.back();
  auto it = cache.find(key);
  if (it == cache.end()) {
    // A weight stored as int8 rows (an int8 directory's) packs for int8 from its integers: the same packed
    // weight as from its float values (the stored rows are quantize's fixed point), without computing them.
    const Int8Rows* rows = weight.impl()->storage->int8_rows.get();
    const int64_t at = weight.impl()->offset;  // elements into the storage: whole rows of a narrow0 view
    std::shared_ptr<const kernels::PackedWeight> packed;
    if (g_scope.precision == Precision::INT8 && rows && rows->fixed_point && rows->cols == in && at % in == 0 &&
        at / in + out <= rows->rows) {
      packed = kernels::pack_weight_int8(rows->q + at, in, rows->scale + at / in, out, in);
      if (rows->file_pages) drop_mapped_pages(rows->q + at, static_cast<size_t>(out * in));
    } else if (rows && !materialized(weight) && rows->cols == in && at % in == 0 && at / in + out <= rows->rows) {
      // Another precision (or rows off the fixed point) of such a weight whose values nothing has read: the
      // values q·scale of these rows (what materializing it computes) into a buffer that lives for the packing
      // only (pack_weight copies), so the run holds the packed weight and not the float32 matrix beside it, as a
      // float32 directory's run holds its packed weights and not the file's pages. The tensor stays unread.
      packed = pack_weight_from_int8_rows(*rows, at / in, out, kernel_precision(g_scope.precision));
    } else
      packed = kernels::pack_weight(weight.data(), out, in, in, kernel_precision(g_scope.precision));
    Entry e{weight.detach(), std::move(packed)};  // the storage itself kept (a set_ on weight cannot free it)
    it = cache.emplace(key, std::move(e)).first;
    // A weight mapped read-only from its file (WeightsLoad::MAP_READ_ONLY) is read here once: the packed
    // copy is what runs, so its float32 pages go back (read again from the file if touched).
    drop_file_pages(weight);
  }
  kernels::gemm_packed(N, x, in, *it->second.packed, bias, y, out);
  return true;
}

}  // namespace ops
}  // namespace tfm
