// src/cli/bench_cmd.cc — `tfm bench`: time the module of a `tfm forward` config on random weights and
// inputs, for inference (eval, no tape) or a training step (forward, MSE loss against a random target,
// backward, tfm::Adam step with torch.optim.Adam's defaults).
//
//   tfm bench --config CONFIG.json --batch B --seq N [--src-seq S] [--mode infer|train] [--iters K]
//             [--warmup W] [--threads T] [--dtype f32|bf16] [--json]
//
// Inference runs inside tfm::InferenceMode (weights packed once for the GEMM backend; with
// --dtype bf16 its Linear matmuls run on bfloat16 inputs, include/tfm/inference.h).
//
// Prints the median milliseconds per iteration, tokens/s (B·N per iteration), achieved GFLOP/s and
// the peak resident memory. FLOPs are counted analytically from the config (flop_count below):
// every matmul, attention's QKᵀ and AV in full (2·B·L·S·D each, causal or not), the backward of a
// Linear as dW plus dx (dx only when the Linear's input needs a gradient, as autograd does), the
// backward of attention as twice its forward. Dropout, LayerNorm, activations and the optimizer are
// not counted. With this rule config M (d_model 512, FFN 2048, B 8, N 128) is 6.7 GFLOP per
// inference and 18.5 per training step, the figures of issue 3.
//
// To bench a new module kind: add its input names to make_inputs and its matmuls to flop_count.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "tfm/autograd.h"
#include "tfm/forward.h"
#include "tfm/inference.h"
#include "tfm/modules/module.h"
#include "tfm/ops/loss.h"
#include "tfm/optim.h"
#include "tfm/random.h"

namespace tfm::cli {
namespace {

using json = nlohmann::json;

std::string read_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The shape facts of a config that the inputs and the FLOP count need.
struct BenchShape {
  std::string module;
  int64_t D = 0;           // d_model / embed_dim
  int64_t F = 0;           // dim_feedforward
  int64_t F_in = 0;        // linear1's outputs: 2F for gated activations
  int64_t enc_layers = 0;  // encoder layers (stack or Transformer)
  int64_t dec_layers = 0;  // decoder layers
  bool batch_first = false;
  bool norm_first = false;
};

BenchShape shape_of(const std::string& config) {
  const json j = json::parse(config);  // build_module has validated it already
  BenchShape s;
  s.module = j.at("module").get<std::string>();
  auto get_i = [&](const char* k, int64_t def) { return j.contains(k) ? j.at(k).get<int64_t>() : def; };
  auto get_b = [&](const char* k, bool def) { return j.contains(k) ? j.at(k).get<bool>() : def; };
  s.batch_first = get_b("batch_first", false);
  s.norm_first = get_b("norm_first", false);
  if (s.module == "MultiheadAttention") {
    s.D = get_i("embed_dim", 0);
    return s;
  }
  const bool transformer = s.module == "Transformer";
  s.D = get_i("d_model", 512);
  s.F = get_i("dim_feedforward", 2048);
  const std::string act = j.contains("activation") ? j.at("activation").get<std::string>() : "relu";
  s.F_in = (act == "glu" || act == "geglu" || act == "swiglu") ? 2 * s.F : s.F;
  if (s.module == "TransformerEncoderLayer") s.enc_layers = 1;
  if (s.module == "TransformerEncoder") s.enc_layers = get_i("num_layers", 0);
  if (s.module == "TransformerDecoderLayer") s.dec_layers = 1;
  if (s.module == "TransformerDecoder") s.dec_layers = get_i("num_layers", 0);
  if (transformer) {
    s.enc_layers = get_i("num_encoder_layers", 6);
    s.dec_layers = get_i("num_decoder_layers", 6);
  }
  return s;
}

// FLOPs of one iteration. rows = tokens through a Linear; `dx` says whether the Linear's input needs
// a gradient (then its backward computes dx as well as dW).
struct FlopCounter {
  bool train = false;
  double total = 0;
  void linear(double rows, double in, double out, bool dx) {
    const double f = 2.0 * rows * in * out;
    total += f;
    if (train) total += f + (dx ? f : 0.0);
  }
  void attention(double B, double L, double S, double D) {
    const double f = 2.0 * (2.0 * B * L * S * D);  // QKᵀ and AV
    total += train ? 3.0 * f : f;
  }
};

double flop_count(const BenchShape& s, int64_t B, int64_t N, int64_t S, bool train) {
  FlopCounter c{train};
  const double D = static_cast<double>(s.D);
  const double rows_t = static_cast<double>(B * N), rows_s = static_cast<double>(B * S);
  if (s.module == "MultiheadAttention") {  // self-attention on one input that needs no gradient
    c.linear(rows_t, D, 3 * D, false);
    c.attention(B, N, N, D);
    c.linear(rows_t, D, D, true);
    return c.total;
  }
  const double F = static_cast<double>(s.F), F_in = static_cast<double>(s.F_in);
  auto ffn = [&](double rows) {
    c.linear(rows, D, F_in, true);
    c.linear(rows, F, D, true);
  };
  // The first layer's projection of a raw input needs no dx, unless pre-norm put a LayerNorm
  // (with trainable weights) in front of it.
  const bool transformer = s.module == "Transformer";
  const double enc_rows = transformer ? rows_s : rows_t;
  const double enc_len = static_cast<double>(transformer ? S : N);
  for (int64_t l = 0; l < s.enc_layers; ++l) {
    c.linear(enc_rows, D, 3 * D, l > 0 || s.norm_first);
    c.attention(B, enc_len, enc_len, D);
    c.linear(enc_rows, D, D, true);
    ffn(enc_rows);
  }
  // Memory needs a gradient only when it comes from the encoder (Transformer).
  for (int64_t l = 0; l < s.dec_layers; ++l) {
    c.linear(rows_t, D, 3 * D, l > 0 || s.norm_first);
    c.attention(B, N, N, D);
    c.linear(rows_t, D, D, true);
    c.linear(rows_t, D, D, true);           // cross-attention query projection
    c.linear(rows_s, D, 2 * D, transformer);  // key/value projection of memory
    c.attention(B, N, S, D);
    c.linear(rows_t, D, D, true);
    ffn(rows_t);
  }
  return c.total;
}

Tensor random_tensor(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0f * gen.uniform() - 1.0f;
  return t;
}

NamedTensors make_inputs(const BenchShape& s, int64_t B, int64_t N, int64_t S, Generator& gen) {
  auto seq = [&](int64_t len) { return s.batch_first ? Shape{B, len, s.D} : Shape{len, B, s.D}; };
  NamedTensors in;
  if (s.module == "MultiheadAttention") {
    in["query"] = random_tensor(seq(N), gen);  // key and value default to the same tensor
  } else if (s.module == "TransformerEncoderLayer" || s.module == "TransformerEncoder") {
    in["src"] = random_tensor(seq(N), gen);
  } else if (s.module == "Transformer") {
    in["src"] = random_tensor(seq(S), gen);
    in["tgt"] = random_tensor(seq(N), gen);
  } else {
    in["tgt"] = random_tensor(seq(N), gen);
    in["memory"] = random_tensor(seq(S), gen);
  }
  return in;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

struct Opts {
  std::string config, mode = "infer", dtype = "f32";
  int64_t batch = 0, seq = 0, src_seq = 0;
  int iters = 10, warmup = 3, threads = 0;
  bool json = false;
};

int run_bench(const Opts& o) {
  apply_threads(o.threads);
  if (o.mode != "infer" && o.mode != "train")
    throw std::runtime_error("--mode must be infer or train, got '" + o.mode + "'");
  const Precision precision = parse_precision(o.dtype);
  if (precision != Precision::Float32 && o.mode != "infer")
    throw std::runtime_error("--dtype " + o.dtype + " is for --mode infer only (training is float32)");
  if (o.batch <= 0 || o.seq <= 0) throw std::runtime_error("--batch and --seq must be positive");
  if (o.iters <= 0 || o.warmup < 0) throw std::runtime_error("--iters must be positive, --warmup non-negative");
  const std::string config = read_config(o.config);
  std::unique_ptr<ConformanceModule> cm;
  BenchShape shape;
  try {
    cm = build_module(config);
    shape = shape_of(config);
  } catch (const std::exception& e) {
    throw std::runtime_error(o.config + ": " + e.what());
  }
  const int64_t S = o.src_seq > 0 ? o.src_seq : o.seq;
  const bool train = o.mode == "train";
  Generator gen{1234, 0};
  NamedTensors inputs = make_inputs(shape, o.batch, o.seq, S, gen);
  Module& m = cm->module();
  m.train(train);

  std::vector<double> ms;
  if (!train) {
    InferenceMode inference(precision);  // packed weights (bf16 with --dtype bf16), no tape
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor y = cm->forward(inputs);
      const auto t1 = std::chrono::steady_clock::now();
      if (it >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  } else {
    Tensor target;
    {
      NoGradGuard no_grad;
      Tensor y = cm->forward(inputs);
      target = random_tensor(y.shape(), gen);
    }
    Adam adam(m.named_parameters());  // torch.optim.Adam defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      m.zero_grad();
      Tensor loss = ops::mse_loss(cm->forward(inputs), target);
      loss.backward();
      adam.step();
      const auto t1 = std::chrono::steady_clock::now();
      if (it >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  const double median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  const double tokens_per_s = static_cast<double>(o.batch * o.seq) / (median / 1000.0);
  const double flops = flop_count(shape, o.batch, o.seq, S, train);
  const double gflops = flops / (median / 1000.0) / 1e9;
  const double rss = peak_rss_mb();
  if (o.json) {
    json j = {{"ms_median", median}, {"tokens_per_s", tokens_per_s}, {"gflops", gflops}, {"peak_rss_mb", rss},
              {"ms_min", ms.front()}, {"ms_max", ms.back()}, {"gflop_per_iter", flops / 1e9},
              {"iters", o.iters}, {"mode", o.mode}, {"dtype", precision_name(precision)}, {"module", shape.module}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s %s %s  B=%lld N=%lld S=%lld  iters=%d (warmup %d)\n", shape.module.c_str(), o.mode.c_str(),
                precision_name(precision),
                static_cast<long long>(o.batch), static_cast<long long>(o.seq), static_cast<long long>(S), o.iters,
                o.warmup);
    std::printf("  median %.3f ms  (min %.3f, max %.3f)\n", median, ms.front(), ms.back());
    std::printf("  %.0f tokens/s   %.1f GFLOP/s (%.3f GFLOP per iteration)\n", tokens_per_s, gflops, flops / 1e9);
    std::printf("  peak RSS %.1f MB\n", rss);
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
  cmd->add_option("--batch", o->batch, "batch size B")->required();
  cmd->add_option("--seq", o->seq, "sequence length N (target length for decoders)")->required();
  cmd->add_option("--src-seq", o->src_seq, "source/memory length S (default N)");
  cmd->add_option("--mode", o->mode, "infer (eval, no gradients) or train (forward, MSE, backward, Adam)");
  cmd->add_option("--dtype", o->dtype, "infer only: f32 (default) or bf16 (bfloat16 Linear matmuls, docs/bf16.md)");
  cmd->add_option("--iters", o->iters, "timed iterations (default 10)");
  cmd->add_option("--warmup", o->warmup, "untimed iterations first (default 3)");
  cmd->add_option("--threads", o->threads, "threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_flag("--json", o->json, "print one JSON object: ms_median, tokens_per_s, gflops, peak_rss_mb, ...");
  cmd->callback([o, &run] { run = [o] { return run_bench(*o); }; });
}

}  // namespace tfm::cli
