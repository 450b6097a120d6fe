// bench/bench_gemm.cc — GEMM backends on the transformer's shapes, in GFLOP/s, 1 and 2 threads.
//
//   onednn_sgemm  dnnl_sgemm with oneDNN's own OpenMP threading (NOT thread-count deterministic:
//                 the `mismatch` counter counts elements that differ from its 1-thread result)
//   openblas      cblas_sgemm (pthreads build; openblas_set_num_threads)
//   onednn_matmul the oneDNN matmul primitive, created once outside the timed loop
//   tfm_gemm      tfm::kernels::gemm: fixed output panels, one serial dnnl_sgemm per panel inside
//                 our own `omp parallel for` (deterministic; `mismatch` must be 0); on CPUs with AVX2
//                 but not AVX-512 a panel is gemm_avx2.cc's product instead (so are the panels/ rows)
//   blocked       the own-GEMM experiment (bench/gemm_blocked.h; deterministic): `twin_mismatch`
//                 counts elements of its first and last 16 rows that differ bitwise from its scalar twin
//   prepacked     NT only: tfm::kernels::gemm_packed, the oneDNN matmul primitive (brgemm) on W packed
//                 once, as InferenceMode runs a Linear (deterministic)
//   repacked      the same with W packed again on every call, as a training step would need it
//                 (its weights change every step): is the packed kernel worth its packing?
//   prepacked_bf16, prepacked_int8   NT only: gemm_packed in bf16 and int8 (W packed once; int8 also
//                 quantizes A's rows and dequantizes C on every call, which is counted)
//   train_bf16    kernels::gemm_bf16 as a bf16 training step's Linear runs it: A in float32, rounded to
//                 bfloat16 panel by panel inside the call; B (bfloat16, plain layout) rounded once outside
//   train_bf16_a16  the same with A already bfloat16 (rounded once outside): the rounding's cost is the
//                 difference between the two
//   panels/MTxNT  gemm_paneled with explicit (mt × nt) panels, to choose gemm_plan() by measurement
//
// Shapes (config M: D = 512, F = 2048, T·B = 1024 tokens; and config L's, "L-"), named after their use:
//   NT (1024,1536,512) qkv in-proj  y = x·Wᵀ      NT (1024,512,512) out-proj
//   NT (1024,2048,512) FFN linear1                 NT (1024,512,2048) FFN linear2
//   NN (1024,1536,512), NN (1024,512,2048) input gradients dx = dy·W
//   TN (512,512,1024), (2048,512,1024), (1536,512,1024), (512,2048,1024) weight gradients dW = dyᵀ·x
//      (beta = 0: Linear's backward writes a fresh gradient slot; zero_grad empties .grad)
//   NN/NT (1024, 64..256, 64) small per-head products; three "odd" shapes with ragged edges
// Run: build/bench/bench_gemm --benchmark_min_time=0.2 [--benchmark_filter=...]
// On a shared machine use --benchmark_repetitions=5 and read the best repetition.
// To add a backend: write a `run_<name>` with the Shape signature and register it in main().
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>
#ifdef TFM_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include "gemm_blocked.h"
#include "kernels/gemm_backend.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

namespace {

struct Shape {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  const char* use;
};

const Shape kShapes[] = {
    {false, true, 1024, 1536, 512, 0.f, "qkv"},   {false, true, 1024, 512, 512, 0.f, "out"},
    {false, true, 1024, 2048, 512, 0.f, "ffn1"},  {false, true, 1024, 512, 2048, 0.f, "ffn2"},
    {false, false, 1024, 1536, 512, 0.f, "dx"},   {false, false, 1024, 512, 2048, 0.f, "dx"},
    {true, false, 512, 512, 1024, 0.f, "dW"},     {true, false, 2048, 512, 1024, 0.f, "dW"},
    {true, false, 1536, 512, 1024, 0.f, "dW"},    {true, false, 512, 2048, 1024, 0.f, "dW"},
    {false, false, 1024, 64, 64, 0.f, "small"},   {false, false, 1024, 128, 64, 0.f, "small"},
    {false, false, 1024, 256, 64, 0.f, "small"},  {false, true, 1024, 256, 64, 0.f, "small"},
    // config L (D = 256, F = 1024, 2048 tokens): forward, input gradients, weight gradients
    {false, true, 2048, 768, 256, 0.f, "L-qkv"},  {false, true, 2048, 256, 256, 0.f, "L-out"},
    {false, true, 2048, 1024, 256, 0.f, "L-ffn1"}, {false, true, 2048, 256, 1024, 0.f, "L-ffn2"},
    {false, false, 2048, 256, 768, 0.f, "L-dx"},  {false, false, 2048, 256, 1024, 0.f, "L-dx"},
    {false, false, 2048, 1024, 256, 0.f, "L-dx"}, {true, false, 768, 256, 2048, 0.f, "L-dW"},
    {true, false, 256, 256, 2048, 0.f, "L-dW"},   {true, false, 1024, 256, 2048, 0.f, "L-dW"},
    {true, false, 256, 1024, 2048, 0.f, "L-dW"},
    // the nanogpt-baby preset (D = 128, F = 512, 768 tokens): forward, input gradients, weight gradients
    {false, true, 768, 384, 128, 0.f, "S-qkv"},   {false, true, 768, 128, 128, 0.f, "S-out"},
    {false, true, 768, 512, 128, 0.f, "S-ffn1"},  {false, true, 768, 128, 512, 0.f, "S-ffn2"},
    {false, false, 768, 128, 384, 0.f, "S-dx"},   {false, false, 768, 128, 512, 0.f, "S-dx"},
    {false, false, 768, 512, 128, 0.f, "S-dx"},   {true, false, 384, 128, 768, 0.f, "S-dW"},
    {true, false, 128, 128, 768, 0.f, "S-dW"},    {true, false, 512, 128, 768, 0.f, "S-dW"},
    {true, false, 128, 512, 768, 0.f, "S-dW"},
    // ragged edges in every dimension (not multiples of any tile or block size)
    {false, true, 1001, 999, 700, 0.f, "odd"},    {true, false, 999, 1001, 1300, 0.f, "odd"},
    {false, false, 1001, 999, 700, 0.f, "odd"},
};

// Row-major operands for a shape: A (M,K) or (K,M), B (K,N) or (N,K), C (M,N), minimal strides.
struct Operands {
  std::vector<float> A, B, C;
  std::vector<uint16_t> A16, B16;  // A and B rounded to bfloat16 (the train_bf16 rows)
  int64_t lda, ldb, ldc;
  std::shared_ptr<const tfm::kernels::PackedWeight> packed;  // B packed (prepacked/repacked rows)
  explicit Operands(const Shape& s) {
    lda = s.ta ? s.M : s.K;
    ldb = s.tb ? s.K : s.N;
    ldc = s.N;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    A.resize(s.M * s.K);
    B.resize(s.K * s.N);
    C.resize(s.M * s.N);
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);
    for (float& x : C) x = u(rng);
    A16.resize(A.size());
    B16.resize(B.size());
    tfm::kernels::convert_to_bf16(A.data(), static_cast<int64_t>(A.size()), A16.data());
    tfm::kernels::convert_to_bf16(B.data(), static_cast<int64_t>(B.size()), B16.data());
  }
};

using Runner = std::function<void(const Shape&, Operands&)>;

// Times `run` on shape s with `threads` OpenMP threads. If check_determinism, also counts the
// elements of C (beta = 0) that differ bitwise from the same backend's 1-thread result.
// check (optional) returns how many elements of C, just computed by run with beta = 0, differ from
// the backend's own specification; reported as `twin_mismatch`.
using Checker = std::function<int64_t(const Shape&, const Operands&)>;

void bench(benchmark::State& state, const Shape& s, int threads, const Runner& run,
           bool check_determinism, const Checker& check = nullptr) {
  omp_set_num_threads(threads);
#ifdef TFM_BENCH_OPENBLAS
  openblas_set_num_threads(threads);
#endif
  Operands op(s);
  for (auto _ : state) {
    run(s, op);
    benchmark::DoNotOptimize(op.C.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * double(s.M) * double(s.N) * double(s.K),
                                                benchmark::Counter::kIsIterationInvariantRate);
  if (!check && !(check_determinism && threads > 1)) return;
  // One beta = 0 run at the benchmark's thread count serves both checks.
  Shape s0 = s;
  s0.beta = 0.f;
  Operands many(s0);
  run(s0, many);
  if (check) state.counters["twin_mismatch"] = double(check(s0, many));
  if (check_determinism && threads > 1) {
    Operands one(s0);
    omp_set_num_threads(1);
    run(s0, one);
    omp_set_num_threads(threads);
    int64_t mismatch = 0;
    for (size_t i = 0; i < one.C.size(); ++i)
      mismatch += std::memcmp(&one.C[i], &many.C[i], sizeof(float)) != 0;
    state.counters["mismatch"] = double(mismatch);
  }
}

void run_onednn_sgemm(const Shape& s, Operands& o) {
  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, o.A.data(), o.lda,
             o.B.data(), o.ldb, s.beta, o.C.data(), o.ldc);
}

void run_tfm_gemm(const Shape& s, Operands& o) {
  tfm::kernels::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, s.beta,
                     o.C.data(), o.ldc);
}

// Linear's forward y = x·Wᵀ on the oneDNN matmul primitive with W reordered into its blocked
// layout (kernels::gemm_packed, fixed row panels). prepacked: W packed once, as InferenceMode does;
// repacked: W packed again on every call, as a training step would have to (its weights change
// every step). NT products with beta 0 only.
const tfm::kernels::PackedWeight& pack_nt(const Shape& s, Operands& o, bool again) {
  if (!o.packed || again)
    o.packed = tfm::kernels::pack_weight(o.B.data(), s.N, s.K, o.ldb, tfm::kernels::MatmulPrecision::MATMUL_F32);
  return *o.packed;
}

void run_prepacked(const Shape& s, Operands& o) {
  tfm::kernels::gemm_packed(s.M, o.A.data(), o.lda, pack_nt(s, o, false), nullptr, o.C.data(), o.ldc);
}

void run_repacked(const Shape& s, Operands& o) {
  tfm::kernels::gemm_packed(s.M, o.A.data(), o.lda, pack_nt(s, o, true), nullptr, o.C.data(), o.ldc);
}

void run_train_bf16(const Shape& s, Operands& o) {
  tfm::kernels::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, o.A.data(), o.lda, o.B16.data(), o.ldb, s.beta, o.C.data(), o.ldc);
}

void run_train_bf16_a16(const Shape& s, Operands& o) {
  tfm::kernels::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, o.A16.data(), o.lda, o.B16.data(), o.ldb, s.beta, o.C.data(),
                          o.ldc);
}

void run_blocked(const Shape& s, Operands& o) {
  tfm_bench::blocked::gemm_blocked_avx512(s.ta, s.tb, s.M, s.N, s.K, 1.f, o.A.data(), o.lda,
                                          o.B.data(), o.ldb, s.beta, o.C.data(), o.ldc);
}

// The first and last 16 rows of C (edge tiles included) against gemm_blocked_scalar, bitwise.
int64_t check_blocked(const Shape& s, const Operands& o) {
  int64_t mismatch = 0;
  std::vector<float> ref(static_cast<size_t>(16 * s.N));
  for (int64_t i0 : {int64_t(0), std::max<int64_t>(0, s.M - 16)}) {
    const int64_t rows = std::min<int64_t>(16, s.M - i0);
    const float* a = s.ta ? o.A.data() + i0 : o.A.data() + i0 * o.lda;
    tfm_bench::blocked::gemm_blocked_scalar(s.ta, s.tb, rows, s.N, s.K, 1.f, a, o.lda, o.B.data(),
                                            o.ldb, 0.f, ref.data(), s.N);
    for (int64_t i = 0; i < rows; ++i)
      mismatch += std::memcmp(ref.data() + i * s.N, o.C.data() + (i0 + i) * o.ldc,
                              sizeof(float) * static_cast<size_t>(s.N)) != 0;
  }
  return mismatch;
}

#ifdef TFM_BENCH_OPENBLAS
void run_openblas(const Shape& s, Operands& o) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, s.beta, o.C.data(), o.ldc);
}
#endif

// The matmul primitive, built once per benchmark (creation is not timed; a real caller would
// cache it by shape). Strided memory descriptors express the transposes; beta = 1 is a sum post-op.
Runner make_onednn_matmul(const Shape& s) {
  using dnnl::memory;
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const memory::dims a_str = s.ta ? memory::dims{1, s.M} : memory::dims{s.K, 1};
  const memory::dims b_str = s.tb ? memory::dims{1, s.K} : memory::dims{s.N, 1};
  memory::desc a_md({s.M, s.K}, memory::data_type::f32, a_str);
  memory::desc b_md({s.K, s.N}, memory::data_type::f32, b_str);
  memory::desc c_md({s.M, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
  dnnl::primitive_attr attr;
  if (s.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(s.beta);
    attr.set_post_ops(po);
  }
  auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
  auto prim = std::make_shared<dnnl::matmul>(pd);
  return [prim, a_md, b_md, c_md](const Shape&, Operands& o) {
    static dnnl::stream strm(eng);
    memory a(a_md, eng, o.A.data()), b(b_md, eng, o.B.data()), c(c_md, eng, o.C.data());
    prim->execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  };
}

std::string shape_name(const Shape& s) {
  return std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N") + "/" + std::to_string(s.M) + "x" +
         std::to_string(s.N) + "x" + std::to_string(s.K) + "/" + s.use;
}

}  // namespace

int main(int argc, char** argv) {
  for (int threads : {1, 2}) {
    // Threaded runs: GFLOP/s against wall time (the main thread's CPU time over-reports runs whose
    // main thread sleeps at a barrier). 1-thread runs: against that thread's CPU time, which equals
    // wall time on an idle machine and stays meaningful on a loaded one (preemption not counted).
    auto add = [threads](const std::string& name, const Shape& s, Runner run, Checker check = nullptr) {
      auto* b = benchmark::RegisterBenchmark(
          (name + "/threads:" + std::to_string(threads)).c_str(),
          [=](benchmark::State& st) { bench(st, s, threads, run, true, check); });
      if (threads > 1) b->UseRealTime();
    };
    for (const Shape& s : kShapes) {
      const std::string sh = shape_name(s);
      add("onednn_sgemm/" + sh, s, run_onednn_sgemm);
#ifdef TFM_BENCH_OPENBLAS
      add("openblas/" + sh, s, run_openblas);
#endif
      // Built lazily inside the benchmark, after its thread count is set (oneDNN fixes a
      // primitive's thread count when it is created).
      add("onednn_matmul/" + sh, s,
          [prim = std::make_shared<Runner>()](const Shape& sp, Operands& o) {
            if (!*prim) *prim = make_onednn_matmul(sp);
            (*prim)(sp, o);
          });
      add("tfm_gemm/" + sh, s, run_tfm_gemm);
      if (tfm::kernels::cpu_has_bf16_dot()) {
        add("train_bf16/" + sh, s, run_train_bf16);
        add("train_bf16_a16/" + sh, s, run_train_bf16_a16);
      }
      if (!s.ta && s.tb && s.beta == 0.f) {
        add("prepacked/" + sh, s, run_prepacked);
        add("repacked/" + sh, s, run_repacked);
        for (const auto p : {tfm::kernels::MatmulPrecision::MATMUL_BF16, tfm::kernels::MatmulPrecision::MATMUL_INT8})
          add(std::string(p == tfm::kernels::MatmulPrecision::MATMUL_BF16 ? "prepacked_bf16/" : "prepacked_int8/") + sh, s,
              [p, w = std::make_shared<std::shared_ptr<const tfm::kernels::PackedWeight>>()](const Shape& sp,
                                                                                                 Operands& o) {
                if (!*w) *w = tfm::kernels::pack_weight(o.B.data(), sp.N, sp.K, o.ldb, p);
                tfm::kernels::gemm_packed(sp.M, o.A.data(), o.lda, **w, nullptr, o.C.data(), o.ldc);
              });
      }
      if (__builtin_cpu_supports("avx512f")) add("blocked/" + sh, s, run_blocked, check_blocked);
      // Candidate plans for gemm_plan(): row panels, a 2-D tile, column panels.
      for (auto [mt, nt] : {std::pair<int64_t, int64_t>{128, 0}, {256, 0}, {512, 0}, {256, 512},
                            {0, 256}}) {
        const int64_t m = mt ? std::min(mt, s.M) : s.M, n = nt ? std::min(nt, s.N) : s.N;
        add("panels/" + std::to_string(m) + "x" + std::to_string(n) + "/" + sh, s,
            [m, n](const Shape& sp, Operands& o) {
              tfm::kernels::gemm_detail::gemm_paneled(sp.ta, sp.tb, sp.M, sp.N, sp.K, 1.f,
                                                      o.A.data(), o.lda, o.B.data(), o.ldb,
                                                      sp.beta, o.C.data(), o.ldc, {m, n});
            });
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
