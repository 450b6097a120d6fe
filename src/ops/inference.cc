// src/ops/inference.cc — InferenceMode (include/tfm/inference.h), its per-scope cache of packed
// Linear weights (src/ops/packed_linear.h), and PackedWeightCache, the cache a caller keeps across scopes.
#include "tfm/inference.h"

#include <map>
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
