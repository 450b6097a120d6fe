// tests/models/model_test.cc — ModelConfig, Model's keys and forward, training on a tiny
// task, and the PyTorch round trips (tools/torch_models.py, tools/check_roundtrip.py), for the three
// architectures (the decoder-only language model's gradients too: DecoderGradientsMatchTorch).
//
// PyTorch checks run /usr/bin/python3 with torch 1.13 and are skipped only when torch is missing.
// Tolerances:
//  * logits: tools/check_roundtrip.py compares tfm with the PyTorch twin evaluated in float64 on the
//    same float32 weights, by max|tfm − ref| / max|ref|, and passes at max(2e-5, 20 × PyTorch
//    float32's own error on the same input) — the parity suite's rule (issue 2). 2e-5 ≈ 170 ε: a
//    forward is a chain of ~10·L dot products of length ≤ F, whose float32 rounding error grows like
//    √F·ε per product in practice (F = 64 → 8ε), and LayerNorm/softmax re-normalise after each.
//  * training curves: see NotebookConfigTrainsLikeTorch.
#include "tfm/models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "model_configs.h"
#include "test_util.h"
#include "tfm/autocast.h"
#include "tfm/autograd.h"
#include "tfm/io/safetensors.h"
#include "tfm/optim.h"

using namespace tfm;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kPython = "/usr/bin/python3";

bool have_torch() {
  static const bool ok = tfm::testing::run_command(kPython + " -c 'import torch'") == 0;
  return ok;
}

std::string tool(const std::string& name) { return std::string(TFM_SOURCE_DIR) + "/tools/" + name; }

using tfm::testing::random_lm_batch;
using tfm::testing::Rng;
using tfm::testing::small_decoder;
using tfm::testing::small_seq2seq;

ModelConfig small_encoder(bool norm_first = false) {
  ModelConfig c;
  c.arch = Arch::ENCODER;
  c.src_vocab_size = 20;
  c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.nhead = 4;
  c.num_encoder_layers = 2;
  c.dim_feedforward = 48;
  c.dropout = 0.1f;
  c.norm_first = norm_first;
  c.max_len = 32;
  return c;
}

// Notebook 4's layers ("Transformer implementation"): 4 heads of width 16 on d_model 16 (inner width
// 64), no attention biases, FFN with bias, post-norm, unscaled embedding, sinusoidal positions.
ModelConfig notebook4_encoder(int64_t layers = 2) {
  ModelConfig c = small_encoder(false);
  c.num_encoder_layers = layers;
  c.attention.head_dim = 16;
  c.attention.qkv_bias = false;
  c.attention.out_bias = false;
  return c;
}

// Notebook 5's ("build_transformer"): w_q, w_k, w_v, w_o without bias, FFN with bias, pre-norm,
// embeddings ·√D, both final norms (the seq2seq arch has them).
ModelConfig notebook5_seq2seq() {
  ModelConfig c = small_seq2seq(true, false);
  c.attention.qkv_bias = false;
  c.attention.out_bias = false;
  c.scale_embeddings = true;
  return c;
}

// Learned positions on an encoder (pre-norm, scaled embeddings) and on a seq2seq.
ModelConfig learned_encoder() {
  ModelConfig c = small_encoder(true);
  c.positional = Positional::LEARNED;
  c.scale_embeddings = true;
  return c;
}
ModelConfig learned_seq2seq() {
  ModelConfig c = small_seq2seq(false, true);
  c.positional = Positional::LEARNED;
  return c;
}

// RMSNorm everywhere (the encoder's final norm too: pre-norm) with one shared layer per stack.
ModelConfig rms_shared_encoder() {
  ModelConfig c = small_encoder(true);
  c.num_encoder_layers = 3;
  c.norm_type = NormType::RMS_NORM;
  c.share_layers = true;
  return c;
}
// The same on a seq2seq (both stacks shared, both final norms RMS), post-norm, with bias-free FFN.
ModelConfig rms_shared_seq2seq() {
  ModelConfig c = small_seq2seq(false, false, "gelu");
  c.norm_type = NormType::RMS_NORM;
  c.share_layers = true;
  c.num_decoder_layers = 3;
  c.ffn_bias = false;
  return c;
}

// Language models beside small_decoder() (model_configs.h): torch.nn's layers in the other choices,
// nanoGPT's bias-free layers (the functional twin), RMSNorm with one shared layer and a head width.
ModelConfig untied_post_norm_decoder() {
  ModelConfig c = small_decoder();
  c.norm_first = false;
  c.activation = Activation::RELU;
  c.positional = Positional::SINUSOIDAL;
  c.tie_embeddings = false;
  return c;
}
ModelConfig nanogpt_decoder() {
  ModelConfig c = small_decoder();
  c.bias = false;
  return c;
}
ModelConfig rms_shared_decoder() {
  ModelConfig c = small_decoder();
  c.num_decoder_layers = 3;
  c.norm_type = NormType::RMS_NORM;
  c.share_layers = true;
  c.attention.head_dim = 8;
  return c;
}

// A batch of variable-length sequences padded at the end. seq2seq: target = source tokens mapped
// into the target vocabulary, tgt_in = bos + target, tgt_out = target + eos.
data::TokenBatch random_batch(const ModelConfig& c, int64_t B, uint64_t seed) {
  Rng r(seed);
  data::TokenBatch b;
  b.B = B;
  std::vector<std::vector<int32_t>> src(B), tgt(B);
  for (int64_t i = 0; i < B; ++i) {
    const int n = r.uniform_int(1, 7);
    for (int j = 0; j < n; ++j) src[i].push_back(r.uniform_int(3, static_cast<int32_t>(c.src_vocab_size) - 1));
    const int m = r.uniform_int(1, 6);
    for (int j = 0; j < m; ++j) tgt[i].push_back(r.uniform_int(3, static_cast<int32_t>(c.tgt_vocab_size) - 1));
    b.S = std::max<int64_t>(b.S, n);
    b.T = std::max<int64_t>(b.T, m + 1);
  }
  b.src.assign(B * b.S, c.pad_id);
  for (int64_t i = 0; i < B; ++i) std::copy(src[i].begin(), src[i].end(), b.src.begin() + i * b.S);
  if (c.arch == Arch::ENCODER) {  // one target per source position: the reversed source
    b.T = 0;
    b.tgt_out.assign(B * b.S, c.pad_id);
    for (int64_t i = 0; i < B; ++i) std::copy(src[i].rbegin(), src[i].rend(), b.tgt_out.begin() + i * b.S);
    return b;
  }
  b.tgt_in.assign(B * b.T, c.pad_id);
  b.tgt_out.assign(B * b.T, c.pad_id);
  for (int64_t i = 0; i < B; ++i) {
    b.tgt_in[i * b.T] = c.bos_id;
    for (size_t j = 0; j < tgt[i].size(); ++j) {
      b.tgt_in[i * b.T + 1 + j] = tgt[i][j];
      b.tgt_out[i * b.T + j] = tgt[i][j];
    }
    b.tgt_out[i * b.T + tgt[i].size()] = c.eos_id;
  }
  return b;
}

// n random batches of B rows, seeds first_seed, first_seed + 1, ...
std::vector<data::TokenBatch> random_batches(const ModelConfig& c, int n, int64_t B, uint64_t first_seed) {
  std::vector<data::TokenBatch> batches;
  for (int i = 0; i < n; ++i) batches.push_back(random_batch(c, B, first_seed + static_cast<uint64_t>(i)));
  return batches;
}

Tensor ids_tensor(const std::vector<int32_t>& ids, int64_t rows, int64_t cols) {
  std::vector<float> f(ids.begin(), ids.end());
  return Tensor::from_vector({rows, cols}, f);
}

void write_model_dir(const std::string& dir, Model& model) {
  std::ofstream(dir + "/config.json") << model.config().to_json();
  io::save_safetensors(dir + "/model.safetensors", model.named_parameters());
}

// ---- keys -----------------------------------------------------------------------------------------
TEST(Model, StateDictKeys) {
  Generator g{1, 0};
  Model enc(small_encoder(), g);
  const NamedTensors se = enc.state_dict();
  EXPECT_TRUE(se.contains("embedding.weight") && se.contains("generator.weight") && se.contains("generator.bias"));
  EXPECT_TRUE(se.contains("encoder.layers.1.self_attn.in_proj_weight"));
  EXPECT_FALSE(se.contains("encoder.norm.weight"));  // post-norm: no final norm
  Model enc_pre(small_encoder(true), g);
  EXPECT_TRUE(enc_pre.state_dict().contains("encoder.norm.weight"));

  Model s2s(small_seq2seq(), g);
  const NamedTensors ss = s2s.state_dict();
  for (const char* k : {"src_embedding.weight", "tgt_embedding.weight", "generator.weight", "generator.bias",
                        "transformer.encoder.layers.0.linear1.weight", "transformer.encoder.norm.weight",
                        "transformer.decoder.layers.1.multihead_attn.in_proj_weight", "transformer.decoder.norm.bias"})
    EXPECT_TRUE(ss.contains(k)) << k;
  EXPECT_EQ(ss.at("tgt_embedding.weight").shape(), (Shape{13, 16}));
  EXPECT_EQ(ss.at("generator.weight").shape(), (Shape{13, 16}));
  for (const auto& [k, t] : ss) EXPECT_EQ(k.find("positional"), std::string::npos) << k;  // a buffer, not saved

  Model tied(small_seq2seq(false, true), g);
  const NamedTensors st = tied.state_dict();
  EXPECT_FALSE(st.contains("generator.weight"));
  EXPECT_TRUE(st.contains("generator.bias"));
  EXPECT_EQ(tied.num_parameters() + 13 * 16, s2s.num_parameters());
}

// The variants' keys: absent biases have none, the head width sets the projections' shapes, learned
// tables are (max_len, D) under their names, and the defaults have no new key.
TEST(Model, VariantStateDictKeys) {
  Generator g{1, 0};
  Model nb4(notebook4_encoder(), g);
  const NamedTensors s4 = nb4.state_dict();
  EXPECT_EQ(s4.at("encoder.layers.0.self_attn.in_proj_weight").shape(), (Shape{3 * 64, 16}));
  EXPECT_EQ(s4.at("encoder.layers.0.self_attn.out_proj.weight").shape(), (Shape{16, 64}));
  EXPECT_FALSE(s4.contains("encoder.layers.0.self_attn.in_proj_bias"));
  EXPECT_FALSE(s4.contains("encoder.layers.0.self_attn.out_proj.bias"));
  EXPECT_TRUE(s4.contains("encoder.layers.0.linear1.bias") && s4.contains("encoder.layers.0.norm1.bias"));
  EXPECT_FALSE(s4.contains("pos_embedding.weight"));

  Model le(learned_encoder(), g);
  EXPECT_EQ(le.state_dict().at("pos_embedding.weight").shape(), (Shape{32, 16}));
  Model ls(learned_seq2seq(), g);
  const NamedTensors sl = ls.state_dict();
  EXPECT_EQ(sl.at("src_pos_embedding.weight").shape(), (Shape{64, 16}));
  EXPECT_EQ(sl.at("tgt_pos_embedding.weight").shape(), (Shape{64, 16}));
  EXPECT_FALSE(sl.contains("pos_embedding.weight"));
  // N(0, 0.02), not Xavier: the sample standard deviation of 1024 draws is within 10% of 0.02.
  for (const char* k : {"src_pos_embedding.weight", "tgt_pos_embedding.weight"}) {
    const Tensor& t = sl.at(k);
    double ss = 0;
    for (int64_t i = 0; i < t.numel(); ++i) ss += double(t.data()[i]) * t.data()[i];
    EXPECT_NEAR(std::sqrt(ss / t.numel()), 0.02, 0.002) << k;
  }

  // Shared layers: one layer's keys under layers.0., RMS norms have a weight only.
  Model rs(rms_shared_seq2seq(), g);
  const NamedTensors sr = rs.state_dict();
  EXPECT_TRUE(sr.contains("transformer.encoder.layers.0.norm1.weight"));
  EXPECT_FALSE(sr.contains("transformer.encoder.layers.0.norm1.bias"));
  EXPECT_FALSE(sr.contains("transformer.encoder.layers.1.linear1.weight"));
  EXPECT_FALSE(sr.contains("transformer.decoder.layers.1.self_attn.in_proj_weight"));
  EXPECT_TRUE(sr.contains("transformer.decoder.norm.weight") && !sr.contains("transformer.decoder.norm.bias"));
  EXPECT_FALSE(sr.contains("transformer.decoder.layers.0.linear1.bias"));
  EXPECT_TRUE(sr.contains("transformer.decoder.layers.0.self_attn.in_proj_bias"));
  Model re(rms_shared_encoder(), g);
  EXPECT_TRUE(re.state_dict().contains("encoder.norm.weight"));
  EXPECT_FALSE(re.state_dict().contains("encoder.norm.bias"));
  EXPECT_FALSE(re.state_dict().contains("encoder.layers.1.norm1.weight"));

  ModelConfig none = small_encoder();
  none.positional = Positional::NONE;
  Model mn(none, g);
  Model md(small_encoder(), g);
  EXPECT_EQ(mn.num_parameters(), md.num_parameters());
}

// Stochastic depth acts in training only: in eval mode a model with drop_path 0.5 computes what the
// same weights compute without it, and in training the per-sample drops change the logits.
TEST(Model, DropPathTrainingOnly) {
  Generator g{9, 0};
  ModelConfig c = small_encoder(true);
  c.dropout = 0;
  c.drop_path = 0.5f;
  Model with(c, g);
  c.drop_path = 0;
  Model without(c, g);
  without.load_state_dict(with.state_dict());
  const data::TokenBatch b = random_batch(c, 8, 3);
  with.eval();
  without.eval();
  EXPECT_TRUE(tfm::testing::close_rel(with.forward(b), without.forward(b), 0.0, "eval"));
  with.train();
  without.train();
  EXPECT_GT(tfm::testing::rel_error(with.forward(b), without.forward(b)), 1e-3);
}

// Positions matter (sinusoidal and learned move the logits of a permuted sequence's tokens), and with
// positional none the encoder is permutation-equivariant: token i's logits do not depend on where it sits.
TEST(Model, PositionalNoneIsPermutationEquivariant) {
  Generator g{8, 0};
  ModelConfig c = small_encoder();
  c.positional = Positional::NONE;
  Model m(c, g);
  m.eval();
  data::TokenBatch a;
  a.B = 1;
  a.S = 4;
  a.src = {3, 7, 9, 12};
  data::TokenBatch b = a;
  b.src = {12, 9, 7, 3};
  const Tensor la = m.forward(a), lb = m.forward(b);  // (1, 4, V)
  const int64_t V = la.size(2);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(la.data()[t * V + v], lb.data()[(3 - t) * V + v], 1e-5) << t << " " << v;
}

// seq2seq: every matrix is xavier-uniform, |w| ≤ √(6/(fan_in + fan_out)); biases keep their inits.
TEST(Model, XavierInitialisation) {
  Generator g{2, 0};
  Model m(small_seq2seq(), g);
  for (auto& [k, t] : m.named_parameters()) {
    if (t.dim() < 2) continue;
    const double a = std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1)));
    double mx = 0;
    for (int64_t i = 0; i < t.numel(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(t.data()[i])));
    EXPECT_LE(mx, a) << k;
    EXPECT_GT(mx, 0.5 * a) << k;  // uses the range, not left at another init
  }
}

TEST(Model, TiedEmbeddingSharesStorageAndGradient) {
  Generator g{3, 0};
  ModelConfig c = small_seq2seq(false, true);
  c.dropout = 0;
  Model m(c, g);
  const data::TokenBatch b = random_batch(c, 3, 7);
  m.loss(b).backward();
  Tensor w = m.state_dict().at("tgt_embedding.weight");
  ASSERT_TRUE(w.grad().defined());
  // The generator's gradient dWᵀ·h covers every row, the embedding's only the used ids: the row of
  // a token never fed to the decoder still has a gradient, from the generator alone.
  bool row_used[13] = {};
  for (int32_t id : b.tgt_in) row_used[id] = true;
  int unused = -1;
  for (int v = 0; v < 13; ++v)
    if (!row_used[v]) unused = v;
  ASSERT_GE(unused, 0);
  double s = 0;
  for (int d = 0; d < 16; ++d) s += std::fabs(w.grad().data()[unused * 16 + d]);
  EXPECT_GT(s, 0.0);
}

TEST(Model, ForwardShapesAndBadBatches) {
  Generator g{4, 0};
  Model m(small_seq2seq(), g);
  m.eval();
  data::TokenBatch b = random_batch(m.config(), 3, 1);
  EXPECT_EQ(m.forward(b).shape(), (Shape{3, b.T, 13}));
  data::TokenBatch bad = b;
  bad.tgt_in.pop_back();
  EXPECT_THROW(m.forward(bad), std::invalid_argument);
  bad = b;
  bad.src[0] = 11;  // outside the source vocabulary
  EXPECT_THROW(m.forward(bad), std::invalid_argument);
  Model e(small_encoder(), g);
  data::TokenBatch eb = random_batch(e.config(), 2, 1);
  EXPECT_EQ(e.forward(eb).shape(), (Shape{2, eb.S, 20}));
  eb.tgt_out.push_back(0);
  EXPECT_THROW(e.loss(eb), std::invalid_argument);
  // The public pieces name their argument when the ids do not fill B·S.
  try {
    m.encode({3, 4, 5, 6, 7}, 2, 2);
    ADD_FAILURE() << "5 ids for 2·2";
  } catch (const std::invalid_argument& err) {
    EXPECT_EQ(std::string(err.what()), "encode: src has 5 entries, expected B·S = 2·2");
  }
  try {
    padding_mask({3, 4, 5}, 2, 2, 0);
    ADD_FAILURE() << "3 ids for 2·2";
  } catch (const std::invalid_argument& err) {
    EXPECT_EQ(std::string(err.what()), "padding_mask: ids has 3 entries, expected B·T = 2·2");
  }
}

// Padding is invisible: a sequence's logits do not change when the batch is padded wider
// (up to rounding: different padding changes nothing but the number of masked keys, which add exact
// zeros, so the values agree to float rounding of the same operations — allow 1e-6 relative).
TEST(Model, PaddingIsMasked) {
  Generator g{5, 0};
  for (const char* arch : {"encoder", "seq2seq"}) {
    Model m(std::string(arch) == "encoder" ? small_encoder() : small_seq2seq(), g);
    m.eval();
    const ModelConfig& c = m.config();
    data::TokenBatch one = random_batch(c, 1, 11);
    data::TokenBatch wide = one;
    const int64_t extra = 3;
    wide.S = one.S + extra;
    wide.src.assign(wide.S, c.pad_id);
    std::copy(one.src.begin(), one.src.end(), wide.src.begin());
    if (c.arch == Arch::SEQ2SEQ) {
      wide.T = one.T + extra;
      wide.tgt_in.assign(wide.T, c.pad_id);
      std::copy(one.tgt_in.begin(), one.tgt_in.end(), wide.tgt_in.begin());
      wide.tgt_out.clear();
    } else {
      wide.tgt_out.clear();
    }
    const Tensor a = m.forward(one), w = m.forward(wide);
    const int64_t L = a.size(1), V = a.size(2);
    const Tensor w_cut = Tensor::from_vector({1, L, V}, std::vector<float>(w.data(), w.data() + L * V));
    EXPECT_TRUE(tfm::testing::close_rel(w_cut, a, 1e-6, arch));
  }
}

// ---- training -------------------------------------------------------------------------------------
// A tiny copy task (target = source) with Adam: the mean loss of the last 5 steps must fall below
// 40% of the first step's (ln 10 ≈ 2.3 at start; a model that learned nothing stays near 2).
TEST(Model, LossDecreasesOnCopyTask) {
  Generator g{6, 0};
  ModelConfig c = small_seq2seq();
  c.src_vocab_size = c.tgt_vocab_size = 10;
  c.d_model = 32;
  c.dim_feedforward = 64;
  c.num_encoder_layers = c.num_decoder_layers = 1;
  c.dropout = 0;
  Model m(c, g);
  Adam opt(m.named_parameters(), 3e-3f);
  std::vector<float> losses;
  for (int step = 0; step < 80; ++step) {
    data::TokenBatch b = random_batch(c, 32, 1000 + step);
    // copy: target = source
    b.T = b.S + 1;
    b.tgt_in.assign(b.B * b.T, c.pad_id);
    b.tgt_out.assign(b.B * b.T, c.pad_id);
    for (int64_t i = 0; i < b.B; ++i) {
      b.tgt_in[i * b.T] = c.bos_id;
      int64_t j = 0;
      for (; j < b.S && b.src[i * b.S + j] != c.pad_id; ++j) {
        b.tgt_in[i * b.T + j + 1] = b.src[i * b.S + j];
        b.tgt_out[i * b.T + j] = b.src[i * b.S + j];
      }
      b.tgt_out[i * b.T + j] = c.eos_id;
    }
    opt.zero_grad();
    Tensor loss = m.loss(b);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  double tail = 0;
  for (int i = 75; i < 80; ++i) tail += losses[i] / 5;
  EXPECT_LT(tail, 0.4 * losses[0]) << "first " << losses[0] << ", last five mean " << tail;
}

// share_embeddings: one table embeds both sides, so src_embedding.weight is absent and the table's
// gradient gathers the source's rows too; it needs a seq2seq model with equal vocabulary sizes.
TEST(Model, ShareEmbeddingsUsesTheTargetTableForTheSource) {
  ModelConfig c = small_seq2seq();
  c.src_vocab_size = c.tgt_vocab_size;
  c.dropout = 0.0f;
  c.share_embeddings = true;
  Generator g{5, 0};
  Model m(c, g);
  const NamedTensors sd = m.named_parameters();
  EXPECT_FALSE(sd.contains("src_embedding.weight"));
  ASSERT_TRUE(sd.contains("tgt_embedding.weight"));
  // A source id that never occurs in the target input still gets a gradient in the shared table.
  data::TokenBatch b;
  b.B = 1, b.S = 3, b.T = 2;
  b.src = {7, 8, 9};
  b.tgt_in = {1, 4};
  b.tgt_out = {4, 2};
  m.loss(b).backward();
  const Tensor grad = m.named_parameters().at("tgt_embedding.weight").grad();
  ASSERT_TRUE(grad.defined());
  double row9 = 0;
  for (int64_t j = 0; j < c.d_model; ++j) row9 += std::abs(grad.data()[9 * c.d_model + j]);
  EXPECT_GT(row9, 0.0);
  ModelConfig bad = c;
  bad.src_vocab_size = 11;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = small_encoder();
  bad.share_embeddings = true;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

// ---- PyTorch round trip ---------------------------------------------------------------------------
TEST(Model, TorchRoundTripLogits) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  struct Case {
    ModelConfig c;
    const char* name;
    const char* twin;  // torch_models.py's twin: torch.nn's classes, or the functional layers for the variants
  };
  ModelConfig none_scaled = small_encoder();
  none_scaled.positional = Positional::NONE;
  none_scaled.scale_embeddings = true;
  ModelConfig unscaled_s2s = small_seq2seq(false, false);
  unscaled_s2s.scale_embeddings = false;
  unscaled_s2s.attention.head_dim = 8;
  unscaled_s2s.attention.v_head_dim = 6;
  unscaled_s2s.attention.attn_scale = 0.2f;
  unscaled_s2s.bias = false;
  unscaled_s2s.attention.qkv_bias = true;
  ModelConfig glu_encoder = small_encoder(true);  // the gated activations: linear1 2F wide, [a | b] → a·g(b)
  glu_encoder.activation = Activation::GLU;
  ModelConfig swiglu_decoder = small_decoder();
  swiglu_decoder.activation = Activation::SWIGLU;
  ModelConfig shared_s2s = small_seq2seq(true, true);
  shared_s2s.src_vocab_size = shared_s2s.tgt_vocab_size;
  shared_s2s.share_embeddings = true;
  std::vector<Case> cases = {
      {small_encoder(false), "encoder post-norm", "torch.nn"},
      {small_encoder(true), "encoder pre-norm", "torch.nn"},
      {small_seq2seq(false, false), "seq2seq post-norm", "torch.nn"},
      {small_seq2seq(true, true, "gelu"), "seq2seq pre-norm tied gelu", "torch.nn"},
      {notebook4_encoder(), "notebook 4: head_dim 16 on d_model 16, no attention biases", "functional"},
      {notebook5_seq2seq(), "notebook 5: seq2seq bias-free attention, pre-norm, scaled", "functional"},
      {learned_encoder(), "encoder learned positions, scaled", "torch.nn"},
      {learned_seq2seq(), "seq2seq learned positions, tied", "torch.nn"},
      {none_scaled, "encoder no positions, scaled", "torch.nn"},
      {unscaled_s2s, "seq2seq unscaled, Dh 8, Dv 6, scale 0.2, only qkv biases", "functional"},
      {rms_shared_encoder(), "encoder rms_norm, shared layers, pre-norm", "functional"},
      {rms_shared_seq2seq(), "seq2seq rms_norm, shared layers, no FFN bias", "functional"},
      {small_decoder(), "decoder (pre-norm, gelu, learned, tied)", "torch.nn"},
      {untied_post_norm_decoder(), "decoder post-norm relu sinusoidal untied", "torch.nn"},
      {nanogpt_decoder(), "decoder without biases (nanoGPT)", "functional"},
      {rms_shared_decoder(), "decoder rms_norm, shared layers, Dh 8", "functional"},
      {shared_s2s, "seq2seq shared source/target embedding, tied", "torch.nn"},
      {glu_encoder, "encoder pre-norm glu", "functional"},
      {small_seq2seq(false, false, "geglu"), "seq2seq post-norm geglu", "functional"},
      {swiglu_decoder, "decoder swiglu", "functional"}};
  uint64_t seed = 10;
  std::string args;
  std::vector<std::string> dirs;
  for (auto& cs : cases) {
    Generator g{seed++, 0};
    Model m(cs.c, g);
    m.eval();
    const data::TokenBatch b = cs.c.family().data == DataKind::TEXT ? random_lm_batch(cs.c, 4, 9, seed) : random_batch(cs.c, 4, seed);
    const Tensor logits = m.forward(b);
    const std::string dir = tfm::testing::temp_dir("roundtrip");
    write_model_dir(dir, m);
    NamedTensors inputs = {{"src", ids_tensor(b.src, b.B, b.S)}, {"logits", logits}};
    if (cs.c.arch == Arch::SEQ2SEQ) inputs.insert("tgt_in", ids_tensor(b.tgt_in, b.B, b.T));
    io::save_safetensors(dir + "/inputs.safetensors", inputs);
    args += " " + dir + " " + dir + "/inputs.safetensors";
    dirs.push_back(dir);
    if (dirs.size() == 1) {  // the checker must notice an error: the first case again, logits off by 1e-4
      Tensor off = logits.clone();
      for (int64_t i = 0; i < off.numel(); ++i) off.data()[i] *= 1.0f + 1e-4f;
      inputs.at("logits") = off;
      io::save_safetensors(dir + "/wrong.safetensors", inputs);
    }
  }
  args += " " + dirs[0] + " " + dirs[0] + "/wrong.safetensors";
  std::string out;
  const int rc = tfm::testing::run_command(kPython + " " + tool("check_roundtrip.py") + args + " --tol 2e-5", &out);
  EXPECT_EQ(rc, 1) << "the wrong logits must fail the check: " << out;
  std::cout << "[ roundtrip ] " << out;
  // One JSON line per case, each ok, then the deliberately wrong one, not ok.
  std::istringstream lines(out);
  std::string line;
  size_t n = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const bool expect_ok = n < cases.size();
    const json r = json::parse(line);
    EXPECT_EQ(r.at("ok").get<bool>(), expect_ok) << (expect_ok ? cases[n].name : "wrong logits") << ": " << line;
    if (expect_ok) {
      EXPECT_EQ(r.at("twin").get<std::string>(), cases[n].twin) << cases[n].name;
    }
    ++n;
  }
  EXPECT_EQ(n, cases.size() + 1) << out;
  for (const auto& d : dirs) fs::remove_all(d);
}

// Pads every batch to the widest S (and T) among them, so all fit one (steps, B, ·) tensor.
std::vector<data::TokenBatch> pad_to_common_width(const std::vector<data::TokenBatch>& batches, int32_t pad) {
  int64_t S = 0, T = 0;
  for (const auto& b : batches) {
    S = std::max(S, b.S);
    T = std::max(T, b.T);
  }
  std::vector<data::TokenBatch> out;
  for (const auto& b : batches) {
    data::TokenBatch p;
    p.B = b.B;
    p.S = S;
    p.T = b.tgt_in.empty() ? 0 : T;
    auto widen = [&](const std::vector<int32_t>& v, int64_t from, int64_t to) {
      std::vector<int32_t> w(static_cast<size_t>(b.B * to), pad);
      for (int64_t i = 0; i < b.B; ++i) std::copy(v.begin() + i * from, v.begin() + (i + 1) * from, w.begin() + i * to);
      return w;
    };
    p.src = widen(b.src, b.S, S);
    if (b.tgt_in.empty()) {
      p.tgt_out = widen(b.tgt_out, b.S, S);
    } else {
      p.tgt_in = widen(b.tgt_in, b.T, T);
      p.tgt_out = widen(b.tgt_out, b.T, T);
    }
    out.push_back(std::move(p));
  }
  return out;
}

Tensor stack_ids(const std::vector<data::TokenBatch>& bs, std::vector<int32_t> data::TokenBatch::*field, int64_t width) {
  std::vector<float> v;
  for (const auto& b : bs) v.insert(v.end(), (b.*field).begin(), (b.*field).end());
  return Tensor::from_vector({static_cast<int64_t>(bs.size()), bs[0].B, width}, v);
}

// Trains `m` (dropout 0) with Adam(lr) on `batches` in tfm and, from the same initial weights, in
// PyTorch float32 and float64 (tools/torch_models.py train), and compares the loss curves.
// Tolerance: PyTorch float32 itself drifts from the float64 curve by rounding that Adam's
// normalised steps carry forward; tfm's float32 curve must stay within 20× that drift of the
// float64 curve at every step (the parity rule applied to the whole curve), floored at 2e-5 relative
// to the loss. The first loss (identical weights, pure forward) must agree to 2e-5 relative like
// any forward.
// The optimizer of a curve: Adam(lr) by default; AdamW, betas and weight decay on all parameters or on
// the matrices only (torch's two parameter groups) when set.
struct CurveOptim {
  bool adamw = false;
  float beta1 = 0.9f, beta2 = 0.999f, weight_decay = 0;
  bool matrices_only = false;
};

std::string float_text(float v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

// In bfloat16 (precision BFLOAT16: tfm's steps under Autocast, the references unchanged) the rule is scaled by
// bf16's unit roundoff over float32's, u_b/u = 2⁻⁸/2⁻²⁴ = 2¹⁶: every bound above, the first loss's included, is
// 2¹⁶ times wider — the float32 curve's drift with each rounding 2¹⁶ times larger. The bf16 curve must also leave
// float32's envelope: its largest distance from float64 above 3× PyTorch float32's (bf16 really ran; tfm float32
// stays near 0.5×, bf16 measures about 10×: docs/bf16.md, "Training").
void expect_training_like_torch(Model& m, const std::vector<data::TokenBatch>& raw, float lr, const char* what,
                                const CurveOptim& optim = {}, Precision precision = Precision::FLOAT32) {
  const std::vector<data::TokenBatch> batches = pad_to_common_width(raw, m.config().pad_id);
  const std::string dir = tfm::testing::temp_dir("curve");
  write_model_dir(dir, m);
  const bool s2s = m.config().arch == Arch::SEQ2SEQ;
  const int64_t S = batches[0].S, T = batches[0].T;
  NamedTensors tensors = {{"src", stack_ids(batches, &data::TokenBatch::src, S)},
                          {"tgt_out", stack_ids(batches, &data::TokenBatch::tgt_out, s2s ? T : S)}};
  if (s2s) tensors.insert("tgt_in", stack_ids(batches, &data::TokenBatch::tgt_in, T));
  std::ostringstream lr_text;
  lr_text.precision(9);
  lr_text << lr;
  std::map<std::string, std::string> meta = {{"lr", lr_text.str()}};
  if (optim.adamw || optim.beta1 != 0.9f || optim.beta2 != 0.999f || optim.weight_decay != 0 || optim.matrices_only)
    meta.insert({{"optimizer", optim.adamw ? "adamw" : "adam"},
                 {"beta1", float_text(optim.beta1)},
                 {"beta2", float_text(optim.beta2)},
                 {"weight_decay", float_text(optim.weight_decay)},
                 {"decay_params", optim.matrices_only ? "matrices" : "all"}});
  io::save_safetensors(dir + "/batches.safetensors", tensors, meta);
  std::string out;
  const int rc = tfm::testing::run_command(kPython + " " + tool("torch_models.py") + " train " + dir, &out);
  ASSERT_EQ(rc, 0) << out;

  m.train();
  const NamedTensors params = m.named_parameters();
  std::vector<bool> decayed;
  if (optim.matrices_only)
    for (const auto& [k, p] : params) decayed.push_back(p.dim() >= 2);
  Adam opt(params, lr, optim.beta1, optim.beta2, 1e-8f, optim.weight_decay, optim.adamw, decayed);
  std::vector<double> ours;
  for (const data::TokenBatch& b : batches) {
    opt.zero_grad();
    {
      Autocast autocast(precision);  // bf16: the Linear matmuls; the optimizer steps after the scope
      Tensor loss = m.loss(b);
      loss.backward();
      ours.push_back(loss.item());
    }
    opt.step();
  }
  std::ifstream f(dir + "/torch_losses.json");
  const json curves = json::parse(f);
  const auto t32 = curves.at("float32").get<std::vector<double>>();
  const auto t64 = curves.at("float64").get<std::vector<double>>();
  ASSERT_EQ(t32.size(), ours.size());
  double drift32 = 0, drift_tfm = 0, mag = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    drift32 = std::max(drift32, std::fabs(t32[i] - t64[i]));
    drift_tfm = std::max(drift_tfm, std::fabs(ours[i] - t64[i]));
    mag = std::max(mag, std::fabs(t64[i]));
  }
  const double scale = precision == Precision::BFLOAT16 ? 65536.0 : 1.0;  // u_b / u (see above)
  const double bound = scale * std::max(20 * drift32, 2e-5 * mag);
  std::cout << "[ curve ] " << what << ": loss " << ours.front() << " -> " << ours.back() << " (torch64 " << t64.front()
            << " -> " << t64.back() << "); max |tfm - torch64| " << drift_tfm << ", max |torch32 - torch64| "
            << drift32 << ", bound " << bound << "\n";
  EXPECT_NEAR(ours[0], t64[0], scale * 2e-5 * std::fabs(t64[0])) << what;
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], t64[i], bound) << what << " step " << i + 1 << ": tfm " << ours[i] << ", torch32 " << t32[i];
  EXPECT_LT(ours.back(), ours.front()) << what;  // and it learns
  if (precision == Precision::BFLOAT16) {
    EXPECT_GT(drift_tfm, 3 * drift32) << what << ": the bf16 curve is inside float32's envelope (did bf16 run?)";
  }
  fs::remove_all(dir);
}

// `steps` batches of the reverse task as the notebook draws them: B sequences, lengths uniform in
// 3..15, tokens uniform in 1..19, 0 = padding, target = the reversed sequence.
std::vector<data::TokenBatch> reverse_batches(int steps, int B, uint64_t seed) {
  Rng r(seed);
  std::vector<data::TokenBatch> batches;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<int32_t>> seqs(B);
    int64_t width = 0;
    for (int i = 0; i < B; ++i) {
      const int n = r.uniform_int(3, 15);
      for (int j = 0; j < n; ++j) seqs[i].push_back(r.uniform_int(1, 19));
      width = std::max<int64_t>(width, n);
    }
    data::TokenBatch b;
    b.B = B;
    b.S = width;
    b.src.assign(B * width, 0);
    b.tgt_out.assign(B * width, 0);
    for (int i = 0; i < B; ++i)
      for (size_t j = 0; j < seqs[i].size(); ++j) {
        b.src[i * width + j] = seqs[i][j];
        b.tgt_out[i * width + j] = seqs[i][seqs[i].size() - 1 - j];
      }
    batches.push_back(std::move(b));
  }
  return batches;
}

// An encoder for the reverse task (vocabulary 20, 4 heads, dropout 0, context 64) of the given size.
ModelConfig reverse_encoder(int64_t d_model, int64_t layers, int64_t dim_feedforward) {
  ModelConfig c;
  c.arch = Arch::ENCODER;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = d_model;
  c.nhead = 4;
  c.num_encoder_layers = layers;
  c.dim_feedforward = dim_feedforward;
  c.dropout = 0;
  c.max_len = 64;
  return c;
}

// The notebook's configuration with torch.nn's layers: arch encoder, 4 layers, d_model 16, 4 heads,
// FFN 512, Adam lr 5e-4, batch 128, on the reverse task, dropout 0, 30 steps.
TEST(Model, NotebookConfigTrainsLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  Generator g{2024, 0};
  Model m(reverse_encoder(16, 4, 512), g);
  expect_training_like_torch(m, reverse_batches(30, 128, 77), 5e-4f, "notebook encoder");
}

// A reverse-task encoder (d_model 64, 2 layers, FFN 256, ReLU) trained its first 50 Adam steps in bf16
// (tfm::Autocast) against PyTorch float64, the curve rule scaled by u_b/u (expect_training_like_torch).
TEST(Model, Bf16CurveTracksFloat64) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  Generator g{2024, 0};
  Model m(reverse_encoder(64, 2, 256), g);
  expect_training_like_torch(m, reverse_batches(50, 128, 78), 5e-4f, "reverse encoder in bf16", {}, Precision::BFLOAT16);
}

// Notebook 4's own layers (the acceptance check): as above with 4 heads of width 16 (inner
// width 64) and no attention biases, 50 steps against the functional PyTorch re-statement.
TEST(Model, Notebook4VariantTrainsLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  ModelConfig c = notebook4_encoder(4);
  c.dim_feedforward = 512;
  c.dropout = 0;
  c.max_len = 64;
  Generator g{2025, 0};
  Model m(c, g);
  expect_training_like_torch(m, reverse_batches(50, 128, 78), 5e-4f, "notebook 4 head_dim 16, no attention biases");
}

// Learned positions train (the tables' gradients accumulate over the batch) like PyTorch's
// nn.Embedding lookup broadcast over it.
TEST(Model, LearnedPositionsTrainLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  ModelConfig c = learned_encoder();
  c.dropout = 0;
  Generator g{31, 0};
  Model m(c, g);
  expect_training_like_torch(m, reverse_batches(15, 32, 79), 2e-3f, "encoder learned positions");
  ModelConfig s = learned_seq2seq();
  s.dropout = 0;
  Model ms(s, g);
  expect_training_like_torch(ms, random_batches(s, 15, 16, 600), 2e-3f, "seq2seq learned positions tied");
}

// RMSNorm with shared layers: the one layer's gradients add up over its L uses.
TEST(Model, RmsNormSharedLayersTrainLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  ModelConfig c = rms_shared_encoder();
  c.dropout = 0;
  Generator g{41, 0};
  Model m(c, g);
  expect_training_like_torch(m, reverse_batches(15, 32, 80), 2e-3f, "encoder rms_norm shared");
  ModelConfig s = rms_shared_seq2seq();
  s.dropout = 0;
  s.norm_bias = false;
  Model ms(s, g);
  expect_training_like_torch(ms, random_batches(s, 15, 16, 650), 2e-3f, "seq2seq rms_norm shared");
}

// Notebook 5's seq2seq: bias-free attention, pre-norm, scaled embeddings, both final norms.
TEST(Model, Notebook5VariantTrainsLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  ModelConfig c = notebook5_seq2seq();
  c.dropout = 0;
  Generator g{55, 0};
  Model m(c, g);
  expect_training_like_torch(m, random_batches(c, 15, 16, 700), 2e-3f, "notebook 5 seq2seq");
}

// The seq2seq architecture (decoder, cross-attention, causal and padding masks, tied embeddings,
// pre-norm) on random pairs: every gradient of the model feeds the curve.
TEST(Model, Seq2SeqTrainsLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  ModelConfig c = small_seq2seq(true, true, "gelu");
  c.dropout = 0;
  Generator g{99, 0};
  Model m(c, g);
  std::vector<data::TokenBatch> batches;
  for (int s = 0; s < 15; ++s) batches.push_back(random_batch(c, 16, 500 + s));
  expect_training_like_torch(m, batches, 2e-3f, "seq2seq pre-norm tied");
}

// ---- decoder-only language model ------------------------------------------------------------------
// Keys as the issue pins them: embedding, pos_embedding (learned), decoder.layers.N (an encoder
// layer's keys), decoder.norm, and generator.weight only untied, never a generator bias.
TEST(Model, DecoderStateDictKeys) {
  Generator g{1, 0};
  Model tied(small_decoder(), g);
  const NamedTensors st = tied.state_dict();
  for (const char* k : {"embedding.weight", "pos_embedding.weight", "decoder.layers.0.self_attn.in_proj_weight",
                        "decoder.layers.1.linear2.weight", "decoder.layers.1.norm2.bias", "decoder.norm.weight",
                        "decoder.norm.bias"})
    EXPECT_TRUE(st.contains(k)) << k;
  EXPECT_EQ(st.at("embedding.weight").shape(), (Shape{13, 16}));
  EXPECT_EQ(st.at("pos_embedding.weight").shape(), (Shape{24, 16}));
  EXPECT_FALSE(st.contains("generator.weight"));
  EXPECT_FALSE(st.contains("generator.bias"));
  // The architecture's defaults, made explicit in config().
  EXPECT_EQ(tied.config().norm_first, true);
  EXPECT_EQ(tied.config().activation, Activation::GELU);
  EXPECT_EQ(tied.config().positional, Positional::LEARNED);
  EXPECT_EQ(tied.config().tie_embeddings, true);
  EXPECT_EQ(tied.config().scale_embeddings, false);

  Model untied(untied_post_norm_decoder(), g);
  const NamedTensors su = untied.state_dict();
  EXPECT_EQ(su.at("generator.weight").shape(), (Shape{13, 16}));
  EXPECT_FALSE(su.contains("generator.bias"));
  EXPECT_FALSE(su.contains("pos_embedding.weight"));  // sinusoidal: a buffer
  EXPECT_TRUE(su.contains("decoder.norm.weight"));    // a final norm even post-norm
  EXPECT_EQ(untied.num_parameters(), tied.num_parameters() + 13 * 16 - 24 * 16);

  Model nano(nanogpt_decoder(), g);
  for (const auto& [k, t] : nano.state_dict()) EXPECT_EQ(k.find("bias"), std::string::npos) << k;
}

// GPT-2's initialisation: the sample standard deviation of every matrix is 0.02, that of the residual
// output projections 0.02/√(2·L), within 10% (≥ 384 draws each); biases are 0 and norm gains 1.
TEST(Model, DecoderGpt2Initialisation) {
  Generator g{7, 0};
  ModelConfig c = untied_post_norm_decoder();
  c.d_model = 32;
  c.dim_feedforward = 64;
  Model m(c, g);
  const double residual = 0.02 / std::sqrt(2.0 * 2);
  for (auto& [k, t] : m.named_parameters()) {
    const float* p = t.data();
    if (t.dim() >= 2) {
      double ss = 0, sum = 0;
      for (int64_t i = 0; i < t.numel(); ++i) ss += double(p[i]) * p[i], sum += p[i];
      const bool res = k.find("out_proj.weight") != std::string::npos || k.find("linear2.weight") != std::string::npos;
      const double expect = res ? residual : 0.02;
      EXPECT_NEAR(std::sqrt(ss / t.numel()), expect, 0.1 * expect) << k;
      EXPECT_LT(std::fabs(sum / t.numel()), 0.2 * expect) << k;
    } else {
      const bool gain = k.find("norm") != std::string::npos && k.find("weight") != std::string::npos;
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(p[i], gain ? 1.0f : 0.0f) << k;
    }
  }
}

// Causality: a position's logits do not depend on later tokens; the tied output projection and
// embedding share one tensor (and its gradient); a decoder model refuses to encode or translate.
TEST(Model, DecoderIsCausalAndTied) {
  Generator g{8, 0};
  Model m(small_decoder(), g);
  m.eval();
  data::TokenBatch a = random_lm_batch(m.config(), 1, 10, 3);
  data::TokenBatch b = a;
  for (int64_t t = 6; t < 10; ++t) b.src[t] = 3 + (b.src[t] - 3 + 1) % 10;
  const Tensor la = m.forward(a), lb = m.forward(b);  // (1, 10, V)
  EXPECT_EQ(la.shape(), (Shape{1, 10, 13}));
  const int64_t V = 13;
  for (int64_t i = 0; i < 6 * V; ++i) ASSERT_EQ(la.data()[i], lb.data()[i]) << i;
  EXPECT_GT(tfm::testing::rel_error(la, lb), 1e-4);
  EXPECT_THROW(m.encode(a.src, 1, 10), std::invalid_argument);
  data::TokenBatch longer = random_lm_batch(m.config(), 1, 25, 3);  // beyond max_len 24
  EXPECT_THROW(m.forward(longer), std::invalid_argument);

  m.train();
  ModelConfig c = small_decoder();
  c.dropout = 0;
  Model d(c, g);
  d.loss(random_lm_batch(c, 2, 8, 4)).backward();
  const Tensor w = d.state_dict().at("embedding.weight");
  ASSERT_TRUE(w.grad().defined());
  // Token 0 (pad) never occurs in the windows: its row's gradient comes from the output projection alone.
  double s = 0;
  for (int j = 0; j < 16; ++j) s += std::fabs(w.grad().data()[j]);
  EXPECT_GT(s, 0.0);
}

// Every gradient of the language model (tied and untied, torch.nn and functional twins) against
// PyTorch float64 on the same weights and batch: max|g − g64| / max|g64| within max(2e-5, 20 × PyTorch
// float32's own error) per parameter, the parity rule; the loss within 2e-5 relative.
TEST(Model, DecoderGradientsMatchTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  uint64_t seed = 300;
  for (ModelConfig c : {small_decoder(), untied_post_norm_decoder(), nanogpt_decoder(), rms_shared_decoder()}) {
    c.dropout = 0;
    Generator g{seed++, 0};
    Model m(c, g);
    m.train();
    const data::TokenBatch b = random_lm_batch(c, 3, 11, seed);
    const std::string dir = tfm::testing::temp_dir("grads");
    write_model_dir(dir, m);
    io::save_safetensors(dir + "/batches.safetensors", {{"src", ids_tensor(b.src, 1, b.B * b.S).reshape({1, b.B, b.S})},
                                                        {"tgt_out", ids_tensor(b.tgt_out, 1, b.B * b.S).reshape({1, b.B, b.S})}});
    std::string out;
    ASSERT_EQ(tfm::testing::run_command(kPython + " " + tool("torch_models.py") + " grads " + dir, &out), 0) << out;
    Tensor loss = m.loss(b);
    loss.backward();
    const io::SafeTensorsFile ref = io::load_safetensors(dir + "/torch_grads.safetensors");
    const json err32 = json::parse(ref.metadata.at("f32_err"));
    const double loss64 = std::stod(ref.metadata.at("loss"));
    EXPECT_NEAR(loss.item(), loss64, 2e-5 * loss64);
    const NamedTensors params = m.named_parameters();
    EXPECT_EQ(ref.tensors.size(), params.size());
    double worst = 0, worst_bound = 0;
    std::string worst_key;
    for (const auto& [k, p] : params) {
      ASSERT_TRUE(ref.contains(k)) << k;
      ASSERT_TRUE(p.grad().defined()) << k;
      const double bound = std::max(2e-5, 20 * err32.at(k).get<double>());
      const double e = tfm::testing::rel_error(p.grad(), ref.at(k));
      EXPECT_LE(e, bound) << k << " (seed " << seed << ")";
      if (e / bound > worst / std::max(worst_bound, 1e-30)) worst = e, worst_bound = bound, worst_key = k;
    }
    std::cout << "[ grads ] " << params.size() << " parameters; worst " << worst_key << ": rel err " << worst
              << ", bound " << worst_bound << "\n";
    fs::remove_all(dir);
  }
}

// The first 50 training steps of the language model, from the same weights and batches: Adam on the
// architecture's defaults, then nanoGPT's optimisation (AdamW, β2 0.99, weight decay 0.1 on the
// matrices only) on the bias-free model.
TEST(Model, DecoderTrainsLikeTorch) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  auto batches = [](const ModelConfig& c, uint64_t seed) {
    std::vector<data::TokenBatch> bs;
    for (int s = 0; s < 50; ++s) bs.push_back(random_lm_batch(c, 8, 16, seed + static_cast<uint64_t>(s)));
    return bs;
  };
  ModelConfig c = small_decoder();
  c.dropout = 0;
  Generator g{77, 0};
  Model m(c, g);
  expect_training_like_torch(m, batches(c, 900), 3e-3f, "decoder (pre-norm, gelu, learned, tied)");
  ModelConfig n = nanogpt_decoder();
  n.dropout = 0;
  Model mn(n, g);
  CurveOptim adamw;
  adamw.adamw = true;
  adamw.beta2 = 0.99f;
  adamw.weight_decay = 0.1f;
  adamw.matrices_only = true;
  expect_training_like_torch(mn, batches(n, 950), 3e-3f, "decoder nanoGPT: AdamW, beta2 0.99, decay on matrices", adamw);
}

}  // namespace
