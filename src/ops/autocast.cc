// src/ops/autocast.cc — Autocast (include/tfm/autocast.h): the thread's scope state and its bfloat16
// weight copies, and the bf16 Linear forward (src/ops/bf16_linear.h).
#include "tfm/autocast.h"

#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"
#include "ops/bf16_linear.h"

namespace tfm {
namespace {

// Key: where the weight's data starts and its shape (out, in). The entry keeps the weight's storage
// alive, so no other tensor can take its address while the scope lives.
using Key = std::tuple<const float*, int64_t, int64_t>;
struct Entry {
  Tensor keep;
  ops::Bf16Weight w16;
};

struct AutocastState {
  int depth = 0;
  Precision precision = Precision::FLOAT32;
  std::map<Key, Entry> weights;  // the outermost scope's, dropped when it ends
};
thread_local AutocastState g_autocast;

}  // namespace

Autocast::Autocast(Precision precision) : previous_(g_autocast.precision) {
  if (precision == Precision::INT8)
    throw std::invalid_argument("Autocast: precision int8 is for inference (InferenceMode); training runs in f32 or bf16");
  ++g_autocast.depth;
  g_autocast.precision = precision;
}

Autocast::~Autocast() {
  g_autocast.precision = previous_;
  if (--g_autocast.depth == 0) g_autocast.weights.clear();
}

Precision Autocast::current_precision() { return g_autocast.depth > 0 ? g_autocast.precision : Precision::FLOAT32; }

size_t Autocast::cached_weights() { return g_autocast.weights.size(); }

bool bf16_matmul_accelerated() { return kernels::cpu_has_bf16_dot(); }

namespace ops {

Bf16Weight autocast_weight(const Tensor& weight) {
  if (g_autocast.depth == 0 || g_autocast.precision != Precision::BFLOAT16) return nullptr;
  const int64_t out = weight.size(0), in = weight.size(1);
  const Key key{weight.data(), out, in};
  auto it = g_autocast.weights.find(key);
  if (it == g_autocast.weights.end()) {
    auto w16 = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(out * in));
    kernels::convert_to_bf16(weight.data(), out * in, w16->data());
    it = g_autocast.weights.emplace(key, Entry{weight, std::move(w16)}).first;
  }
  return it->second.w16;
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
