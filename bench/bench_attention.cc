// bench/bench_attention.cc — the flash-attention kernels alone, forward and backward, in GFLOP/s.
//
// FLOPs as in issue 3: forward = QKᵀ + AV in full = 4·B·H·L·S·Dh; backward = 2× forward (the
// kernel itself does 5 products, not 4, because it recomputes S: its real rate is 5/4 of the
// figure shown). Causal counts the full square too, so its figure shows what skipping saves.
//
// Shapes, batch-first (B, N, H·Dh) packed like the encoder layer's in-projection output:
//   L  B 1, H 4, N 2048, Dh 64   (config L: attention is ~60% of its training FLOPs)
//   M  B 8, H 8, N 128,  Dh 64   (config M)
//   S  B 32, H 4, N 32,  Dh 16   (config S)
//   baby  B 12, H 4, N 64, Dh 32 (the nanogpt-baby preset's decoder: read its causal rows)
// and decoding (forward only): one query row of GPT-2 small's shape (H 12, Dh 64) against S cached keys,
// K and V rows H·Dh apart as in the key/value cache (ops/attention_cache.cc), beams B 1 and 4:
//   dec/S256/B1 … dec/S1024/B4, /hot (K and V left in the caches) and /cold (read from memory)
//   (FLOPs counted as QKᵀ + AV: 4·B·H·S·Dh)
// Each shape also runs /bf16 (AttentionParams::bf16: bfloat16 operands, float32 sums; only on CPUs with
// AVX512-BF16, where a bf16-trained model runs it), without dropout.
// Run: build/bench/bench_attention --benchmark_min_time=0.3 [--benchmark_filter=L/]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"

namespace {

struct Shape {
  const char* name;
  int64_t B, H, N, Dh;
};
const Shape kShapes[] = {{"L", 1, 4, 2048, 64}, {"M", 8, 8, 128, 64}, {"S", 32, 4, 32, 16}, {"baby", 12, 4, 64, 32}};

// q, k, v, o, dout, dq, dk, dv in the (B, N, 3·E) in-projection layout of one packed buffer each.
struct Operands {
  std::vector<float> qkv, o, dout, dqkv, lse;
  tfm::kernels::AttentionParams p;
  Operands(const Shape& s, bool causal, float dropout, bool bf16) {
    const int64_t E = s.H * s.Dh;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    qkv.resize(s.B * s.N * 3 * E);
    dqkv.resize(qkv.size());
    o.resize(s.B * s.N * E);
    dout.resize(o.size());
    lse.resize(s.B * s.H * s.N);
    for (float& x : qkv) x = u(rng);
    for (float& x : dout) x = u(rng);
    p.B = s.B, p.H = s.H, p.L = s.N, p.S = s.N, p.Dh = s.Dh;
    p.q = qkv.data(), p.k = qkv.data() + E, p.v = qkv.data() + 2 * E;
    p.q_sb = p.k_sb = p.v_sb = s.N * 3 * E;
    p.q_sl = p.k_sl = p.v_sl = 3 * E;
    p.o = o.data(), p.o_sb = s.N * E, p.o_sl = E;
    p.causal = causal;
    p.scale = 1.0f / std::sqrt(static_cast<float>(s.Dh));
    p.dropout_p = dropout;
    p.seed = 1;
    p.lse = lse.data();
    p.bf16 = bf16;
  }
};

double forward_flop(const Shape& s) { return 4.0 * s.B * s.H * double(s.N) * s.N * s.Dh; }

void forward(benchmark::State& state, const Shape& s, int threads, bool causal, float dropout, bool bf16) {
  omp_set_num_threads(threads);
  Operands op(s, causal, dropout, bf16);
  for (auto _ : state) {
    tfm::kernels::attention_forward(op.p);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(1e-9 * forward_flop(s), benchmark::Counter::kIsIterationInvariantRate);
}

void backward(benchmark::State& state, const Shape& s, int threads, bool causal, float dropout, bool bf16) {
  omp_set_num_threads(threads);
  Operands op(s, causal, dropout, bf16);
  tfm::kernels::attention_forward(op.p);
  const int64_t E = s.H * s.Dh;
  float* dq = op.dqkv.data();
  for (auto _ : state) {
    tfm::kernels::attention_backward(op.p, op.dout.data(), dq, dq + E, dq + 2 * E);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2e-9 * forward_flop(s), benchmark::Counter::kIsIterationInvariantRate);
}

// One decoding step: B rows of one query each against S cached keys (separate K and V, row stride H·Dh).
// cold: before each call 64 MB are streamed through the caches (untimed), so K and V come from memory as
// in a real decoded token, where the layer's weights evict them between steps.
void decode(benchmark::State& state, int64_t B, int64_t S, int threads, bool cold) {
  omp_set_num_threads(threads);
  const int64_t H = 12, Dh = 64, E = H * Dh;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(B * E), k(B * S * E), v(B * S * E), o(B * E);
  for (auto* buf : {&q, &k, &v})
    for (float& x : *buf) x = u(rng);
  tfm::kernels::AttentionParams p;
  p.B = B, p.H = H, p.L = 1, p.S = S, p.Dh = Dh;
  p.q = q.data(), p.q_sb = E, p.q_sl = E;
  p.k = k.data(), p.k_sb = S * E, p.k_sl = E;
  p.v = v.data(), p.v_sb = S * E, p.v_sl = E;
  p.o = o.data(), p.o_sb = E, p.o_sl = E;
  p.scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  std::vector<float> scrub(cold ? (64 << 20) / sizeof(float) : 0, 1.0f);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      float sum = 0;
      for (size_t i = 0; i < scrub.size(); i += 16) sum += scrub[i]++;
      benchmark::DoNotOptimize(sum);
      state.ResumeTiming();
    }
    tfm::kernels::attention_forward(p);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] = benchmark::Counter(4e-9 * double(B * H * S * Dh), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  for (int64_t S : {256, 1024})
    for (int64_t B : {1, 4})
      for (int threads : {1, 2})
        for (bool cold : {false, true}) {
          const std::string tag = "dec/S" + std::to_string(S) + "/B" + std::to_string(B) + "/t" +
                                  std::to_string(threads) + (cold ? "/cold" : "/hot");
          benchmark::RegisterBenchmark(tag.c_str(), decode, B, S, threads, cold)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
  for (const Shape& s : kShapes)
    for (int threads : {1, 2})
      for (bool causal : {false, true})
        for (float dropout : {0.0f, 0.1f})
          for (bool bf16 : {false, true}) {
            if (bf16 && (dropout > 0 || !tfm::kernels::cpu_has_bf16_dot())) continue;
            const std::string tag = std::string(s.name) + "/t" + std::to_string(threads) +
                                    (causal ? "/causal" : "/full") + (dropout > 0 ? "/drop" : "") +
                                    (bf16 ? "/bf16" : "");
            benchmark::RegisterBenchmark(("fwd/" + tag).c_str(), forward, s, threads, causal, dropout, bf16)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
            benchmark::RegisterBenchmark(("bwd/" + tag).c_str(), backward, s, threads, causal, dropout, bf16)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
          }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
