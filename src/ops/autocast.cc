// src/ops/autocast.cc — Autocast (include/tfm/autocast.h): the thread's scope state and its bfloat16
// weight copies, and the bf16 Linear forward (src/ops/bf16_linear.h).
#include "tfm/autocast.h"

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"
#include "ops/bf16_linear.h"

namespace tfm {
namespace {

// A weight's copy, keyed by where its data starts and how many floats it has: a contiguous weight's bfloat16
// copy depends on nothing else (an (out, in) view and an (in, out) one of the same data share it). The entry
// keeps the weight's storage alive, so no other tensor can take its address while the entry lives.
using Key = std::pair<const float*, int64_t>;
struct Entry {
  Tensor keep;
  std::shared_ptr<std::vector<uint16_t>> w16;
  bool current = false;  // w16 holds bf16 of the weight's values: rounded in this scope, or refreshed since the last
};
using Copies = std::map<Key, Entry>;

struct AutocastState {
  int depth = 0;
  Precision precision = Precision::FLOAT32;
  Copies own;                // the outermost scope's copies when it has no cache, dropped when it ends
  Copies* copies = nullptr;  // where the open scopes keep their copies: own, or the outermost scope's cache
};
thread_local AutocastState g_autocast;

// Opens a scope on this thread: its copies go to `copies` (a cache's), or with null to the outermost scope's own
// map. Nested scopes use the outermost scope's copies.
void enter_scope(Precision precision, Copies* copies) {
  if (precision == Precision::INT8)
    throw std::invalid_argument(
        "Autocast: precision int8 is for inference (InferenceMode); training runs in f32 or bf16");
  if (copies && g_autocast.depth > 0 && g_autocast.copies != copies)
    throw std::invalid_argument("Autocast: an inner scope was given a weight cache the outermost scope does not use");
  if (g_autocast.depth++ == 0) g_autocast.copies = copies ? copies : &g_autocast.own;
  g_autocast.precision = precision;
}

}  // namespace

struct Bf16WeightCache::Impl {
  Copies entries;
};
Bf16WeightCache::Bf16WeightCache() : impl_(std::make_unique<Impl>()) {}
Bf16WeightCache::~Bf16WeightCache() = default;
size_t Bf16WeightCache::size() const { return impl_->entries.size(); }
void Bf16WeightCache::clear() { impl_->entries.clear(); }

uint16_t* Bf16WeightCache::refresh(const float* data, int64_t n) {
  const auto it = impl_->entries.find(Key{data, n});
  if (it == impl_->entries.end()) return nullptr;
  it->second.current = true;
  return it->second.w16->data();
}

Autocast::Autocast(Precision precision) : previous_(g_autocast.precision) { enter_scope(precision, nullptr); }

Autocast::Autocast(Precision precision, Bf16WeightCache& copies) : previous_(g_autocast.precision) {
  enter_scope(precision, &copies.impl_->entries);
}

Autocast::~Autocast() {
  g_autocast.precision = previous_;
  if (--g_autocast.depth > 0) return;
  if (g_autocast.copies == &g_autocast.own) {
    g_autocast.own.clear();
  } else {  // the weights may change now: a copy is current again once its writer refreshes it
    for (auto& [key, e] : *g_autocast.copies) e.current = false;
  }
  g_autocast.copies = nullptr;
}

Precision Autocast::current_precision() { return g_autocast.depth > 0 ? g_autocast.precision : Precision::FLOAT32; }

size_t Autocast::cached_weights() { return g_autocast.copies ? g_autocast.copies->size() : 0; }

bool bf16_matmul_accelerated() { return kernels::cpu_has_bf16_dot(); }

namespace ops {

Bf16Weight autocast_weight(const Tensor& weight) {
  if (g_autocast.depth == 0 || g_autocast.precision != Precision::BFLOAT16) return nullptr;
  const int64_t n = weight.numel();
  auto [it, added] = g_autocast.copies->try_emplace(Key{weight.data(), n});
  Entry& e = it->second;
  if (added) {
    e.keep = weight.detach();  // the storage itself kept (a set_ on weight cannot free it)
    e.w16 = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n));
  }
  if (!e.current) {
    kernels::convert_to_bf16(weight.data(), n, e.w16->data());
    e.current = true;
  }
  return e.w16;
}

std::unique_ptr<uint16_t[]> bf16_rounded(const float* src, int64_t n) {
  std::unique_ptr<uint16_t[]> dst(new uint16_t[static_cast<size_t>(n)]);  // not value-initialized
  kernels::convert_to_bf16(src, n, dst.get());
  return dst;
}

std::unique_ptr<uint16_t[]> round_output_grad(const float* g, int64_t N, int64_t out, Tensor* bias_slot) {
  if (!bias_slot) return bf16_rounded(g, N * out);
  if (!bias_slot->defined()) *bias_slot = Tensor::zeros({out});
  std::unique_ptr<uint16_t[]> g16(new uint16_t[static_cast<size_t>(N * out)]);
  kernels::bias_grad_bf16(g, bias_slot->data(), g16.get(), N, out);
  return g16;
}

Tensor bf16_copy(const float* src, int64_t n) {
  Tensor t = Tensor::empty({(n + 1) / 2});
  kernels::convert_to_bf16(src, n, reinterpret_cast<uint16_t*>(t.data()));
  return t;
}

void linear_forward_bf16(int64_t N, int64_t in, int64_t out, const float* x, const std::vector<uint16_t>& w16,
                         const float* bias, float* y) {
  // y (N, out) = bf16(x) (N, in) · w16ᵀ (w16 is (out, in)) + bias
  kernels::gemm_bf16(false, true, N, out, in, x, in, w16.data(), in, 0.0f, y, out, bias);
}

}  // namespace ops
}  // namespace tfm
