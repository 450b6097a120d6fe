// tests/models/bench_test.cc — the library behind `tfm bench` (include/tfm/models/bench.h): the
// analytic FLOP count on hand-computed cases, the inputs per module kind, the options' checks, and
// one tiny timed run per mode (its timings are not checked, only that the result is consistent).
// FLOP counts are sums of exact integers below 2^53: compared exactly.
#include "tfm/models/bench.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace tfm {
namespace {

ModuleConfig encoder_layer(int64_t d, int64_t nhead, int64_t ff, const std::string& activation = "relu") {
  ModuleConfig c;
  c.kind = ModuleKind::TRANSFORMER_ENCODER_LAYER;
  c.layer.d_model = d;
  c.layer.nhead = nhead;
  c.layer.dim_feedforward = ff;
  c.layer.activation = enum_from_name<Activation>(activation);
  c.layer.batch_first = true;
  return c;
}

// Config M of bench/compare_torch.py: a TransformerEncoderLayer, D 512, F 2048, B 8, N 128 (1024 rows).
//   in_proj 2·1024·512·1536 = 1 610 612 736   attention 2·(2·8·128·128·512) = 268 435 456
//   out_proj 2·1024·512·512 = 536 870 912     FFN 2·(2·1024·512·2048) = 4 294 967 296
// Inference: their sum, 6 710 886 400. Training: in_proj ×2 (its input, the raw src, needs no dx),
// attention ×3, out_proj ×3, FFN ×3: 18 522 046 464.
TEST(Bench, FlopCountOfConfigM) {
  const ModuleConfig m = encoder_layer(512, 8, 2048);
  EXPECT_EQ(bench_flop_count(m, 8, 128, 128, BenchMode::INFER), 6710886400.0);
  EXPECT_EQ(bench_flop_count(m, 8, 128, 128, BenchMode::TRAIN), 18522046464.0);
  // Pre-norm puts a trainable LayerNorm before in_proj: its dx is computed too (+1 610 612 736).
  ModuleConfig pre = m;
  pre.layer.norm_first = true;
  EXPECT_EQ(bench_flop_count(pre, 8, 128, 128, BenchMode::TRAIN), 18522046464.0 + 1610612736.0);
  // A gated activation doubles linear1's outputs: + 2·1024·512·2048 in inference.
  EXPECT_EQ(bench_flop_count(encoder_layer(512, 8, 2048, "swiglu"), 8, 128, 128, BenchMode::INFER),
            6710886400.0 + 2147483648.0);
}

// A decoder layer at B 1, N 2, S 3, D 4, F 8 (rows_t 2, rows_s 3):
//   self: in_proj 2·2·4·12 = 192, attention 2·(2·1·2·2·4) = 64, out_proj 2·2·4·4 = 64;
//   cross: q_proj 64, kv_proj 2·3·4·8 = 192, attention 2·(2·1·2·3·4) = 96, out_proj 64;
//   FFN 2·2·4·8 + 2·2·8·4 = 256. Sum 992.
TEST(Bench, FlopCountOfADecoderLayer) {
  ModuleConfig c = encoder_layer(4, 2, 8);
  c.kind = ModuleKind::TRANSFORMER_DECODER_LAYER;
  EXPECT_EQ(bench_flop_count(c, 1, 2, 3, BenchMode::INFER), 992.0);
  c.kind = ModuleKind::TRANSFORMER_DECODER;
  c.num_layers = 2;
  EXPECT_EQ(bench_flop_count(c, 1, 2, 3, BenchMode::INFER), 2 * 992.0);
}

TEST(Bench, InputsFollowTheModuleKind) {
  Generator gen{1, 0};
  ModuleConfig c = encoder_layer(4, 2, 8);
  NamedTensors in = bench_inputs(c, 2, 5, 7, gen);
  EXPECT_EQ(in.names(), std::vector<std::string>{"src"});
  EXPECT_EQ(in.at("src").shape(), (Shape{2, 5, 4}));  // batch_first (B, N, D)
  c.kind = ModuleKind::TRANSFORMER;
  c.layer.batch_first = false;
  in = bench_inputs(c, 2, 5, 7, gen);
  EXPECT_EQ(in.names(), (std::vector<std::string>{"src", "tgt"}));
  EXPECT_EQ(in.at("src").shape(), (Shape{7, 2, 4}));  // (S, B, D)
  EXPECT_EQ(in.at("tgt").shape(), (Shape{5, 2, 4}));  // (N, B, D)
  c.kind = ModuleKind::TRANSFORMER_DECODER;
  in = bench_inputs(c, 2, 5, 7, gen);
  EXPECT_EQ(in.names(), (std::vector<std::string>{"tgt", "memory"}));
  EXPECT_EQ(in.at("memory").shape(), (Shape{7, 2, 4}));
  ModuleConfig a;
  a.kind = ModuleKind::MULTIHEAD_ATTENTION;
  a.attention.embed_dim = 6;
  a.attention.num_heads = 2;
  in = bench_inputs(a, 2, 5, 7, gen);
  EXPECT_EQ(in.names(), std::vector<std::string>{"query"});
  EXPECT_EQ(in.at("query").shape(), (Shape{5, 2, 6}));
  for (const float v : std::vector<float>(in.at("query").data(), in.at("query").data() + 60)) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(Bench, OptionsAreChecked) {
  const ModuleConfig c = encoder_layer(4, 2, 8);
  auto error_of = [&](const BenchOptions& o) -> std::string {
    try {
      run_bench(c, o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  BenchOptions o;
  o.batch = 1;
  o.seq = 0;
  EXPECT_NE(error_of(o).find("batch and seq must be positive"), std::string::npos);
  o.seq = 2;
  o.iters = 0;
  EXPECT_NE(error_of(o).find("iters must be positive"), std::string::npos);
  o.iters = 1;
  o.mode = BenchMode::TRAIN;
  o.precision = Precision::INT8;
  EXPECT_NE(error_of(o).find("int8 is for mode infer only (training runs in f32 or bf16)"), std::string::npos);
  EXPECT_EQ(enum_from_name<BenchMode>("train"), BenchMode::TRAIN);
  EXPECT_EQ(enum_name(BenchMode::INFER), "infer");
  EXPECT_THROW(enum_from_name<BenchMode>("Train"), std::invalid_argument);
}

TEST(Bench, TinyRunsAreConsistent) {
  ModuleConfig c = encoder_layer(8, 2, 16);
  c.kind = ModuleKind::TRANSFORMER;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 1;
  for (const BenchMode mode : {BenchMode::INFER, BenchMode::TRAIN}) {
    BenchOptions o;
    o.batch = 2;
    o.seq = 3;
    o.mode = mode;
    o.iters = 3;
    o.warmup = 1;
    const BenchResult r = run_bench(c, o);
    EXPECT_EQ(r.module, "Transformer");
    EXPECT_EQ(r.src_seq, 3);  // S defaults to N
    EXPECT_LE(r.ms_min, r.ms_median);
    EXPECT_LE(r.ms_median, r.ms_max);
    EXPECT_GT(r.ms_min, 0.0);
    EXPECT_EQ(r.gflop_per_iter, bench_flop_count(c, 2, 3, 3, mode) / 1e9);
    EXPECT_DOUBLE_EQ(r.gflops, r.gflop_per_iter / (r.ms_median / 1000.0));
    EXPECT_DOUBLE_EQ(r.tokens_per_s, 6.0 / (r.ms_median / 1000.0));
    EXPECT_GT(r.peak_rss_mb, 0.0);
  }
}

}  // namespace
}  // namespace tfm
