// bench/peak_fma.cc — the machine's fp32 FMA peak right now: every thread runs independent FMA chains on
// registers (no memory traffic), so the rate is issue width × vector width × clock. AVX-512 (16 lanes)
// where the CPU has it, else AVX2 (8 lanes): the widest FMA the CPU has, the peak its kernels can reach.
// bench/compare_torch.py runs it before every measurement (and waits while it reads low): the cloud
// machines here drift by ±10% within an hour, and a drop of this figure says the drift is the clock
// (or a neighbour on the core), not the code. Prints one JSON object: {"threads": T, "gflops": best-of-trials GFLOP/s}.
//
//   build/bench/peak_fma [--threads T]      (default: OMP_NUM_THREADS or all cores)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kChains = 24;  // ≥ FMA latency × ports (4 × 2) with room to spare, in 32 zmm registers
constexpr long kIters = 20'000'000 / kChains;  // 0.64 GFLOP per thread: ≈ 3 ms per trial at ≈ 230 GFLOP/s

// kChains × kIters FMAs of 16 lanes; returns a value that depends on every chain (keeps them live).
__attribute__((target("avx512f,fma"))) float fma_chains_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kIters; ++i)
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}

// The same FMAs 8 lanes wide, for CPUs without AVX-512: 12 chains, which with the two constants fit the 16
// ymm registers (24 would spill and measure the loads and stores), still ≥ latency 4 × 2 ports; twice the
// iterations, so the same count of FMAs.
constexpr int kChains2 = 12;
__attribute__((target("avx2,fma"))) float fma_chains_avx2() {
  __m256 acc[kChains2];
  for (int c = 0; c < kChains2; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < 2 * kIters; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < kChains2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  __m256 s = acc[0];
  for (int c = 1; c < kChains2; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads();
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (threads < 1 || !(avx512 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))) {
    std::fprintf(stderr, "peak_fma: needs AVX-512F or AVX2 with FMA, and --threads >= 1\n");
    return 1;
  }
  const int lanes = avx512 ? 16 : 8;
  double best = 0.0;
  float sink = 0.0f;
  for (int trial = 0; trial < 7; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += avx512 ? fma_chains_avx512() : fma_chains_avx2();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * lanes * kChains * kIters * threads / s / 1e9);
  }
  std::printf("{\"threads\": %d, \"isa\": \"%s\", \"gflops\": %.1f, \"checksum\": %g}\n", threads,
              avx512 ? "avx512" : "avx2", best, double(sink));
  return 0;
}
