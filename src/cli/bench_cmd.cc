// src/cli/bench_cmd.cc — `tfm bench`: time the module of a `tfm forward` config on random weights and
// inputs, for inference or a training step (the library's run_bench, include/tfm/models/bench.h).
//
//   tfm bench --config CONFIG.json --batch B --seq N [--src-seq S] [--mode infer|train] [--iters K]
//             [--warmup W] [--threads T] [--dtype f32|bf16|int8] [--json]
//
// Prints the median milliseconds per iteration, tokens/s (B·N per iteration), achieved GFLOP/s and
// the peak resident memory, as text or (--json) one JSON object that bench/compare_torch.py reads.
#include <cstdio>

#include "commands.h"
#include "tfm/inference.h"
#include "tfm/models/bench.h"
#include "tfm/models/forward.h"
#include "tfm/threads.h"

namespace tfm::cli {
namespace {

struct Opts {
  std::string config;
  BenchOptions bench;  // --batch, --seq, --src-seq, --iters, --warmup; its defaults are the library's
  std::string mode{enum_name(BenchOptions{}.mode)};
  std::string dtype{enum_name(BenchOptions{}.precision)};
  int threads = 0;
  bool json = false;
};

int run_bench_cmd(Opts o) {
  apply_threads(o.threads);
  try {
    o.bench.mode = enum_from_name<BenchMode>(o.mode);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--mode: ") + e.what());
  }
  o.bench.precision = parse_dtype(o.dtype);
  const ModuleConfig config = read_module_config(o.config);
  const BenchResult r = run_bench(config, o.bench);
  const BenchOptions& b = o.bench;
  if (o.json) {
    std::printf("%s\n", bench_json(r, b).c_str());
  } else {
    std::printf("%s %s %s  B=%lld N=%lld S=%lld  iters=%d (warmup %d)\n", r.module.c_str(), enum_name(b.mode).data(),
                enum_name(b.precision).data(), static_cast<long long>(b.batch), static_cast<long long>(b.seq),
                static_cast<long long>(r.src_seq), b.iters, b.warmup);
    std::printf("  median %.3f ms  (min %.3f, max %.3f)\n", r.ms_median, r.ms_min, r.ms_max);
    std::printf("  %.0f tokens/s   %.1f GFLOP/s (%.3g GFLOP per iteration)\n", r.tokens_per_s, r.gflops,
                r.gflop_per_iter);
    std::printf("  peak RSS %.1f MB\n", r.peak_rss_mb);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("bench", "Time a module of a `tfm forward` config on random weights and inputs");
  cmd->footer(
      "Example:\n  tfm bench --config enc.json --batch 8 --seq 128 --mode train --iters 20 --threads 2 --json\n"
      "FLOPs count every matmul, attention QK^T and AV in full, backward as dW + dx per Linear and 2x forward "
      "for attention.");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "module config JSON, as for `tfm forward`")->required();
  cmd->add_option("--batch", o->bench.batch, "batch size B")->required();
  cmd->add_option("--seq", o->bench.seq, "sequence length N (target length for decoders)")->required();
  cmd->add_option("--src-seq", o->bench.src_seq, "source/memory length S (0: N)")->capture_default_str();
  cmd->add_option("--mode", o->mode, "infer (eval, no gradients) or train (forward, MSE, backward, Adam)")
      ->type_name(choices_type<BenchMode>())
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "the matmuls' precision: f32; bf16 (infer: the Linear layers'; train: as tfm train --dtype, attention's too); "
                  "int8 (infer only); docs/bf16.md, docs/int8.md")
      ->type_name(choices_type<Precision>())
      ->capture_default_str();
  cmd->add_option("--iters", o->bench.iters, "timed iterations")->capture_default_str();
  cmd->add_option("--warmup", o->bench.warmup, "untimed iterations first")->capture_default_str();
  cmd->add_option("--threads", o->threads, std::string("threads (default ") + tfm::kThreadsZero + ")");
  cmd->add_flag("--json", o->json, "print one JSON object: ms_median, tokens_per_s, gflops, peak_rss_mb, ...");
  cmd->callback([o, &run] { run = [o] { return run_bench_cmd(*o); }; });
}

}  // namespace tfm::cli
