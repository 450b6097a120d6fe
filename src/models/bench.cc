// src/models/bench.cc — run_bench and its parts (include/tfm/models/bench.h): inputs and the
// analytic FLOP count from the typed ModuleConfig, the timing loops for inference and a training
// step, peak RSS.
#include "tfm/models/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "quote.h"
#include "tfm/autocast.h"
#include "tfm/autograd.h"
#include "tfm/ops/activation.h"
#include "tfm/ops/loss.h"
#include "tfm/optim.h"

namespace tfm {
namespace {

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
  // A = H·Dh (the width of QKᵀ's inner product), Av = H·Dv (that of P·V).
  void attention(double B, double L, double S, double A, double Av) {
    const double f = 2.0 * B * L * S * A + 2.0 * B * L * S * Av;  // QKᵀ and PV
    total += train ? 3.0 * f : f;
  }
};

// The projected widths A = H·Dh and Av = H·Dv of an attention with these arguments.
std::pair<double, double> attention_widths(int64_t D, int64_t H, const AttentionVariant& v) {
  const int64_t Dh = v.head_dim.value_or(D / H);
  return {static_cast<double>(H * Dh), static_cast<double>(H * v.v_head_dim.value_or(Dh))};
}

Tensor random_tensor(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0f * gen.uniform() - 1.0f;
  return t;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

bool batch_first(const ModuleConfig& c) {
  return c.kind == ModuleKind::MULTIHEAD_ATTENTION ? c.attention.batch_first : c.layer.batch_first;
}

void check_options(const BenchOptions& o) {
  if (o.batch <= 0 || o.seq <= 0)
    throw std::invalid_argument("bench: batch and seq must be positive, got " + std::to_string(o.batch) + " and " +
                                std::to_string(o.seq));
  if (o.src_seq < 0) throw std::invalid_argument("bench: src_seq must be non-negative, got " + std::to_string(o.src_seq));
  if (o.iters <= 0 || o.warmup < 0)
    throw std::invalid_argument("bench: iters must be positive and warmup non-negative, got " +
                                std::to_string(o.iters) + " and " + std::to_string(o.warmup));
  if (o.precision == Precision::INT8 && o.mode != BenchMode::INFER)
    throw std::invalid_argument("bench: precision int8 is for mode infer only (training runs in f32 or bf16)");
}

}  // namespace

double bench_flop_count(const ModuleConfig& config, int64_t B, int64_t N, int64_t S, BenchMode mode) {
  FlopCounter c{mode == BenchMode::TRAIN};
  const double rows_t = static_cast<double>(B * N), rows_s = static_cast<double>(B * S);
  if (config.kind == ModuleKind::MULTIHEAD_ATTENTION) {  // inputs that need no gradient (bench_inputs)
    const AttentionOptions& a = config.attention;
    const double D = static_cast<double>(a.embed_dim);
    const auto [A, Av] = attention_widths(a.embed_dim, a.num_heads, a.variant);
    const int64_t added = (a.add_bias_kv ? 1 : 0) + (a.add_zero_attn ? 1 : 0);  // key positions appended
    if (!a.separate_projections()) {
      c.linear(rows_t, D, 2 * A + Av, false);  // self-attention
      c.attention(B, N, N + added, A, Av);
    } else {  // query (B, N, E), key (B, S, kdim), value (B, S, vdim)
      c.linear(rows_t, D, A, false);
      c.linear(rows_s, static_cast<double>(a.key_width()), A, false);
      c.linear(rows_s, static_cast<double>(a.value_width()), Av, false);
      c.attention(B, N, S + added, A, Av);
    }
    c.linear(rows_t, Av, D, true);
    return c.total;
  }
  const TransformerLayerOptions& o = config.layer;
  const double D = static_cast<double>(o.d_model), F = static_cast<double>(o.dim_feedforward);
  const auto [A, Av] = attention_widths(o.d_model, o.nhead, o.attention);
  const double F_in = activation_is_gated(o.activation) ? 2 * F : F;  // linear1's outputs
  int64_t enc_layers = 0, dec_layers = 0;
  switch (config.kind) {
    case ModuleKind::TRANSFORMER_ENCODER_LAYER: enc_layers = 1; break;
    case ModuleKind::TRANSFORMER_ENCODER: enc_layers = config.num_layers; break;
    case ModuleKind::TRANSFORMER_DECODER_LAYER: dec_layers = 1; break;
    case ModuleKind::TRANSFORMER_DECODER: dec_layers = config.num_layers; break;
    case ModuleKind::TRANSFORMER:
      enc_layers = config.num_encoder_layers;
      dec_layers = config.num_decoder_layers;
      break;
    case ModuleKind::MULTIHEAD_ATTENTION: break;
  }
  auto ffn = [&](double rows) {
    c.linear(rows, D, F_in, true);
    c.linear(rows, F, D, true);
  };
  // Layers are counted per application: a stack with share_layers runs its one layer num_layers
  // times, the same matmuls as num_layers distinct layers. The first layer's projection of a raw
  // input needs no dx, unless pre-norm put a norm (with a trainable weight) in front of it.
  const bool transformer = config.kind == ModuleKind::TRANSFORMER;
  const double enc_rows = transformer ? rows_s : rows_t;
  const double enc_len = static_cast<double>(transformer ? S : N);
  for (int64_t l = 0; l < enc_layers; ++l) {
    c.linear(enc_rows, D, 2 * A + Av, l > 0 || o.norm_first);
    c.attention(B, enc_len, enc_len, A, Av);
    c.linear(enc_rows, Av, D, true);
    ffn(enc_rows);
  }
  // Memory needs a gradient only when it comes from the encoder (Transformer).
  for (int64_t l = 0; l < dec_layers; ++l) {
    c.linear(rows_t, D, 2 * A + Av, l > 0 || o.norm_first);
    c.attention(B, N, N, A, Av);
    c.linear(rows_t, Av, D, true);
    c.linear(rows_t, D, A, true);              // cross-attention query projection
    c.linear(rows_s, D, A + Av, transformer);  // key/value projection of memory
    c.attention(B, N, S, A, Av);
    c.linear(rows_t, Av, D, true);
    ffn(rows_t);
  }
  return c.total;
}

NamedTensors bench_inputs(const ModuleConfig& config, int64_t B, int64_t N, int64_t S, Generator& gen) {
  const int64_t D = config.kind == ModuleKind::MULTIHEAD_ATTENTION ? config.attention.embed_dim : config.layer.d_model;
  auto seq = [&](int64_t len, int64_t width = -1) {
    const int64_t W = width < 0 ? D : width;
    return batch_first(config) ? Shape{B, len, W} : Shape{len, B, W};
  };
  NamedTensors in;
  switch (config.kind) {
    case ModuleKind::MULTIHEAD_ATTENTION: {
      in.insert("query", random_tensor(seq(N), gen));  // key and value default to the same tensor
      const AttentionOptions& a = config.attention;
      if (a.separate_projections()) {  // a key and a value of their own widths, S long
        in.insert("key", random_tensor(seq(S, a.key_width()), gen));
        in.insert("value", random_tensor(seq(S, a.value_width()), gen));
      }
      break;
    }
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
    case ModuleKind::TRANSFORMER_ENCODER:
      in.insert("src", random_tensor(seq(N), gen));
      break;
    case ModuleKind::TRANSFORMER:
      in.insert("src", random_tensor(seq(S), gen));
      in.insert("tgt", random_tensor(seq(N), gen));
      break;
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
    case ModuleKind::TRANSFORMER_DECODER:
      in.insert("tgt", random_tensor(seq(N), gen));
      in.insert("memory", random_tensor(seq(S), gen));
      break;
  }
  return in;
}

BenchResult run_bench(const ModuleConfig& config, const BenchOptions& options) {
  check_options(options);
  const int64_t B = options.batch, N = options.seq, S = options.src_seq > 0 ? options.src_seq : options.seq;
  const bool train = options.mode == BenchMode::TRAIN;
  LoadedModule m(config, options.precision);
  Generator gen{1234, 0};
  const NamedTensors inputs = bench_inputs(config, B, N, S, gen);
  Module& module = m.module();
  module.train(train);

  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t0, clock::time_point t1) {
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  std::vector<double> ms;
  if (!train) {
    for (int it = 0; it < options.warmup + options.iters; ++it) {
      const auto t0 = clock::now();
      NamedTensors y = m.forward(inputs);  // packs the weights in the first call, reuses them after
      const auto t1 = clock::now();
      if (it >= options.warmup) ms.push_back(ms_since(t0, t1));
    }
  } else {
    Tensor target;
    {
      NoGradGuard no_grad;
      Tensor y = m.call(inputs);
      target = random_tensor(y.shape(), gen);
    }
    Adam adam(module.named_parameters());  // torch.optim.Adam defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8
    Bf16WeightCache copies;  // bf16: the weights' copies, refreshed by Adam's update (as the trainer's step)
    for (int it = 0; it < options.warmup + options.iters; ++it) {
      const auto t0 = clock::now();
      module.zero_grad();
      {
        Autocast autocast(options.precision, copies);  // bf16: the matmuls (tfm/autocast.h)
        Tensor loss = ops::mse_loss(m.call(inputs), target);
        loss.backward();
      }
      adam.step(copies);
      const auto t1 = clock::now();
      if (it >= options.warmup) ms.push_back(ms_since(t0, t1));
    }
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  BenchResult r;
  r.module = enum_name(config.kind);
  r.src_seq = S;
  r.ms_median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  r.ms_min = ms.front();
  r.ms_max = ms.back();
  r.tokens_per_s = static_cast<double>(B * N) / (r.ms_median / 1000.0);
  const double flops = bench_flop_count(config, B, N, S, options.mode);
  r.gflop_per_iter = flops / 1e9;
  r.gflops = flops / (r.ms_median / 1000.0) / 1e9;
  r.peak_rss_mb = peak_rss_mb();
  return r;
}

std::string bench_json(const BenchResult& r, const BenchOptions& o) {
  const nlohmann::ordered_json j = {{"ms_median", r.ms_median},   {"tokens_per_s", r.tokens_per_s},
                                    {"gflops", r.gflops},         {"peak_rss_mb", r.peak_rss_mb},
                                    {"ms_min", r.ms_min},         {"ms_max", r.ms_max},
                                    {"gflop_per_iter", r.gflop_per_iter}, {"iters", o.iters},
                                    {"mode", enum_name(o.mode)}, {"dtype", enum_name(o.precision)},
                                    {"module", r.module}};
  return j.dump();
}

}  // namespace tfm
