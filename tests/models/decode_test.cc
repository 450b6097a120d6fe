// tests/models/decode_test.cc — greedy and beam search, with and without the key/value cache.
//
// Models are random (untrained) but fixed by seed, which makes the decoders' choices non-trivial:
// nothing is peaked, so a wrong position, mask or cache row shows up as a different token.
//
// Tolerance for cached vs full logits: both paths run the same ops on the same numbers; what can
// differ is the GEMM's blocking (M = N rows per step vs N·T rows) and the attention's key tiling
// (S = t+1 keys vs S = T with masked keys, which add exact zeros). Either changes only the order of
// a float32 sum of at most max(D, F) = 40 products, each |term| ≤ the row's magnitude, so the
// difference is ≤ ~40·ε relative per op before LayerNorm re-normalises; across ~10 ops per layer ×
// 2 layers we allow 1e-5 relative to max|logit| (≈ 80 ε). Measured: ≤ 8e-7 (printed by the test).
#include "tfm/models/decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include <omp.h>

#include "model_configs.h"
#include "models/decode_internal.h"
#include "test_util.h"
#include "tfm/autograd.h"

using namespace tfm;

namespace {

// The shared small seq2seq (model_configs.h) over the vocabularies these tests decode: 12 source and
// 9 target tokens, max_len 40 (LimitsAndErrors crosses both).
ModelConfig config(bool norm_first, const std::string& act = "relu", bool tie = false) {
  ModelConfig c = tfm::testing::small_seq2seq(norm_first, tie, act);
  c.src_vocab_size = 12;
  c.tgt_vocab_size = 9;
  c.max_len = 40;
  return c;
}

std::vector<std::vector<int32_t>> sources(int n, uint64_t seed, int max_len = 9, int32_t vocab = 12) {
  tfm::testing::Rng r(seed);
  std::vector<std::vector<int32_t>> s(n);
  for (auto& x : s) {
    const int len = r.uniform_int(1, max_len);
    for (int j = 0; j < len; ++j) x.push_back(r.uniform_int(3, vocab - 1));
  }
  return s;
}

// Teacher-forced log p(target + eos | source) with the full model (the training forward).
double sequence_logprob(const Model& m, const std::vector<int32_t>& src, const std::vector<int32_t>& tgt,
                        bool with_eos) {
  const ModelConfig& c = m.config();
  data::TokenBatch b;
  b.B = 1;
  b.S = std::max<int64_t>(1, static_cast<int64_t>(src.size()));
  b.src = src;
  if (b.src.empty()) b.src.push_back(c.pad_id);
  b.T = static_cast<int64_t>(tgt.size()) + 1;
  b.tgt_in.push_back(c.bos_id);
  b.tgt_in.insert(b.tgt_in.end(), tgt.begin(), tgt.end());
  NoGradGuard ng;
  const Tensor logits = m.forward(b);  // (1, T, V)
  const int64_t V = c.tgt_vocab_size;
  double total = 0;
  const int64_t n = with_eos ? b.T : b.T - 1;
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits.data() + t * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v)
      if (v != c.pad_id && v != c.bos_id) mx = std::max(mx, double(z[v]));
    for (int64_t v = 0; v < V; ++v)
      if (v != c.pad_id && v != c.bos_id) sum += std::exp(double(z[v]) - mx);
    const int32_t y = t < static_cast<int64_t>(tgt.size()) ? tgt[t] : c.eos_id;
    total += double(z[y]) - mx - std::log(sum);
  }
  return total;
}

// Step both decoders with the same tokens (the cached decoder's greedy choices, and a beam-like row
// reordering halfway) and compare the logits of every step.
// Case 2 has the layer variants (head widths, no attention biases, RMSNorm, shared layers) and learned positions, whose table is scaled up so that a step
// reading the wrong row (not its offset) would move the logits far beyond the tolerance.
TEST(Decode, CachedStepMatchesFullDecoder) {
  for (int variant : {0, 1, 2}) {
    const bool norm_first = variant == 1;
    Generator g{static_cast<uint64_t>(10 + variant), 0};
    ModelConfig c = config(norm_first, norm_first ? "gelu" : "relu", norm_first);
    if (variant == 2) {
      c.positional = Positional::LEARNED;
      c.attention.head_dim = 12;
      c.attention.v_head_dim = 8;
      c.attention.qkv_bias = false;
      c.attention.out_bias = false;
      c.norm_type = NormType::RMS_NORM;
      c.share_layers = true;  // the cache still has one entry per application of the layer
    }
    Model m(c, g);
    if (variant == 2)
      for (const char* k : {"src_pos_embedding.weight", "tgt_pos_embedding.weight"}) {
        Tensor t = m.state_dict().at(k);
        for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= 50.0f;
      }
    m.eval();
    NoGradGuard ng;
    const auto src = sources(5, 3);
    const detail::EncodedSources enc = detail::encode_sources(m, src);
    std::vector<int64_t> rows = {0, 1, 1, 2, 3, 4, 4};  // several rows may decode one source
    auto cached = detail::make_cached_decoder(m, enc, rows, 2);  // capacity 2: exercises growth
    auto full = detail::make_full_decoder(m, enc, rows);
    std::vector<int32_t> tokens(rows.size(), m.config().bos_id);
    double worst = 0;
    for (int t = 0; t < 12; ++t) {
      const Tensor a = cached->step(tokens), b = full->step(tokens);
      ASSERT_EQ(a.shape(), b.shape());
      const double err = tfm::testing::rel_error(a, b);
      worst = std::max(worst, err);
      ASSERT_TRUE(tfm::testing::close_rel(a, b, 1e-5, "step " + std::to_string(t)));
      const int64_t V = a.size(1);
      for (size_t n = 0; n < tokens.size(); ++n) {  // greedy choice among real tokens
        int32_t best = 3;
        for (int32_t v = 3; v < V; ++v)
          if (a.data()[n * V + v] > a.data()[n * V + best]) best = v;
        tokens[n] = best;
      }
      if (t == 5) {  // reorder / duplicate / drop rows as beam search does
        const std::vector<int64_t> sel = {6, 0, 0, 3, 2};
        cached->select_rows(sel);
        full->select_rows(sel);
        std::vector<int32_t> nt;
        for (int64_t r : sel) nt.push_back(tokens[r]);
        tokens = nt;
        EXPECT_EQ(cached->row_source(), (std::vector<int64_t>{4, 0, 0, 2, 1}));
      }
    }
    std::cout << "[ cache ] case " << variant << ": max rel error cached vs full " << worst << "\n";
  }
}

TEST(Decode, CacheAndNoCacheGiveSameTokens) {
  for (bool norm_first : {false, true}) {
    Generator g{static_cast<uint64_t>(20 + norm_first), 0};
    Model m(config(norm_first), g);
    const auto src = sources(9, 5);
    for (int beam : {1, 3}) {
      DecodeOptions o;
      o.beam = beam;
      o.max_len = 14;
      const auto with = decode_hypotheses(m, src, o);
      o.use_cache = false;
      const auto without = decode_hypotheses(m, src, o);
      for (size_t i = 0; i < src.size(); ++i) {
        EXPECT_EQ(with[i].tokens, without[i].tokens) << "beam " << beam << " source " << i;
        EXPECT_NEAR(with[i].score, without[i].score, 1e-4 * std::fabs(without[i].score) + 1e-6);
      }
    }
  }
}

// Greedy by hand with the training forward on the growing prefix: argmax over tokens other than
// pad/bos, stop at eos or the length limit. decode(beam = 1) must produce exactly that.
// Greedy decoding by hand with the full model: the argmax over every token but pad (and bos, unless it
// is eos: a start token never generated), up to max_len tokens; *eos says whether it ended at eos.
// Greedy by hand: at most max_len tokens; at the limit one more step says whether the model ends there (*eos),
// where the position table has room for it.
std::vector<int32_t> hand_greedy(const Model& m, const std::vector<int32_t>& src, int64_t max_len, bool* eos) {
  const ModelConfig& c = m.config();
  std::vector<int32_t> out;
  *eos = false;
  while (static_cast<int64_t>(out.size()) < max_len ||
         (static_cast<int64_t>(out.size()) == max_len && max_len < c.max_len)) {
    data::TokenBatch b;
    b.B = 1;
    b.S = static_cast<int64_t>(src.size());
    b.src = src;
    b.T = static_cast<int64_t>(out.size()) + 1;
    b.tgt_in = {c.bos_id};
    b.tgt_in.insert(b.tgt_in.end(), out.begin(), out.end());
    NoGradGuard ng;
    const Tensor z = m.forward(b);
    const float* last = z.data() + (b.T - 1) * c.tgt_vocab_size;
    int32_t best = -1;
    for (int32_t v = 0; v < c.tgt_vocab_size; ++v)
      if (v != c.pad_id && (v != c.bos_id || c.bos_id == c.eos_id) && (best < 0 || last[v] > last[best])) best = v;
    if ((*eos = best == c.eos_id) || static_cast<int64_t>(out.size()) == max_len) break;
    out.push_back(best);
  }
  return out;
}

TEST(Decode, GreedyEqualsBeamOneAndHandGreedy) {
  Generator g{30, 0};
  Model m(config(false), g);
  m.eval();
  const auto src = sources(6, 8);
  DecodeOptions o;
  o.max_len = 10;
  const auto beam1 = decode(m, src, o);
  for (size_t i = 0; i < src.size(); ++i) {
    bool eos = false;
    EXPECT_EQ(beam1[i], hand_greedy(m, src[i], o.max_len, &eos)) << "source " << i;
  }
  // The default options are greedy too.
  DecodeOptions d;
  d.max_len = 10;
  d.beam = 1;
  EXPECT_EQ(decode(m, src, d), beam1);
}

// A start token that is the end token too (BART's </s>): generating it ends the hypothesis, in greedy,
// beam and sampled decoding (only a start token of its own is never generated).
TEST(Decode, AStartTokenThatIsTheEndTokenEndsAHypothesis) {
  ModelConfig cfg = config(false);
  cfg.bos_id = cfg.eos_id;
  Generator g{31, 0};
  Model m(cfg, g);
  m.eval();
  const auto src = sources(24, 9);
  DecodeOptions o;
  o.max_len = 10;
  const auto greedy = decode_hypotheses(m, src, o);
  int ended = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    bool eos = false;  // by hand: only pad is never chosen
    EXPECT_EQ(greedy[i].tokens, hand_greedy(m, src[i], o.max_len, &eos)) << "source " << i;
    EXPECT_EQ(greedy[i].truncated, !eos) << "source " << i;
    ended += eos;
  }
  EXPECT_GT(ended, 0);       // the premise: some sources end at the start-and-end token
  DecodeOptions argmax = o;  // a sampled argmax draw is greedy
  argmax.sample = true;
  argmax.sampling = SamplingOptions{0.0f, 0, 1.0f};
  const auto drawn = decode_hypotheses(m, src, argmax);
  DecodeOptions wide = o;
  wide.beam = 3;
  int beam_ended = 0;
  for (const Hypothesis& h : decode_hypotheses(m, src, wide)) beam_ended += !h.truncated;
  EXPECT_GT(beam_ended, 0);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(drawn[i].tokens, greedy[i].tokens) << "source " << i;
}

// Beam search is not guaranteed to beat greedy: greedy's prefix can fall out of the beam (on these
// random models, 1 source in 240 at K = 4, both running to the length limit). So: over 240 sources,
// beam 4 is at least as good as greedy on all but ≤ 2% and strictly better on many; the scores it
// reports are the model's own teacher-forced log-probabilities of the tokens and an eos — chosen, or
// charged at the limit (up to float32 logits: 1e-4 absolute on sums of ≤ 13 log-probabilities of magnitude
// ≤ ~5); a hypothesis shorter than the limit ended by its own eos. BeamIsExhaustiveWhenWide checks optimality
// exactly where it is guaranteed.
TEST(Decode, BeamBeatsGreedyAndScoresAreTrue) {
  int better = 0, worse = 0, total = 0;
  for (uint64_t seed = 40; seed < 50; ++seed) {
    Generator g{seed, 0};
    ModelConfig c = config(seed % 2 == 1);
    c.tgt_vocab_size = 6;  // few tokens, long hypotheses: room for beam search to differ
    Model m(c, g);
    m.eval();  // for sequence_logprob; decode switches to eval itself
    const auto src = sources(12, seed);
    for (float penalty : {0.0f, 1.0f}) {
      DecodeOptions o;
      o.max_len = 12;
      o.length_penalty = penalty;
      const auto greedy = decode_hypotheses(m, src, o);
      o.beam = 4;
      const auto beam = decode_hypotheses(m, src, o);
      for (size_t i = 0; i < src.size(); ++i) {
        ++total;
        if (beam[i].score > greedy[i].score + 1e-5f) ++better;
        if (beam[i].score < greedy[i].score - 1e-5f) ++worse;
        if (seed < 43) {  // the scores are true (a subset keeps the test fast)
          for (const auto* h : {&greedy[i], &beam[i]}) {
            if (h->tokens.size() < static_cast<size_t>(o.max_len)) {
              EXPECT_FALSE(h->truncated) << "seed " << seed << " source " << i;
            }
            const double lp = sequence_logprob(m, src[i], h->tokens, true);  // max_len 12 < the table's 40
            EXPECT_NEAR(h->logprob, lp, 1e-4) << "seed " << seed << " source " << i;
            EXPECT_NEAR(h->score, lp / std::pow(static_cast<double>(h->tokens.size() + 1), penalty), 1e-4);
          }
          bool eos = false;  // greedy's truncation is its own choice at the limit
          EXPECT_EQ(greedy[i].tokens, hand_greedy(m, src[i], o.max_len, &eos)) << seed << " " << i;
          EXPECT_EQ(greedy[i].truncated, !eos) << "seed " << seed << " source " << i;
        }
      }
    }
  }
  std::cout << "[ beam ] beam 4 vs greedy over " << total << " sources: better " << better << ", worse " << worse
            << "\n";
  EXPECT_LE(worse * 50, total);
  EXPECT_GE(better * 4, total);
}

// With 2 real tokens, max_len 3 and K = 16, no candidate is ever pruned (≤ 4 live prefixes × 3
// continuations per step), so beam search is exhaustive and must return the best of all 1 + 2 + 4
// eos-terminated sequences and the 8 cut at the limit (charged for their eos), scored by brute force with
// the training forward — and greedy can only be worse or equal.
TEST(Decode, BeamIsExhaustiveWhenWide) {
  for (uint64_t seed : {80, 81, 82, 83}) {
    Generator g{seed, 0};
    ModelConfig c = config(seed % 2 == 0);
    c.tgt_vocab_size = 5;  // pad, bos, eos, 3, 4
    Model m(c, g);
    m.eval();
    const auto src = sources(3, seed);
    for (float penalty : {0.0f, 0.6f, 1.0f}) {
      DecodeOptions o;
      o.max_len = 3;
      o.length_penalty = penalty;
      const auto greedy = decode_hypotheses(m, src, o);
      o.beam = 16;
      const auto beam = decode_hypotheses(m, src, o);
      for (size_t i = 0; i < src.size(); ++i) {
        double best = -INFINITY;
        std::vector<int32_t> best_seq;
        for (int len = 0; len <= 3; ++len)
          for (int bits = 0; bits < (1 << len); ++bits) {
            std::vector<int32_t> seq;
            for (int j = 0; j < len; ++j) seq.push_back(3 + ((bits >> j) & 1));
            const double lp = sequence_logprob(m, src[i], seq, true);
            const double score = lp / std::pow(static_cast<double>(len + 1), penalty);
            if (score > best) {
              best = score;
              best_seq = seq;
            }
          }
        EXPECT_NEAR(beam[i].score, best, 1e-4) << "seed " << seed << " source " << i << " penalty " << penalty;
        EXPECT_EQ(beam[i].tokens, best_seq) << "seed " << seed << " source " << i << " penalty " << penalty;
        EXPECT_LE(greedy[i].score, best + 1e-4);
      }
    }
  }
}

TEST(Decode, EncoderArchIsArgmaxPerPosition) {
  const ModelConfig c = tfm::testing::tiny_encoder(2);
  Generator g{50, 0};
  Model m(c, g);
  const auto src = sources(5, 9, 9, 20);
  const auto out = decode(m, src);
  EXPECT_TRUE(m.is_training());  // decode restored the mode it switched off
  m.eval();
  for (size_t i = 0; i < src.size(); ++i) {
    data::TokenBatch b;
    b.B = 1;
    b.S = static_cast<int64_t>(src[i].size());
    b.src = src[i];
    NoGradGuard ng;
    const Tensor z = m.forward(b);
    ASSERT_EQ(out[i].size(), src[i].size());
    for (int64_t t = 0; t < b.S; ++t) {
      const float* row = z.data() + t * 20;
      EXPECT_EQ(out[i][t], std::max_element(row, row + 20) - row);
    }
  }
}

TEST(Decode, LimitsAndErrors) {
  Generator g{60, 0};
  Model m(config(false), g);
  const auto src = sources(4, 2);
  DecodeOptions o;
  o.max_len = 3;
  for (int beam : {1, 2}) {
    o.beam = beam;
    for (const auto& t : decode(m, src, o)) EXPECT_LE(t.size(), 3u);
  }
  o.max_len = 0;  // default: 2·|source| + 10, capped by config.max_len = 40
  for (const auto& t : decode(m, {std::vector<int32_t>(30, 5)}, o)) EXPECT_LE(t.size(), 40u);
  EXPECT_TRUE(decode(m, {}, o).empty());
  EXPECT_EQ(decode(m, {{}}, o).size(), 1u);  // an empty source decodes (memory all masked)
  DecodeOptions bad;
  bad.beam = 0;
  EXPECT_THROW(decode(m, src, bad), std::invalid_argument);
  EXPECT_THROW(decode(m, {{3, 0, 4}}), std::invalid_argument);                    // pad inside a source
  EXPECT_THROW(decode(m, {std::vector<int32_t>(41, 3)}), std::invalid_argument);  // longer than max_len
  EXPECT_THROW(decode(m, {{3, 12}}), std::invalid_argument);                      // outside the vocabulary
  // An explicit limit beyond the position table is refused, naming both (the default rule is capped).
  DecodeOptions far;
  far.max_len = 41;
  try {
    decode(m, src, far);
    ADD_FAILURE() << "max_len 41 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "decode: max_len 41 exceeds the model's max_len 40 (the length of its position table)");
  }
  far.max_len = 40;
  EXPECT_NO_THROW(decode(m, src, far));
}

// The checks that need no model (check_decode_options): the message names the field and the value, and
// decode itself refuses the same options with the same message.
TEST(DecodeOptionsCheck, NamesTheFieldAndTheValue) {
  const auto message = [](const DecodeOptions& o) -> std::string {
    try {
      check_decode_options(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  DecodeOptions o;
  EXPECT_EQ(message(o), "");
  o.beam = kMaxBeam;
  EXPECT_EQ(message(o), "");
  o.beam = 0;
  EXPECT_EQ(message(o), "beam must be ≥ 1, got 0");
  o.beam = kMaxBeam + 1;
  EXPECT_EQ(message(o), "beam must be at most " + std::to_string(kMaxBeam) + ", got " + std::to_string(kMaxBeam + 1));
  o = {};
  o.max_len = -1;
  EXPECT_EQ(message(o), "max_len must be ≥ 0 (0: the default limit), got -1");
  o = {};
  o.length_penalty = -0.5f;
  EXPECT_EQ(message(o).rfind("length_penalty must be ≥ 0, got -0.5", 0), 0u) << message(o);
  o.length_penalty = std::nanf("");
  EXPECT_NE(message(o), "");
  o = {};
  o.sample = true;
  o.beam = 2;
  EXPECT_EQ(message(o), "sample needs beam 1 (a draw replaces the search), got beam 2");
  o.beam = 1;
  EXPECT_EQ(message(o), "");
  o.sampling.top_p = 0;
  EXPECT_NE(message(o).find("top_p"), std::string::npos) << message(o);
  o.sample = false;  // the sampling options are not read without sample
  EXPECT_EQ(message(o), "");
}

// Hypothesis::truncated marks exactly the predictions the length limit stopped: with a random model
// and a limit of 3 some stop there (3 tokens, no eos), greedy and beam. Greedy with the limit raised:
// the cut ones go on from the same tokens, and those that ended at eos are the same and not marked.
TEST(Decode, TruncatedMarksPredictionsStoppedByTheLimit) {
  Generator g{61, 0};
  Model m(config(false), g);
  const auto src = sources(24, 5);
  for (int beam : {1, 3}) {
    DecodeOptions o;
    o.beam = beam;
    o.max_len = 3;
    const auto cut = decode_hypotheses(m, src, o);
    o.max_len = 40;
    const auto longer = decode_hypotheses(m, src, o);
    int truncated = 0, went_on = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      // Ended at eos: at most 2 tokens (the eos would be the 3rd); cut by the limit: 3 tokens.
      EXPECT_EQ(cut[i].truncated, cut[i].tokens.size() == 3) << "source " << i;
      if (!cut[i].truncated) {
        EXPECT_LT(cut[i].tokens.size(), 3u);
        if (beam == 1) {
          EXPECT_EQ(longer[i].tokens, cut[i].tokens) << "source " << i;
        }
        continue;
      }
      ++truncated;
      if (beam == 1) {  // (a wider beam may prefer another hypothesis once longer ones compete)
        ASSERT_GE(longer[i].tokens.size(), 3u) << "source " << i;
        EXPECT_TRUE(std::equal(cut[i].tokens.begin(), cut[i].tokens.end(), longer[i].tokens.begin())) << i;
        went_on += longer[i].tokens.size() > 3;
        EXPECT_EQ(longer[i].truncated, longer[i].tokens.size() == 40u) << "source " << i;
      }
    }
    EXPECT_GT(truncated, 0) << "beam " << beam;
    if (beam == 1) {
      EXPECT_GT(went_on, 0);
    }
  }
  // An encoder's prediction has one token per position: never truncated.
  ModelConfig ec;
  ec.arch = Arch::ENCODER;
  ec.src_vocab_size = ec.tgt_vocab_size = 12;
  ec.d_model = 16;
  ec.nhead = 2;
  ec.num_encoder_layers = 1;
  ec.dim_feedforward = 32;
  Model enc(ec, g);
  for (const auto& h : decode_hypotheses(enc, src)) EXPECT_FALSE(h.truncated);
}

// Decoding does not depend on which other sources share the batch (beyond float rounding, which
// does not flip these random models' choices).
TEST(Decode, BatchIndependent) {
  Generator g{70, 0};
  Model m(config(true), g);
  const auto src = sources(7, 4);
  DecodeOptions o;
  o.beam = 2;
  o.max_len = 10;
  const auto together = decode(m, src, o);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(decode(m, {src[i]}, o)[0], together[i]) << i;
}

// ---- sampled decoding ----------------------------------------------------------------------------

// Sampling with an argmax draw (temperature 0, top-k 1) is greedy search: same tokens, same
// log-probabilities and scores, bit for bit (both sum the same doubles in the same order).
TEST(Decode, SamplingArgmaxIsGreedy) {
  Generator g{80, 0};
  Model m(config(true, "gelu"), g);
  const auto src = sources(9, 5);
  for (bool cache : {true, false}) {
    DecodeOptions greedy;
    greedy.use_cache = cache;
    const auto want = decode_hypotheses(m, src, greedy);
    for (SamplingOptions so : {SamplingOptions{0.0f, 0, 1.0f}, SamplingOptions{2.0f, 1, 0.5f}}) {
      DecodeOptions o = greedy;
      o.sample = true;
      o.sampling = so;
      const auto got = decode_hypotheses(m, src, o);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < src.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
        EXPECT_EQ(got[i].logprob, want[i].logprob) << i;
        EXPECT_EQ(got[i].score, want[i].score) << i;
      }
    }
  }
  // The encoder arch: a draw per position, argmax when the options say so.
  ModelConfig c;
  c.arch = Arch::ENCODER;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.nhead = 2;
  c.num_encoder_layers = 1;
  c.dim_feedforward = 32;
  Model e(c, g);
  const auto esrc = sources(5, 9, 9, 20);
  DecodeOptions o;
  o.sample = true;
  o.sampling.temperature = 0;
  EXPECT_EQ(decode(e, esrc, o), decode(e, esrc));
  o.sampling.temperature = 1;
  const auto drawn = decode(e, esrc, o);
  EXPECT_NE(drawn, decode(e, esrc));  // 40-odd draws from flat random-model distributions
  for (size_t i = 0; i < esrc.size(); ++i) EXPECT_EQ(drawn[i].size(), esrc[i].size());
  // Hot draws (temperature 50: all but uniform over the 20 tokens, 900 of them) never pick the suppressed ids,
  // one per position; greedy then takes the best of the rest.
  o.sampling.temperature = 50;
  o.suppress = {c.pad_id, c.bos_id, c.eos_id};  // as predict() passes the vocabulary's marks
  for (uint64_t seed = 0; seed < 20; ++seed) {
    o.seed = seed;
    for (const auto& h : decode_hypotheses(e, esrc, o))
      for (int32_t t : h.tokens) EXPECT_TRUE(t != c.pad_id && t != c.bos_id && t != c.eos_id) << t;
  }
}

// The sampled decode against a hand loop: the full (teacher-forced) model's last-position logits,
// pad and bos masked, drawn with sample_token from source i's stream (seed, i·2³²). Tokens must be
// identical (the cached and full logits differ by float rounding only, far below the gaps between
// cumulative probabilities and the uniforms of these few draws), and the reported log-probability is
// the true one.
TEST(Decode, SamplingMatchesHandLoop) {
  Generator g{81, 0};
  Model m(config(false), g);
  m.eval();
  const auto src = sources(6, 7);
  DecodeOptions o;
  o.sample = true;
  o.sampling = {1.5f, 6, 0.95f};
  o.seed = 11;
  o.max_len = 12;
  const auto got = decode_hypotheses(m, src, o);
  const ModelConfig& c = m.config();
  const int64_t V = c.tgt_vocab_size;
  NoGradGuard ng;
  int64_t drawn = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    Generator gi{11, static_cast<uint64_t>(i) << 32};
    std::vector<int32_t> prefix;
    bool eos = false;
    while (true) {  // at most max_len tokens, then one draw that ends the sample or leaves it truncated
      data::TokenBatch b;
      b.B = 1;
      b.S = static_cast<int64_t>(src[i].size());
      b.src = src[i];
      b.T = static_cast<int64_t>(prefix.size()) + 1;
      b.tgt_in.push_back(c.bos_id);
      b.tgt_in.insert(b.tgt_in.end(), prefix.begin(), prefix.end());
      const Tensor z = m.forward(b);  // (1, T, V)
      std::vector<float> row(z.data() + (b.T - 1) * V, z.data() + b.T * V);
      row[c.pad_id] = row[c.bos_id] = -INFINITY;
      const int32_t v = sample_token(row.data(), V, o.sampling, gi);
      ++drawn;
      if ((eos = v == c.eos_id) || static_cast<int64_t>(prefix.size()) == o.max_len) break;
      prefix.push_back(v);
    }
    EXPECT_EQ(got[i].tokens, prefix) << "source " << i;
    EXPECT_EQ(got[i].truncated, !eos) << "source " << i;
    // the eos's log-probability, drawn or charged at the limit (max_len 12 < the table's 40)
    EXPECT_NEAR(got[i].logprob, sequence_logprob(m, src[i], prefix, true), 1e-4) << "source " << i;
  }
  EXPECT_GT(drawn, 20);
}

// Source i's sample depends on the seed and its stream only: not on the batch, the cache, the
// thread count; sample_streams moves a source to another stream.
TEST(Decode, SamplingIsBatchCacheAndThreadIndependent) {
  Generator g{82, 0};
  Model m(config(true), g);
  const auto src = sources(7, 8);
  DecodeOptions o;
  o.sample = true;
  o.sampling.temperature = 1.2f;
  o.seed = 3;
  o.max_len = 10;
  const auto together = decode(m, src, o);
  for (size_t i = 0; i < src.size(); ++i) {
    DecodeOptions one = o;
    one.sample_streams = {i};
    EXPECT_EQ(decode(m, {src[i]}, one)[0], together[i]) << i;
  }
  DecodeOptions full = o;
  full.use_cache = false;
  EXPECT_EQ(decode(m, src, full), together);
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    EXPECT_EQ(decode(m, src, o), together) << t << " threads";
  }
  omp_set_num_threads(threads);
  DecodeOptions other = o;
  other.seed = 4;
  EXPECT_NE(decode(m, src, other), together);
  // Reversed input with reversed streams: the same samples, reversed.
  DecodeOptions rev = o;
  std::vector<std::vector<int32_t>> rsrc(src.rbegin(), src.rend());
  for (size_t i = 0; i < src.size(); ++i) rev.sample_streams.push_back(src.size() - 1 - i);
  const auto r = decode(m, rsrc, rev);
  EXPECT_EQ(std::vector<std::vector<int32_t>>(r.rbegin(), r.rend()), together);
}

TEST(Decode, SamplingErrors) {
  Generator g{83, 0};
  Model m(config(false), g);
  const auto src = sources(2, 2);
  DecodeOptions o;
  o.sample = true;
  o.beam = 2;
  EXPECT_THROW(decode(m, src, o), std::invalid_argument);
  o.beam = 1;
  o.sampling.top_p = 0;
  EXPECT_THROW(decode(m, src, o), std::invalid_argument);
  o.sampling.top_p = 1;
  o.sample_streams = {1};  // two sources
  EXPECT_THROW(decode(m, src, o), std::invalid_argument);
}

}  // namespace

namespace {

// ---- language model (arch decoder): lm_logits with the cache --------------------------------------
// Feeding a window one position at a time through make_lm_cache gives, at every position, the
// logits of the full causal forward of the window (same tolerance and reasoning as above); a
// prompt prefilled as T > 1 positions in one call gives the same; a cache continues after it; and
// a wrong offset is refused. Variants: the architecture's defaults (learned table scaled up so a
// step reading the wrong row shows), post-norm untied sinusoidal, and RMSNorm with shared layers
// and no biases; capacity 2 exercises the buffers' growth.
TEST(Decode, LmCachedStepsMatchFullCausalForward) {
  for (int variant : {0, 1, 2}) {
    ModelConfig c = tfm::testing::small_decoder();
    if (variant == 1) {
      c.norm_first = false;
      c.activation = Activation::RELU;
      c.positional = Positional::SINUSOIDAL;
      c.tie_embeddings = false;
    } else if (variant == 2) {
      c.norm_type = NormType::RMS_NORM;
      c.share_layers = true;
      c.bias = false;
    }
    Generator g{static_cast<uint64_t>(40 + variant), 0};
    Model m(c, g);
    if (variant == 0) {
      Tensor t = m.state_dict().at("pos_embedding.weight");
      for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= 50.0f;
    }
    m.eval();
    NoGradGuard ng;
    const int64_t B = 3, T = 20, V = c.tgt_vocab_size;
    const data::TokenBatch w = tfm::testing::random_lm_batch(c, B, T, 5 + variant);
    const Tensor full = m.lm_logits(w.src, B, T);  // (B, T, V)
    ASSERT_EQ(full.shape(), (Shape{B, T, V}));
    // Step by step.
    TransformerEncoderCache cache = m.make_lm_cache(B, 2);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> col(B);
      for (int64_t b = 0; b < B; ++b) col[b] = w.src[b * T + t];
      const Tensor step = m.lm_logits(col, B, 1, t, &cache);  // (B, 1, V)
      ASSERT_EQ(step.shape(), (Shape{B, 1, V}));
      std::vector<float> want;
      for (int64_t b = 0; b < B; ++b)
        want.insert(want.end(), full.data() + (b * T + t) * V, full.data() + (b * T + t + 1) * V);
      const Tensor ref = Tensor::from_vector({B, 1, V}, want);
      worst = std::max(worst, tfm::testing::rel_error(step, ref));
      ASSERT_TRUE(tfm::testing::close_rel(step, ref, 1e-5, "variant " + std::to_string(variant) + " step " + std::to_string(t)));
    }
    EXPECT_EQ(cache.length(), T);
    // Prefill 12 positions at once, then continue one at a time.
    TransformerEncoderCache pre = m.make_lm_cache(B, 4);
    const int64_t P = 12;
    std::vector<int32_t> prompt;
    for (int64_t b = 0; b < B; ++b) prompt.insert(prompt.end(), w.src.begin() + b * T, w.src.begin() + b * T + P);
    const Tensor head = m.lm_logits(prompt, B, P, 0, &pre);  // (B, P, V)
    ASSERT_EQ(head.shape(), (Shape{B, P, V}));
    std::vector<float> want_head;
    for (int64_t b = 0; b < B; ++b)
      want_head.insert(want_head.end(), full.data() + b * T * V, full.data() + (b * T + P) * V);
    EXPECT_TRUE(tfm::testing::close_rel(head, Tensor::from_vector({B, P, V}, want_head), 1e-5, "prefill"));
    std::vector<int32_t> next(B);
    for (int64_t b = 0; b < B; ++b) next[b] = w.src[b * T + P];
    const Tensor after = m.lm_logits(next, B, 1, P, &pre);
    std::vector<float> want_after;
    for (int64_t b = 0; b < B; ++b)
      want_after.insert(want_after.end(), full.data() + (b * T + P) * V, full.data() + (b * T + P + 1) * V);
    EXPECT_TRUE(tfm::testing::close_rel(after, Tensor::from_vector({B, 1, V}, want_after), 1e-5, "after prefill"));
    EXPECT_THROW(m.lm_logits(next, B, 1, 0, &pre), std::invalid_argument);  // offset ≠ cache length
    std::cout << "[ lm cache ] variant " << variant << ": max rel err " << worst << "\n";
  }
  // The position table ends at max_len: the cache cannot step beyond it; other archs have no lm_logits.
  Generator g{50, 0};
  Model m(tfm::testing::small_decoder(), g);
  m.eval();
  NoGradGuard ng;
  TransformerEncoderCache cache = m.make_lm_cache(1, 8);
  const std::vector<int32_t> ids(24, 5);
  m.lm_logits(ids, 1, 24, 0, &cache);
  EXPECT_THROW(m.lm_logits({5}, 1, 1, 24, &cache), std::invalid_argument);
  Model s2s(tfm::testing::small_seq2seq(), g);
  EXPECT_THROW(s2s.lm_logits({5}, 1, 1), std::invalid_argument);
  EXPECT_THROW(s2s.make_lm_cache(1, 8), std::invalid_argument);
  // translate on a language model: a clear refusal.
  EXPECT_THROW(decode(m, {{5, 6}}, DecodeOptions{}), std::invalid_argument);
}

}  // namespace
