// bench/bench_activation.cc — the activation kernels alone, one thread, in elements per second: the
// AVX-512 and AVX2 bodies against their scalar twin for the forward (bias + activation) and the backward, at the
// FFN shape of the decoder LM's nanogpt-baby preset (N = B·T = 12·64 rows, F = 4·128 = 512). A body the CPU
// lacks reports an error instead of a time.
// Run: build/bench/bench_activation --benchmark_min_time=0.3 [--benchmark_filter=gelu]
// To add a kind: a line in kKinds.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"

namespace {

using tfm::Activation;
namespace k = tfm::kernels;

constexpr int64_t kN = 12 * 64, kF = 512;

// x, bias, dx are twice as wide for the gated kinds ([a | b] rows).
struct Operands {
  std::vector<float> x, bias, y, dy, dx;
  explicit Operands(Activation kind)
      : x(kN * kF * (tfm::activation_is_gated(kind) ? 2 : 1)), bias(x.size() / kN), y(kN * kF),
        dy(kN * kF), dx(x.size()) {
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0.f, 1.f);  // pre-activations of a trained FFN are ~N(0, 1)
    for (auto& v : x) v = n(rng);
    for (auto& v : bias) v = 0.1f * n(rng);
    for (auto& v : dy) v = n(rng);
  }
};

enum class Body { SCALAR, AVX512, AVX2 };

// False (and the benchmark skipped) when the CPU lacks the body.
bool have(benchmark::State& st, Body body) {
  if (body == Body::AVX512 && !k::cpu_has_avx512()) return st.SkipWithError("no AVX-512"), false;
  if (body == Body::AVX2 && !k::cpu_has_avx2()) return st.SkipWithError("no AVX2"), false;
  return true;
}

void forward(benchmark::State& st, Activation kind, Body body) {
  Operands o(kind);
  if (!have(st, body)) return;
  for (auto _ : st) {
    const bool done =
        (body == Body::AVX512 &&
         k::bias_activation_forward_avx512(kind, o.x.data(), o.bias.data(), o.y.data(), kN, kF)) ||
        (body == Body::AVX2 && k::bias_activation_forward_avx2(kind, o.x.data(), o.bias.data(), o.y.data(), kN, kF));
    if (!done) k::bias_activation_forward_scalar(kind, o.x.data(), o.bias.data(), o.y.data(), kN, kF);
    benchmark::DoNotOptimize(o.y.data());
  }
  st.SetItemsProcessed(st.iterations() * kN * kF);
}

void backward(benchmark::State& st, Activation kind, Body body) {
  Operands o(kind);
  if (!have(st, body)) return;
  for (auto _ : st) {
    const bool done =
        (body == Body::AVX512 && k::activation_backward_avx512(kind, o.dy.data(), o.x.data(), o.dx.data(), kN, kF)) ||
        (body == Body::AVX2 && k::activation_backward_avx2(kind, o.dy.data(), o.x.data(), o.dx.data(), kN, kF));
    if (!done) k::activation_backward_scalar(kind, o.dy.data(), o.x.data(), o.dx.data(), kN, kF);
    benchmark::DoNotOptimize(o.dx.data());
  }
  st.SetItemsProcessed(st.iterations() * kN * kF);
}

struct Kind {
  const char* name;
  Activation kind;
};
const Kind kKinds[] = {{"relu", Activation::RELU},   {"gelu", Activation::GELU},
                       {"gelu_tanh", Activation::GELU_TANH}, {"glu", Activation::GLU},
                       {"geglu", Activation::GEGLU}, {"swiglu", Activation::SWIGLU}};

const int kRegistered = [] {
  for (const Kind& kd : kKinds)
    for (const auto& [body, name] :
         {std::pair{Body::SCALAR, "scalar"}, {Body::AVX512, "avx512"}, {Body::AVX2, "avx2"}}) {
      const std::string suffix = std::string(kd.name) + "/" + name;
      benchmark::RegisterBenchmark(("forward/" + suffix).c_str(), forward, kd.kind, body);
      benchmark::RegisterBenchmark(("backward/" + suffix).c_str(), backward, kd.kind, body);
    }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
