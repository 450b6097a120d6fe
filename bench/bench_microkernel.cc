// bench/bench_microkernel.cc — the ceiling of a hand-written fp32 GEMM on this CPU: register-blocked
// AVX-512 micro-kernels on packed panels that stay in L2, so the figure has no packing, no edges and
// no memory traffic beyond the caches. Compare with tfm_gemm / onednn_sgemm in bench_gemm (whole
// GEMMs, packing included) and with peak_fma (FMA chains on registers): if oneDNN's sgemm already
// runs near this ceiling, a GEMM of our own cannot buy more.
//
//   C(MR, 16·NV) += A(MR, K) · B(K, 16·NV), A packed k-major (MR values per k), B packed k-major
//   (16·NV values per k): per k, NV vector loads of B, MR broadcasts of A, MR·NV FMAs into
//   MR·NV accumulators (≤ 28 of the 32 zmm registers, ≥ 8 independent chains for 4-cycle FMAs on
//   2 ports).
//
// Run: build/bench/bench_microkernel --benchmark_min_time=0.2 --benchmark_repetitions=5
// (one thread, and one row with both cores; read the best repetition on a shared machine).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

// C(MR, 16·NV) (row stride ldc) += A·B over K, A and B packed as above.
template <int MR, int NV>
__attribute__((target("avx512f,fma"), noinline)) void microkernel_avx512(int64_t K, const float* a,
                                                                           const float* b, float* c,
                                                                           int64_t ldc) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * NV * k + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[MR * k + i]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      float* ci = c + i * ldc + 16 * v;
      _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][v]));
    }
}

// The scalar twin: the same packed layouts, one multiply-add at a time.
void microkernel_scalar(int mr, int nv, int64_t K, const float* a, const float* b, float* c,
                        int64_t ldc) {
  const int nr = 16 * nv;
  for (int64_t k = 0; k < K; ++k)
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j) c[i * ldc + j] += a[mr * k + i] * b[nr * k + j];
}

float* aligned_floats(size_t n, float fill_step) {
  auto* p = static_cast<float*>(std::aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64));
  for (size_t i = 0; i < n; ++i) p[i] = fill_step * static_cast<float>(i % 7);
  return p;
}

// A block of 16 micro-tiles down and 16 across: A (16·MR, K) and B (K, 16·16·NV) packed, C beside.
// B takes K·256·NV floats (NV·256 KB at K = 256; L2 is 1 MB per core on the EPYC here), one micro-
// tile's A panel MR·K floats (≤ 14 KB at K = 256, in L1).
template <int MR, int NV>
void BM_micro(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512");
    return;
  }
  const int64_t K = state.range(0), tiles = 16, MC = MR * tiles, NC = 16 * NV * tiles;
  float* A = aligned_floats(static_cast<size_t>(MC * K), 1e-3f);
  float* B = aligned_floats(static_cast<size_t>(K * NC), 1e-3f);
  float* C = aligned_floats(static_cast<size_t>(MC * NC), 0.0f);
  // Check the kernel against its twin once, on the first tile, before timing.
  std::vector<float> ref(static_cast<size_t>(MR * NC), 0.0f), got(ref);
  microkernel_scalar(MR, NV, K, A, B, ref.data(), NC);
  microkernel_avx512<MR, NV>(K, A, B, got.data(), NC);
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 16 * NV; ++j) {
      const float r = ref[i * NC + j], g = got[i * NC + j];
      if (std::abs(r - g) > 1e-5f * (1.0f + std::abs(r))) {
        state.SkipWithError("micro-kernel differs from its scalar twin");
        return;
      }
    }
  for (auto _ : state) {
    for (int64_t j = 0; j < NC; j += 16 * NV)
      for (int64_t i = 0; i < MC; i += MR)
        microkernel_avx512<MR, NV>(K, A + i * K, B + j * K, C + i * NC + j, NC);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(C[0]);
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(MC * NC * K),
                                                benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads,
                                                benchmark::Counter::kIs1000);
  std::free(A);
  std::free(B);
  std::free(C);
}

}  // namespace

BENCHMARK_TEMPLATE(BM_micro, 14, 2)->Arg(128)->Arg(256)->Arg(512);
// Both cores at once, each on its own panels (GFLOPS counts both threads' work).
BENCHMARK_TEMPLATE(BM_micro, 14, 2)->Arg(256)->Threads(2)->UseRealTime();
BENCHMARK_TEMPLATE(BM_micro, 12, 2)->Arg(256);
BENCHMARK_TEMPLATE(BM_micro, 8, 3)->Arg(256);
BENCHMARK_TEMPLATE(BM_micro, 6, 4)->Arg(256);

BENCHMARK_MAIN();
