// tests/models/generate_test.cc — tfm::generate on a tiny random decoder-only model (no training):
// cached against uncached decoding (tokens and logits), greedy cases, thread and num_samples
// independence of a seed's samples, the sliding window past block size, stop sequences, streaming
// and errors.
//
// Tolerance for cached vs uncached logits: both paths run the same ops on the same numbers; the
// cached step multiplies one row at a time (GEMM M = 1 vs M = T) and its attention reads t + 1 keys
// instead of T keys with the later ones masked, which changes only the order of float32 sums of at
// most max(D, F) = 32 terms. As in tests/models/decode_test.cc (same model scale, 2 layers) we allow
// 1e-5 of max|logit| (≈ 80 ε); the measured error is printed.
#include "tfm/models/generate.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "model_configs.h"
#include "test_util.h"
#include "tfm/autograd.h"

using namespace tfm;

namespace {

constexpr int64_t kV = 11, kBlock = 8;

// A 2-layer decoder LM with random weights; the embeddings are scaled up so that the logits spread
// over a few units (choices far from ties, samples still varied) and a position read from the wrong
// row of the table moves the logits far beyond the tolerance.
std::unique_ptr<Model> tiny_lm(uint64_t seed, int64_t block = kBlock) {
  ModelConfig c = tfm::testing::small_decoder();
  c.src_vocab_size = c.tgt_vocab_size = kV;
  c.dropout = 0.0f;
  c.max_len = block;
  Generator g{seed, 0};
  auto m = std::make_unique<Model>(c, g);
  for (const auto& [k, scale] : {std::pair{"embedding.weight", 8.0f}, std::pair{"pos_embedding.weight", 40.0f}}) {
    Tensor t = m->state_dict().at(k);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= scale;
  }
  return m;
}

struct Recorded {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;  // every step's, all samples in order
};
Recorded run(const Model& m, const std::vector<int32_t>& prompt, GenerateOptions o) {
  Recorded r;
  o.on_logits = [&](int64_t, const float* z, int64_t V) { r.logits.emplace_back(z, z + V); };
  r.tokens = generate(m, prompt, o);
  return r;
}

}  // namespace

// Cached decoding equals the uncached recomputation of every window: the same tokens (greedy and
// sampled), logits within float32 rounding, across several slides of the window (block 8,
// 30 new tokens), and for a prompt longer than the block.
TEST(Generate, CachedEqualsUncached) {
  const auto m_ptr = tiny_lm(1);
  const Model& m = *m_ptr;
  double worst = 0;
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{3, 5, 7}, std::vector<int32_t>{4, 4, 1, 9, 2, 3, 0, 6, 10, 5, 8, 7}}) {
    for (float temperature : {0.0f, 1.0f}) {
      GenerateOptions o;
      o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
      o.max_new_tokens = 30;
      o.sampling.temperature = temperature;
      o.seed = 9;
      const Recorded cached = run(m, prompt, o);
      o.use_cache = false;
      const Recorded full = run(m, prompt, o);
      ASSERT_EQ(cached.tokens, full.tokens) << "temperature " << temperature;
      ASSERT_EQ(cached.tokens[0].size(), 30u);
      ASSERT_EQ(cached.logits.size(), full.logits.size());
      for (size_t i = 0; i < full.logits.size(); ++i) {
        worst = std::max(worst, tfm::testing::rel_error(cached.logits[i].data(), full.logits[i].data(), kV));
        ASSERT_TRUE(tfm::testing::close_rel(cached.logits[i], full.logits[i], 1e-5, "step " + std::to_string(i)));
      }
    }
  }
  std::cout << "[ cache ] max rel error cached vs uncached logits " << worst << "\n";
}

// Greedy is the argmax of the full forward of the context while it fits in the block (a hand loop
// with Model::lm_logits); top-k 1 is greedy too, whatever the temperature.
TEST(Generate, GreedyAndTopKOne) {
  const auto m_ptr = tiny_lm(2);
  const Model& m = *m_ptr;
  const std::vector<int32_t> prompt = {6, 2};
  GenerateOptions o;
  o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
  o.max_new_tokens = 20;
  o.sampling.temperature = 0;
  const auto greedy = generate(m, prompt, o)[0];
  std::vector<int32_t> seq = prompt;
  {
    NoGradGuard ng;
    while (static_cast<int64_t>(seq.size()) <= kBlock) {
      const int64_t T = static_cast<int64_t>(seq.size());
      const Tensor z = m.lm_logits(seq, 1, T);  // (1, T, V)
      const float* last = z.data() + (T - 1) * kV;
      seq.push_back(static_cast<int32_t>(std::max_element(last, last + kV) - last));
    }
  }
  EXPECT_EQ(std::vector<int32_t>(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(seq.size() - prompt.size())),
            std::vector<int32_t>(seq.begin() + 2, seq.end()));
  o.sampling = {1.7f, 1, 0.8f};
  EXPECT_EQ(generate(m, prompt, o)[0], greedy);
  o.sampling = {1.0f, 0, 1.0f};
  EXPECT_NE(generate(m, prompt, o)[0], greedy);  // sampling 20 tokens does draw something else
}

// A seed fixes the samples: the same on 1 and 2 threads, and sample s the same whatever
// num_samples; samples differ from each other and across seeds.
TEST(Generate, SeedFixesSamplesAcrossThreads) {
  const auto m_ptr = tiny_lm(3);
  const Model& m = *m_ptr;
  GenerateOptions o;
  o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
  o.max_new_tokens = 24;
  o.num_samples = 3;
  o.seed = 5;
  o.sampling.top_p = 0.9f;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = generate(m, {1, 2, 3}, o);
  omp_set_num_threads(2);
  const auto two = generate(m, {1, 2, 3}, o);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_NE(one[0], one[1]);
  EXPECT_NE(one[1], one[2]);
  GenerateOptions single = o;
  single.num_samples = 1;
  EXPECT_EQ(generate(m, {1, 2, 3}, single)[0], one[0]);
  single.seed = 6;
  EXPECT_NE(generate(m, {1, 2, 3}, single)[0], one[0]);
}

// Past the block size the window slides: generation goes on (200 tokens with block 8 and block 1),
// and right after a slide the context is the last ⌈block/2⌉ tokens: the logits of the step after
// the first slide equal the full forward of those tokens.
TEST(Generate, SlidingWindow) {
  const auto m_ptr = tiny_lm(4);
  const Model& m = *m_ptr;
  GenerateOptions o;
  o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
  o.max_new_tokens = 200;
  o.sampling.temperature = 0;
  const Recorded r = run(m, {5}, o);
  ASSERT_EQ(r.tokens[0].size(), 200u);
  // prompt (1) + 7 tokens fill the block; token 8 (index 7) makes 9 > 8: the window becomes the last
  // 4 tokens of seq = prompt + tokens[0..7], and the 9th step's logits are theirs.
  std::vector<int32_t> seq = {5};
  seq.insert(seq.end(), r.tokens[0].begin(), r.tokens[0].begin() + 8);
  const std::vector<int32_t> window(seq.end() - 4, seq.end());
  NoGradGuard ng;
  const Tensor z = m.lm_logits(window, 1, 4);
  const std::vector<float> last(z.data() + 3 * kV, z.data() + 4 * kV);
  EXPECT_TRUE(tfm::testing::close_rel(r.logits[8], last, 1e-5));
  const auto one_ptr = tiny_lm(4, 1);
  const Model& one = *one_ptr;  // block 1: every step refills from the newest token alone
  GenerateOptions o1 = o;
  o1.max_new_tokens = 50;
  const auto cached = generate(one, {5}, o1);
  o1.use_cache = false;
  EXPECT_EQ(generate(one, {5}, o1), cached);
  EXPECT_EQ(cached[0].size(), 50u);
}

TEST(Generate, StopSequenceAndStreaming) {
  const auto m_ptr = tiny_lm(5);
  const Model& m = *m_ptr;
  GenerateOptions o;
  o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
  o.max_new_tokens = 40;
  o.seed = 2;
  const auto full = generate(m, {7}, o)[0];
  // stop_after ends a sample right after the token it accepts: here the first time tokens 5 and 6 of
  // the run follow each other.
  const int32_t a = full[5], b = full[6];
  o.stop_after = [a, b](int64_t, const std::vector<int32_t>& g) {
    return g.size() >= 2 && g[g.size() - 2] == a && g.back() == b;
  };
  size_t end = 2;
  while (!(full[end - 2] == a && full[end - 1] == b)) ++end;
  std::vector<std::pair<int64_t, int32_t>> streamed;
  o.num_samples = 2;
  const auto out = generate(m, {7}, o, [&](int64_t s, int32_t t) { streamed.emplace_back(s, t); });
  EXPECT_EQ(out[0], std::vector<int32_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(end)));
  std::vector<std::pair<int64_t, int32_t>> want;
  for (int64_t s = 0; s < 2; ++s)
    for (int32_t t : out[static_cast<size_t>(s)]) want.emplace_back(s, t);
  EXPECT_EQ(streamed, want);
  o.max_new_tokens = 0;
  EXPECT_EQ(generate(m, {7}, o), (std::vector<std::vector<int32_t>>{{}, {}}));
}

TEST(Generate, Errors) {
  const auto m_ptr = tiny_lm(6);
  const Model& m = *m_ptr;
  const auto fails = [&](const std::vector<int32_t>& prompt, const GenerateOptions& o, const std::string& what) {
    try {
      generate(m, prompt, o);
      ADD_FAILURE() << "no throw: " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  GenerateOptions o;
  o.ignore_eos = true;  // the tiny models' eos_id 2 is an ordinary token of their random text
  fails({}, o, "prompt is empty");
  fails({3, 11}, o, "prompt id 11 at position 1 is outside the vocabulary [0, 11)");
  fails({3, -1}, o, "prompt id -1");
  o.num_samples = 0;
  fails({3}, o, "num_samples");
  // Beyond kMaxSamples: refused before anything is sized by the count (10^15 samples would otherwise
  // ask for petabytes at once); the bound itself is accepted by the check.
  o.num_samples = 1'000'000'000'000'000;
  fails({3}, o, "num_samples must be at most 1048576, got 1000000000000000");
  EXPECT_THROW(check_generate_options(o), std::invalid_argument);
  o.num_samples = kMaxSamples;
  EXPECT_NO_THROW(check_generate_options(o));
  o = {};
  o.max_new_tokens = -1;
  fails({3}, o, "max_new_tokens");
  o = {};
  o.sampling.top_p = 2;
  fails({3}, o, "top_p");
  ModelConfig c;
  c.arch = Arch::SEQ2SEQ;
  c.src_vocab_size = c.tgt_vocab_size = 5;
  c.d_model = 8;
  c.nhead = 2;
  c.num_encoder_layers = c.num_decoder_layers = 1;
  c.dim_feedforward = 8;
  Generator g;
  const Model s2s(c, g);
  EXPECT_THROW(generate(s2s, {3}), std::invalid_argument);
}
