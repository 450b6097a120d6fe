// tests/modules/transformer_test.cc — incremental decoding through the modules' own forward: a
// layer or stack stepped one position at a time with its cache (AttentionCache and the stack caches,
// tfm/modules/attention.h, tfm/modules/transformer.h) against the same module's full causal forward.
//
// Method: N rows each receive a random input per step. After step t the stepped output of every
// row is compared with position t of the full forward run on that row's whole history (t + 1
// positions, causal). Beam search's row reordering is exercised by select_rows halfway, which the
// reference mirrors by reordering the histories. The modules are in eval mode with dropout 0.1, so
// a dropout left on would show.
//
// Tolerance: both paths run the same ops on the same numbers; what differs is the GEMM's blocking
// (M = N rows per step against N·T rows) and the attention's key tiling (t + 1 cached keys against
// T keys, the masked ones adding exact zeros). Either only reorders a float32 sum of at most
// max(D, F) = 48 products, each |term| ≤ the row's magnitude: ≤ ~48·ε relative per op before
// LayerNorm re-normalises; across ~10 ops per layer × 2 layers we allow 1e-5 relative to the
// largest |output| (≈ 80 ε). The measured error is printed.
//
// To add a case: another module or option set in the loops below, stepped with compare_steps.
#include "tfm/modules/transformer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/inference.h"

namespace tfm {
namespace {

using tfm::testing::close_rel;
using tfm::testing::random_tensor;
using tfm::testing::rel_error;

constexpr double kTol = 1e-5;
constexpr int64_t D = 16, H = 4, F = 48;

TransformerLayerOptions options(bool norm_first, bool batch_first, const std::string& act) {
  TransformerLayerOptions o;
  o.d_model = D;
  o.nhead = H;
  o.dim_feedforward = F;
  o.dropout = 0.1f;
  o.activation = enum_from_name<Activation>(act);
  o.batch_first = batch_first;
  o.norm_first = norm_first;
  return o;
}

// Rows of a sequence tensor: x (N, T, C) batch_first or (T, N, C) → row n, position t (C floats).
const float* at(const Tensor& x, bool batch_first, int64_t n, int64_t t) {
  const int64_t C = x.size(2);
  return x.data() + (batch_first ? n * x.size(1) + t : t * x.size(1) + n) * C;
}

// histories[n] (T·C floats, positions in order) → (N, T, C) batch_first or (T, N, C).
Tensor pack(const std::vector<std::vector<float>>& histories, int64_t C, bool batch_first) {
  const int64_t N = static_cast<int64_t>(histories.size()), T = static_cast<int64_t>(histories[0].size()) / C;
  Tensor x = Tensor::empty(batch_first ? Shape{N, T, C} : Shape{T, N, C});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(const_cast<float*>(at(x, batch_first, n, t)), histories[static_cast<size_t>(n)].data() + t * C,
                  sizeof(float) * static_cast<size_t>(C));
  return x;
}

// Rows `rows` of a batch-first tensor (B, ...) → (rows.size(), ...), a copy.
Tensor gather(const Tensor& x, const std::vector<int64_t>& rows) {
  Shape s = x.shape();
  const int64_t row = x.numel() / s[0];
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(s, x.dtype());
  const size_t bytes = static_cast<size_t>(row) * (x.dtype() == DType::BOOL ? 1 : sizeof(float));
  const auto* src = x.dtype() == DType::BOOL ? static_cast<const void*>(x.data_bool()) : x.data();
  auto* dst = x.dtype() == DType::BOOL ? static_cast<void*>(out.data_bool()) : out.data();
  for (size_t r = 0; r < rows.size(); ++r)
    std::memcpy(static_cast<char*>(dst) + r * bytes, static_cast<const char*>(src) + rows[r] * bytes, bytes);
  return out;
}

using StepFn = std::function<Tensor(const Tensor& x)>;              // (N, 1, D) / (1, N, D) → same
using FullFn = std::function<Tensor(const Tensor& x, int64_t rows)>;  // (N, T, D) / (T, N, D) → same
using SelectFn = std::function<void(const std::vector<int64_t>& rows)>;

// Steps N0 rows through `steps` random positions (select(sel) after step reorder_at, when ≥ 0) and
// checks every step against the full forward's last position. Returns the largest relative error.
double compare_steps(int64_t N0, bool batch_first, int steps, uint64_t seed, const StepFn& step, const FullFn& full,
                     const SelectFn& select = {}, int reorder_at = -1, const std::vector<int64_t>& sel = {}) {
  std::vector<std::vector<float>> hist(static_cast<size_t>(N0));
  double worst = 0;
  for (int t = 0; t < steps; ++t) {
    const int64_t N = static_cast<int64_t>(hist.size());
    const Tensor x = random_tensor(batch_first ? Shape{N, 1, D} : Shape{1, N, D}, seed + static_cast<uint64_t>(t));
    for (int64_t n = 0; n < N; ++n) hist[static_cast<size_t>(n)].insert(hist[static_cast<size_t>(n)].end(),
                                                                        x.data() + n * D, x.data() + (n + 1) * D);
    const Tensor got = step(x);
    EXPECT_EQ(got.shape(), x.shape()) << "step " << t;
    const Tensor ref = full(pack(hist, D, batch_first), N);
    Tensor last = Tensor::empty(x.shape());  // the reference's position t, in the step's layout
    for (int64_t n = 0; n < N; ++n) std::memcpy(last.data() + n * D, at(ref, batch_first, n, t), sizeof(float) * D);
    worst = std::max(worst, rel_error(got, last));
    EXPECT_TRUE(close_rel(got, last, kTol, "step " + std::to_string(t)));
    if (t == reorder_at) {
      select(sel);
      std::vector<std::vector<float>> h;
      for (int64_t r : sel) h.push_back(hist[static_cast<size_t>(r)]);
      hist = std::move(h);
    }
  }
  return worst;
}

// EvalModeGuard writes the training flags only when some module of the tree trains, so that a model
// in eval mode (a loaded one) is only read and threads may decode with it at once; it restores the
// root's mode, as PyTorch's was_training idiom does.
TEST(EvalModeGuard, WritesOnlyWhenSomeModuleTrains) {
  Generator g{3, 0};
  TransformerEncoderLayer layer(options(false, true, "relu"), g);
  EXPECT_TRUE(layer.any_training());
  {
    EvalModeGuard eval(layer);
    EXPECT_FALSE(layer.any_training());
  }
  EXPECT_TRUE(layer.is_training() && layer.linear1.is_training());
  layer.eval();
  layer.linear1.train();  // a child left training under an eval root
  EXPECT_TRUE(layer.any_training());
  {
    EvalModeGuard eval(layer);
    EXPECT_FALSE(layer.any_training());
  }
  EXPECT_FALSE(layer.any_training());  // the root was in eval mode: nothing is put back in training
}

TEST(TransformerCache, EncoderLayerSteppedEqualsCausalForward) {
  for (bool norm_first : {false, true})
    for (bool batch_first : {true, false}) {
      Generator g{static_cast<uint64_t>(1 + 2 * norm_first + batch_first), 0};
      TransformerEncoderLayer layer(options(norm_first, batch_first, norm_first ? "gelu" : "relu"), g);
      layer.eval();
      NoGradGuard ng;
      AttentionCache cache;  // capacity 1: the buffers grow at steps 1, 2, 4
      const double worst = compare_steps(
          3, batch_first, 7, 100,
          [&](const Tensor& x) { return layer.forward(x, {}, {}, /*is_causal=*/true, &cache); },
          [&](const Tensor& x, int64_t) { return layer.forward(x, {}, {}, /*is_causal=*/true); },
          [&](const std::vector<int64_t>& rows) { cache.select_rows(rows); }, 3, {2, 0, 0, 1});
      EXPECT_EQ(cache.length(), 7);
      std::cout << "[ cache ] encoder layer norm_first=" << norm_first << " batch_first=" << batch_first
                << ": max rel error " << worst << "\n";
    }
}

TEST(TransformerCache, EncoderStackSteppedEqualsCausalForward) {
  Generator g{5, 0};
  TransformerEncoder enc(options(true, true, "swiglu"), 2, /*final_norm=*/true, g);
  enc.eval();
  NoGradGuard ng;
  TransformerEncoderCache cache(enc.layers.size(), 4);
  const double worst = compare_steps(
      4, true, 6, 200, [&](const Tensor& x) { return enc.forward(x, {}, {}, true, &cache); },
      [&](const Tensor& x, int64_t) { return enc.forward(x, {}, {}, true); },
      [&](const std::vector<int64_t>& rows) { cache.select_rows(rows); }, 2, {3, 3, 1});
  EXPECT_EQ(cache.length(), 6);
  std::cout << "[ cache ] encoder stack: max rel error " << worst << "\n";
}

// Memory rows padded at the end: lengths S, 3, 1 and 0 (an all-padding row attends to nothing and
// gets zeros in both paths).
TEST(TransformerCache, DecoderLayerSteppedEqualsCausalForward) {
  const int64_t S = 5;
  const std::vector<int64_t> len = {S, 3, 1, 0};
  const int64_t B = static_cast<int64_t>(len.size());
  for (bool norm_first : {false, true})
    for (bool batch_first : {true, false}) {
      Generator g{static_cast<uint64_t>(10 + 2 * norm_first + batch_first), 0};
      TransformerDecoderLayer layer(options(norm_first, batch_first, norm_first ? "relu" : "gelu"), g);
      layer.eval();
      NoGradGuard ng;
      const Tensor memory = random_tensor(batch_first ? Shape{B, S, D} : Shape{S, B, D}, 300);
      Tensor kpm = Tensor::empty({B, S}, DType::BOOL);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < S; ++j) kpm.data_bool()[b * S + j] = j >= len[static_cast<size_t>(b)];
      DecoderLayerCache cache;
      cache.self_attn.capacity = 2;
      cache.multihead_attn.memory_len = len;  // row_source empty: row n reads memory row n
      const double worst = compare_steps(
          B, batch_first, 6, 400,
          [&](const Tensor& x) { return layer.forward(x, memory, {}, {}, {}, {}, true, false, &cache); },
          [&](const Tensor& x, int64_t) { return layer.forward(x, memory, {}, {}, {}, kpm, true, false); });
      EXPECT_EQ(cache.self_attn.length(), 6);
      EXPECT_EQ(cache.multihead_attn.row_source, (std::vector<int64_t>{0, 1, 2, 3}));
      std::cout << "[ cache ] decoder layer norm_first=" << norm_first << " batch_first=" << batch_first
                << ": max rel error " << worst << "\n";
    }
}

// Several rows per memory row (as beam search decodes one source on K rows), reordered halfway:
// the reference gathers each row's memory and padding mask.
TEST(TransformerCache, DecoderStackWithRowSourceAndReorder) {
  const int64_t S = 6;
  const std::vector<int64_t> len = {4, S, 2};
  const int64_t Bm = static_cast<int64_t>(len.size());
  for (bool norm_first : {false, true}) {
    Generator g{static_cast<uint64_t>(20 + norm_first), 0};
    TransformerDecoder dec(options(norm_first, true, "geglu"), 2, /*final_norm=*/true, g);
    dec.eval();
    NoGradGuard ng;
    const Tensor memory = random_tensor({Bm, S, D}, 500);
    Tensor kpm = Tensor::empty({Bm, S}, DType::BOOL);
    for (int64_t b = 0; b < Bm; ++b)
      for (int64_t j = 0; j < S; ++j) kpm.data_bool()[b * S + j] = j >= len[static_cast<size_t>(b)];
    std::vector<int64_t> row_source = {0, 0, 1, 2, 2};
    TransformerDecoderCache cache(dec.layers.size(), 3, row_source, len);
    const std::vector<int64_t> sel = {4, 1, 1, 2};
    const double worst = compare_steps(
        static_cast<int64_t>(row_source.size()), true, 7, 600,
        [&](const Tensor& x) { return dec.forward(x, memory, {}, {}, {}, {}, true, false, &cache); },
        [&](const Tensor& x, int64_t) {
          return dec.forward(x, gather(memory, row_source), {}, {}, {}, gather(kpm, row_source), true, false);
        },
        [&](const std::vector<int64_t>& rows) {
          cache.select_rows(rows);
          std::vector<int64_t> src;
          for (int64_t r : rows) src.push_back(row_source[static_cast<size_t>(r)]);
          row_source = src;
        },
        3, sel);
    EXPECT_EQ(cache.length(), 7);
    for (const DecoderLayerCache& l : cache.layers) EXPECT_EQ(l.multihead_attn.row_source, (std::vector<int64_t>{2, 0, 0, 1}));
    std::cout << "[ cache ] decoder stack norm_first=" << norm_first << ": max rel error " << worst << "\n";
  }
}

// The attention variants through the cache: query/key heads 16 wide on d_model 16 (inner width 64),
// value heads of another width, no projection biases and a scale of its own — in every attention of
// a decoder stack (self-attention cache of H·Dh keys and H·Dv values; cross-attention memory
// projected to H·Dh + H·Dv) and an encoder layer run causally.
TEST(TransformerCache, AttentionVariantsSteppedEqualsCausalForward) {
  const int64_t S = 5;
  const std::vector<int64_t> len = {3, S};
  const int64_t Bm = static_cast<int64_t>(len.size());
  for (bool norm_first : {false, true}) {
    TransformerLayerOptions o = options(norm_first, norm_first, "gelu");
    o.attention.head_dim = 16;
    o.attention.v_head_dim = norm_first ? 8 : 16;
    o.attention.qkv_bias = false;
    o.attention.out_bias = norm_first;
    o.attention.attn_scale = 0.2f;
    Generator g{static_cast<uint64_t>(40 + norm_first), 0};
    TransformerDecoder dec(o, 2, /*final_norm=*/true, g);
    TransformerEncoderLayer enc(o, g);
    dec.eval();
    enc.eval();
    EXPECT_EQ(dec.layers[0]->self_attn.in_proj_weight.shape(), (Shape{2 * 64 + H * *o.attention.v_head_dim, D}));
    EXPECT_FALSE(dec.layers[0]->multihead_attn.in_proj_bias.defined());
    NoGradGuard ng;
    const bool bf = o.batch_first;
    const Tensor memory = random_tensor(bf ? Shape{Bm, S, D} : Shape{S, Bm, D}, 700);
    Tensor kpm = Tensor::empty({Bm, S}, DType::BOOL);
    for (int64_t b = 0; b < Bm; ++b)
      for (int64_t j = 0; j < S; ++j) kpm.data_bool()[b * S + j] = j >= len[static_cast<size_t>(b)];
    TransformerDecoderCache cache(dec.layers.size(), 2, {}, len);
    const double worst = compare_steps(
        Bm, bf, 6, 800, [&](const Tensor& x) { return dec.forward(x, memory, {}, {}, {}, {}, true, false, &cache); },
        [&](const Tensor& x, int64_t) { return dec.forward(x, memory, {}, {}, {}, kpm, true, false); });
    EXPECT_EQ(cache.length(), 6);
    AttentionCache enc_cache;
    const double worst_enc = compare_steps(
        3, bf, 5, 900, [&](const Tensor& x) { return enc.forward(x, {}, {}, true, &enc_cache); },
        [&](const Tensor& x, int64_t) { return enc.forward(x, {}, {}, true); });
    std::cout << "[ cache ] attention variants norm_first=" << norm_first << ": decoder stack max rel error " << worst
              << ", encoder layer " << worst_enc << "\n";
  }
}

// The same decoder stack with the attention variants, stepped and run in full inside an InferenceMode
// scope (packed Linear weights, including the narrowed rows of the cross-attention's in_proj), in
// float32 and in bfloat16: both paths round the same operands the same way, so the step still
// equals the full forward to the float32 tolerance.
TEST(TransformerCache, AttentionVariantsSteppedInInferenceMode) {
  const int64_t S = 4;
  TransformerLayerOptions o = options(true, true, "relu");
  o.attention.head_dim = 16;
  o.attention.v_head_dim = 12;
  o.attention.qkv_bias = false;
  o.attention.attn_scale = 0.3f;
  Generator g{60, 0};
  TransformerDecoder dec(o, 2, /*final_norm=*/true, g);
  dec.eval();
  const Tensor memory = random_tensor({3, S, D}, 1000);
  for (Precision precision : {Precision::FLOAT32, Precision::BFLOAT16}) {
    InferenceMode scope(precision);
    TransformerDecoderCache cache(dec.layers.size(), 2);
    const double worst = compare_steps(
        3, true, 5, 1100, [&](const Tensor& x) { return dec.forward(x, memory, {}, {}, {}, {}, true, false, &cache); },
        [&](const Tensor& x, int64_t) { return dec.forward(x, memory, {}, {}, {}, {}, true, false); });
    EXPECT_GT(InferenceMode::cached_weights(), 0u);
    std::cout << "[ cache ] attention variants in InferenceMode " << enum_name(precision) << ": max rel error "
              << worst << "\n";
  }
}

// The layer variants through the cache: RMSNorm everywhere (final norms too), one shared layer per
// stack (a cache entry per application: num_layers(), not layers.size()), no bias in the attention
// projections or norms, a bias-free or biased FFN, drop_path set (an identity in eval). Decoder and
// encoder stacks, outside and inside InferenceMode in both precisions, with a beam-style reorder.
TEST(TransformerCache, LayerVariantsSteppedEqualsCausalForward) {
  const int64_t S = 5;
  const std::vector<int64_t> len = {S, 2};
  for (bool norm_first : {false, true}) {
    TransformerLayerOptions o = options(norm_first, true, norm_first ? "gelu" : "relu");
    o.norm_type = NormType::RMS_NORM;
    o.share_layers = true;
    o.bias = false;
    o.ffn_bias = norm_first;
    o.drop_path = 0.2f;
    Generator g{static_cast<uint64_t>(70 + norm_first), 0};
    TransformerDecoder dec(o, 3, /*final_norm=*/true, g);
    TransformerEncoder enc(o, 2, /*final_norm=*/true, g);
    dec.eval();
    enc.eval();
    ASSERT_EQ(dec.layers.size(), 1u);
    ASSERT_EQ(dec.num_layers(), 3);
    EXPECT_EQ(dec.layers[0]->linear1.bias.defined(), norm_first);
    const Tensor memory = random_tensor({2, S, D}, 1200);
    Tensor kpm = Tensor::empty({2, S}, DType::BOOL);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < S; ++j) kpm.data_bool()[b * S + j] = j >= len[static_cast<size_t>(b)];
    for (int precision = -1; precision < 2; ++precision) {  // -1: outside InferenceMode
      std::unique_ptr<InferenceMode> scope;
      if (precision >= 0) scope = std::make_unique<InferenceMode>(static_cast<Precision>(precision));
      NoGradGuard ng;
      std::vector<int64_t> row_source = {0, 1, 1};
      TransformerDecoderCache cache(static_cast<size_t>(dec.num_layers()), 2, row_source, len);
      const double worst = compare_steps(
          3, true, 6, 1300, [&](const Tensor& x) { return dec.forward(x, memory, {}, {}, {}, {}, true, false, &cache); },
          [&](const Tensor& x, int64_t) {
            return dec.forward(x, gather(memory, row_source), {}, {}, {}, gather(kpm, row_source), true, false);
          },
          [&](const std::vector<int64_t>& rows) {
            cache.select_rows(rows);
            std::vector<int64_t> src;
            for (int64_t r : rows) src.push_back(row_source[static_cast<size_t>(r)]);
            row_source = src;
          },
          2, {2, 2, 0});
      EXPECT_EQ(cache.length(), 6);
      TransformerEncoderCache enc_cache(static_cast<size_t>(enc.num_layers()), 1);
      const double worst_enc = compare_steps(
          2, true, 5, 1400, [&](const Tensor& x) { return enc.forward(x, {}, {}, true, &enc_cache); },
          [&](const Tensor& x, int64_t) { return enc.forward(x, {}, {}, true); });
      std::cout << "[ cache ] layer variants norm_first=" << norm_first << " precision "
                << (precision < 0 ? "none" : enum_name(static_cast<Precision>(precision)))
                << ": decoder stack max rel error " << worst << ", encoder stack " << worst_enc << "\n";
    }
  }
}

TEST(TransformerCache, SelectRowsComposesRowSource) {
  AttentionCache c;  // empty row_source: the identity
  c.select_rows({2, 0, 2});
  EXPECT_EQ(c.row_source, (std::vector<int64_t>{2, 0, 2}));
  c.select_rows({1, 1, 0, 2});
  EXPECT_EQ(c.row_source, (std::vector<int64_t>{0, 0, 2, 2}));
  EXPECT_THROW(c.select_rows({4}), std::invalid_argument);
}

TEST(TransformerCache, ErrorsSayWhatTheCacheNeeds) {
  Generator g{30, 0};
  TransformerDecoderLayer layer(options(false, true, "relu"), g);
  const Tensor x = random_tensor({2, 1, D}, 1), memory = random_tensor({2, 3, D}, 2);
  auto expect_throw = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    DecoderLayerCache c;  // training mode with attention dropout 0.1
    expect_throw([&] { layer.forward(x, memory, {}, {}, {}, {}, true, false, &c); }, "eval()");
  }
  layer.eval();
  NoGradGuard ng;
  {
    DecoderLayerCache c;
    expect_throw([&] { layer.forward(x, memory, {}, {}, {}, {}, false, false, &c); }, "is_causal");
  }
  {
    DecoderLayerCache c;
    const Tensor mask = Tensor::zeros({1, 1});
    expect_throw([&] { layer.forward(x, memory, mask, {}, {}, {}, true, false, &c); }, "attn_mask");
  }
  {
    DecoderLayerCache c;
    const Tensor kpm = Tensor::zeros({2, 3}, DType::BOOL);
    expect_throw([&] { layer.forward(x, memory, {}, {}, {}, kpm, true, false, &c); }, "memory_len");
  }
  {
    DecoderLayerCache c;
    const Tensor two = random_tensor({2, 2, D}, 3);
    expect_throw([&] { layer.forward(two, memory, {}, {}, {}, {}, true, false, &c); }, "one position per row");
  }
  {
    DecoderLayerCache c;
    layer.forward(x, memory, {}, {}, {}, {}, true, false, &c);
    const Tensor other = random_tensor({2, 3, D}, 4);
    expect_throw([&] { layer.forward(x, other, {}, {}, {}, {}, true, false, &c); }, "memory differs");
  }
  {
    const Tensor k = random_tensor({2, 3, D}, 5), v = random_tensor({2, 3, D}, 6);
    AttentionCache c;
    expect_throw([&] { layer.multihead_attn.forward(x, k, v, {}, &c); }, "key and value must be one tensor");
  }
  Generator g2{31, 0};
  TransformerDecoder dec(options(false, true, "relu"), 2, true, g2);
  dec.eval();
  TransformerDecoderCache wrong(1, 1);
  expect_throw([&] { dec.forward(x, memory, {}, {}, {}, {}, true, false, &wrong); }, "the cache has 1 layers");
}

}  // namespace
}  // namespace tfm
