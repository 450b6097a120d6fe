// src/ops/inference.cc — InferenceMode (include/tfm/inference.h) and its per-scope cache of packed
// Linear weights (src/ops/packed_linear.h).
#include "tfm/inference.h"

#include <map>
#include <stdexcept>
#include <tuple>

#include "kernels/gemm_packed.h"
#include "ops/packed_linear.h"
#include "quote.h"

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
  Precision precision = Precision::Float32;
  Cache cache;  // owned by the outermost scope, cleared when it ends
};
thread_local ScopeState g_scope;

kernels::MatmulPrecision kernel_precision(Precision p) {
  return p == Precision::BFloat16 ? kernels::MatmulPrecision::MATMUL_BF16
                                  : kernels::MatmulPrecision::MATMUL_F32;
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "f32" || name == "float32") return Precision::Float32;
  if (name == "bf16" || name == "bfloat16") return Precision::BFloat16;
  throw std::invalid_argument("unknown precision " + quote_name(name) + " (expected f32 or bf16)");
}

const char* precision_name(Precision p) { return p == Precision::BFloat16 ? "bf16" : "f32"; }

InferenceMode::InferenceMode(Precision precision)
    : previous_precision_(g_scope.precision), outermost_(g_scope.depth == 0) {
  ++g_scope.depth;
  g_scope.precision = precision;
}

InferenceMode::~InferenceMode() {
  --g_scope.depth;
  g_scope.precision = previous_precision_;
  if (outermost_) g_scope.cache.clear();
}

size_t InferenceMode::cached_weights() { return g_scope.cache.size(); }

Precision InferenceMode::current_precision() {
  return g_scope.depth > 0 ? g_scope.precision : Precision::Float32;
}

namespace ops {

bool linear_forward_packed(int64_t N, const float* x, const Tensor& weight, const float* bias,
                           float* y) {
  if (g_scope.depth == 0) return false;
  const int64_t out = weight.size(0), in = weight.size(1);
  if (out == 0 || in == 0) return false;  // degenerate: the plain path handles it
  const Key key{weight.data(), out, in, g_scope.precision};
  auto it = g_scope.cache.find(key);
  if (it == g_scope.cache.end()) {
    Entry e{weight, kernels::pack_weight(weight.data(), out, in, in, kernel_precision(g_scope.precision))};
    it = g_scope.cache.emplace(key, std::move(e)).first;
  }
  kernels::gemm_packed(N, x, in, *it->second.packed, bias, y, out);
  return true;
}

}  // namespace ops
}  // namespace tfm
