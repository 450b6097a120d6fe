// tfm/models/bench.h — time a module of a `tfm forward` config (tfm/models/forward.h) on random weights
// and inputs: the library behind `tfm bench`.
//
// Two modes: INFER runs LoadedModule::forward (eval, no tape, each Linear weight packed once, in
// the options' precision); TRAIN runs a training step: forward, MSE loss against a fixed random
// target, backward, and a tfm::Adam step with torch.optim.Adam's defaults (lr 1e-3, betas (0.9,
// 0.999), eps 1e-8), with dropout on as in module.train().
//
// FLOPs are counted analytically (bench_flop_count): every matmul, attention's QKᵀ and AV in full
// (2·B·L·S·D each, causal or not), the backward of a Linear as dW plus dx (dx only when the
// Linear's input needs a gradient, as autograd does), the backward of attention as twice its
// forward. Dropout, LayerNorm, activations and the optimizer are not counted. With this rule a
// TransformerEncoderLayer of d_model 512, FFN 2048 at B 8, N 128 is 6.7 GFLOP per inference and
// 18.5 per training step.
//
// To bench a new module kind: its inputs in bench_inputs and its matmuls in bench_flop_count.
#pragma once

#include <cstdint>
#include <string>

#include "tfm/models/forward.h"
#include "tfm/inference.h"
#include "tfm/named_tensors.h"
#include "tfm/random.h"

namespace tfm {

enum class BenchMode { INFER, TRAIN };
template <>
struct EnumNames<BenchMode> {
  static constexpr const char* noun = "bench mode";
  static constexpr std::array<std::pair<BenchMode, std::string_view>, 2> names{
      {{BenchMode::INFER, "infer"}, {BenchMode::TRAIN, "train"}}};
};

struct BenchOptions {
  int64_t batch = 0;    // B; must be positive
  int64_t seq = 0;      // N: the sequence length (target length for decoders); must be positive
  int64_t src_seq = 0;  // S: source / memory length; 0 means N
  BenchMode mode = BenchMode::INFER;
  Precision precision = Precision::FLOAT32;  // INFER: f32, bf16, int8; TRAIN: f32 or bf16 (tfm/autocast.h)
  int iters = 10;   // timed iterations, at least 1
  int warmup = 3;   // untimed iterations before them
};

struct BenchResult {
  std::string module;  // PyTorch's class name
  int64_t src_seq = 0;  // S as run (N when the options left it 0)
  double ms_median = 0, ms_min = 0, ms_max = 0;  // per iteration, over the timed iterations
  double tokens_per_s = 0;    // B·N tokens per median iteration
  double gflop_per_iter = 0;  // bench_flop_count / 1e9
  double gflops = 0;          // achieved: gflop_per_iter per median iteration
  double peak_rss_mb = 0;     // the process's peak resident memory (getrusage), after the run
};

// Builds the module (initial weights from default_generator()), makes its inputs
// (bench_inputs with Generator{1234, 0}) and times options.warmup + options.iters iterations.
// Throws std::invalid_argument naming the option on bad options.
BenchResult run_bench(const ModuleConfig& config, const BenchOptions& options);

// One JSON object (bench/compare_torch.py reads it): ms_median, tokens_per_s, gflops, peak_rss_mb,
// ms_min, ms_max, gflop_per_iter, iters, mode, dtype, module.
std::string bench_json(const BenchResult& result, const BenchOptions& options);

// FLOPs of one iteration at batch B, sequence length N and source length S (the rule above).
double bench_flop_count(const ModuleConfig& config, int64_t B, int64_t N, int64_t S, BenchMode mode);

// Uniform [-1, 1) inputs in the module's layout: MultiheadAttention "query" (N; key and value
// default to it), encoders "src" (N), decoders "tgt" (N) and "memory" (S), Transformer "src" (S)
// and "tgt" (N).
NamedTensors bench_inputs(const ModuleConfig& config, int64_t B, int64_t N, int64_t S, Generator& gen);

}  // namespace tfm
