// tests/models/text_eval_test.cc — evaluate_text against a hand computation: the text cut into
// consecutive windows of block size (the last one shorter), each scored by its own full forward
// (Model::lm_logits, batch 1), −log softmax summed in double; and evaluate_text_file's token and
// character counts for char, byte, spm and gpt2-bpe tokenizations (the characters predicted: those after
// the first token).
//
// Tolerance: the hand sum and evaluate_text see the same logits up to the GEMM's row blocking
// (batch 1 against batch_size windows), float32 rounding of ~max(D, F) = 32-term sums, relative
// ~1e-6 on each logit; the mean loss is compared to 1e-5 relative.
#include "tfm/models/text_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "model_configs.h"
#include "test_util.h"
#include "tfm/autograd.h"

using namespace tfm;

namespace {

std::unique_ptr<Model> tiny_lm(int64_t V, uint64_t seed, int64_t block = 8) {
  ModelConfig c = tfm::testing::small_decoder();
  c.src_vocab_size = c.tgt_vocab_size = V;
  c.dropout = 0.0f;
  c.max_len = block;
  Generator g{seed, 0};
  auto m = std::make_unique<Model>(c, g);
  Tensor t = m->state_dict().at("embedding.weight");  // logits spread over a few units
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] *= 8.0f;
  return m;
}

double hand_nll(const Model& m, const std::vector<int32_t>& ids, int64_t block) {
  const int64_t V = m.config().tgt_vocab_size, n = static_cast<int64_t>(ids.size());
  NoGradGuard ng;
  double nll = 0;
  for (int64_t s = 0; s + 1 < n; s += block) {
    const int64_t T = std::min(block, n - 1 - s);
    const std::vector<int32_t> in(ids.begin() + s, ids.begin() + s + T);
    const Tensor z = m.lm_logits(in, 1, T);  // (1, T, V)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = z.data() + t * V;
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += mx + std::log(sum) - row[ids[static_cast<size_t>(s + t + 1)]];
    }
  }
  return nll;
}

}  // namespace

TEST(TextEval, MatchesHandWindows) {
  const auto mp = tiny_lm(13, 1);
  const Model& m = *mp;
  tfm::testing::Rng r(3);
  for (int n : {30, 33, 2, 9}) {  // 3 full windows + 5; 4 full; one window of 1; exactly one full
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(r.uniform_int(0, 12));
    const data::TextCorpus corpus = data::TextCorpus::from_ids(ids, 13);
    const double nll = hand_nll(m, ids, 8);
    for (int64_t batch : {1, 2, 16}) {
      const TextScore s = evaluate_text(m, corpus, 2 * (n - 1), batch);
      EXPECT_EQ(s.tokens, n - 1);
      EXPECT_EQ(s.chars, 2 * (n - 1));
      EXPECT_NEAR(s.loss, nll / (n - 1), 1e-5 * s.loss) << n << " tokens, batch " << batch;
      EXPECT_DOUBLE_EQ(s.perplexity, std::exp(s.loss));
      EXPECT_DOUBLE_EQ(s.bits_per_token, s.loss / std::log(2.0));
      EXPECT_DOUBLE_EQ(s.bits_per_char, s.bits_per_token / 2);  // two characters a token here
      const auto j = nlohmann::json::parse(s.to_json());
      EXPECT_EQ(j["tokens"].get<int64_t>(), n - 1);
      for (const char* k : {"loss", "perplexity", "bits_per_token", "bits_per_char"}) EXPECT_TRUE(j.contains(k)) << k;
    }
  }
  EXPECT_TRUE(m.is_training());  // the training flag is restored
}

TEST(TextEval, FileCountsCharactersAndTokens) {
  const std::string dir = tfm::testing::temp_dir("text_eval");
  const std::string path = dir + "/t.txt";
  std::string text;
  for (int i = 0; i < 4; ++i) text += "héllo wörld, ça va?\n";  // 20 code points, 23 bytes a line
  tfm::testing::spit(path, text);
  for (data::Tokenization t : {data::Tokenization::CHAR, data::Tokenization::BYTE}) {
    TrainedModel tm;
    tm.tgt_vocab = tm.src_vocab = data::build_text_vocab(path, t);
    tm.tgt_tokenizer = tm.src_tokenizer = t;
    tm.model = tiny_lm(tm.tgt_vocab.size(), 2);
    const TextScore s = evaluate_text_file(tm, path, 4);
    EXPECT_EQ(s.chars, 80 - 1);
    EXPECT_EQ(s.tokens, (t == data::Tokenization::CHAR ? 80 : 92) - 1);
    const std::vector<int32_t> ids = data::encode_text(tm.tgt_vocab, t, text);
    EXPECT_NEAR(s.loss, hand_nll(*tm.model, ids, 8) / s.tokens, 1e-5 * s.loss);
    EXPECT_NEAR(s.bits_per_char, s.bits_per_token * s.tokens / s.chars, 1e-12 * s.bits_per_char);
    EXPECT_EQ(s.unknown_tokens, 0);
    // Characters the vocabulary lacks read as <unk>, counted (a char vocabulary has <unk>; bytes cover every byte).
    const std::string other = dir + "/other.txt";
    tfm::testing::spit(other, "h\u03b1\u03b2llo\n");
    EXPECT_EQ(evaluate_text_file(tm, other, 4).unknown_tokens, t == data::Tokenization::CHAR ? 2 : 0);
  }
  {  // one character of two bytes, scored as bytes: a token predicted, no whole character — bits per char null
    TrainedModel tm;
    tm.tgt_vocab = tm.src_vocab = data::build_text_vocab(path, data::Tokenization::BYTE);
    tm.tgt_tokenizer = tm.src_tokenizer = data::Tokenization::BYTE;
    tm.model = tiny_lm(tm.tgt_vocab.size(), 2);
    const TextScore s = evaluate_text_string(tm, "\u00dc", 4);
    EXPECT_EQ(s.tokens, 1);
    EXPECT_TRUE(std::isnan(s.bits_per_char));
    EXPECT_TRUE(nlohmann::json::parse(s.to_json())["bits_per_char"].is_null());
  }
  std::filesystem::remove_all(dir);
}

// Bits per character divide by the characters predicted: those of every token but the first, which is given. A
// subword model's first token may be a whole word, all of whose characters are given; a byte (or a byte-level BPE
// token holding part of a UTF-8 sequence) stands for the code points whose lead byte it holds. Hand counts:
//   spm        " License terms and conditions.\n" (31 code points): 31 − the first piece's (" License": 23)
//   gpt2-bpe   "low lo\n" = low | Ġ | lo | Ċ (merges l o, lo w): 7 − 3 = 4 characters over 3 tokens
//              "éa" = Ã | © | a (the bytes C3 A9 61, no merges): 2 − 1 = 1 (é's lead byte is given)
//   byte       "\x80ab": the first byte continues no character, so 'a' and 'b' are both predicted: 2
// The file and the string agree; bits per char is the total bits over those characters.
TEST(TextEval, CharactersPredictedAreThoseAfterTheFirstToken) {
  const std::string dir = tfm::testing::temp_dir("text_eval_subword");
  const auto check = [&](const TrainedModel& tm, const std::string& text, int64_t tokens, int64_t chars) {
    const TextScore s = evaluate_text_string(tm, text, 4);
    EXPECT_EQ(s.tokens, tokens) << text;
    EXPECT_EQ(s.chars, chars) << text;
    EXPECT_NEAR(s.bits_per_char, s.bits_per_token * s.tokens / chars, 1e-12 * s.bits_per_char) << text;
    tfm::testing::spit(dir + "/t.txt", text);
    const TextScore f = evaluate_text_file(tm, dir + "/t.txt", 4);
    EXPECT_EQ(f.chars, chars) << text;
    EXPECT_DOUBLE_EQ(f.bits_per_char, s.bits_per_char) << text;
  };
  {  // spm: a lossless model of 400 pieces trained on the GPL
    data::SpmOptions o;
    o.vocab_size = 400;
    TrainedModel tm;
    tm.tgt_tokenizer = tm.src_tokenizer = data::train_text_spm("/usr/share/common-licenses/GPL-3", o);
    tm.tgt_vocab = tm.src_vocab = tm.tgt_tokenizer.vocab();
    tm.model = tiny_lm(tm.tgt_vocab.size(), 4);
    const std::string text = " License terms and conditions.\n";
    const std::vector<int32_t> ids = data::encode_text(tm.tgt_vocab, tm.tgt_tokenizer, text);
    const std::string first = data::decode_text(tm.tgt_vocab, tm.tgt_tokenizer, {ids[0]});
    ASSERT_GT(first.size(), 1u) << "the first piece is one character: the test would not tell the counts apart";
    ASSERT_EQ(text.rfind(first, 0), 0u) << first;
    check(tm, text, static_cast<int64_t>(ids.size()) - 1, 31 - static_cast<int64_t>(first.size()));  // ASCII
  }
  {  // gpt2-bpe: the 256 byte tokens, the merges "l o" and "lo w", <|endoftext|>
    nlohmann::json v = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) v[data::ByteLevelBpe::byte_symbol(static_cast<uint8_t>(b))] = b;
    v["lo"] = 256;
    v["low"] = 257;
    v["<|endoftext|>"] = 258;
    TrainedModel tm;
    tm.tgt_tokenizer = tm.src_tokenizer =
        data::Tokenizer::from_gpt2_bpe(v.dump(), "vocab.json", "#version: 0.2\nl o\nlo w\n", "merges.txt");
    tm.tgt_vocab = tm.src_vocab = tm.tgt_tokenizer.vocab();
    tm.model = tiny_lm(tm.tgt_vocab.size(), 5);
    check(tm, "low lo\n", 3, 4);
    check(tm, "\u00e9a", 2, 1);
  }
  {  // byte
    TrainedModel tm;
    tm.tgt_vocab = tm.src_vocab = data::byte_vocab();
    tm.tgt_tokenizer = tm.src_tokenizer = data::Tokenization::BYTE;
    tm.model = tiny_lm(tm.tgt_vocab.size(), 6);
    check(tm,
          "\x80"
          "ab",
          2, 2);
    check(tm, "\u00e9a", 2, 1);
  }
  std::filesystem::remove_all(dir);
}

TEST(TextEval, Errors) {
  const auto m = tiny_lm(5, 3);
  EXPECT_THROW(evaluate_text(*m, data::TextCorpus::from_ids({1}, 5), 1), std::invalid_argument);
  EXPECT_THROW(evaluate_text(*m, data::TextCorpus::from_ids({1, 2}, 5), 1, 0), std::invalid_argument);
  ModelConfig c;
  c.arch = Arch::ENCODER;
  c.src_vocab_size = c.tgt_vocab_size = 5;
  c.d_model = 8;
  c.nhead = 2;
  c.num_encoder_layers = 1;
  c.dim_feedforward = 8;
  Generator g;
  const Model enc(c, g);
  EXPECT_THROW(evaluate_text(enc, data::TextCorpus::from_ids({1, 2, 3}, 5), 2), std::invalid_argument);
  // A model directory that is not a language model is named before its text is read (whose
  // tokenization may not even be one a text can take).
  TrainedModel tm;
  tm.dir = "runs/enc";
  tm.model = std::make_unique<Model>(c, g);
  tm.src_tokenizer = tm.tgt_tokenizer = data::Tokenization::SPACE;
  try {
    evaluate_text_file(tm, "/nonexistent.txt", 2);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "runs/enc is not a language model (arch encoder); eval --text needs arch decoder "
                           "(eval --data / --task score the others)");
  }
}
