// tests/train/evaluate_split_test.cc — the teacher-forced evaluation split over P parts
// (teacher_forced_part, teacher_forced_replay in src/train/evaluate_split.h), as the ranks of an
// mpirun run split it, done here in one process: each part forwards only its round-robin share of the
// batches, and the replay of every part's record equals the unsplit evaluation bit for bit.
#include "train/evaluate_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "models/model_configs.h"
#include "test_util.h"
#include "tfm/models/model.h"
#include "tfm/models/text_eval.h"
#include "tfm/train/comm.h"
#include "tfm/train/evaluate.h"

namespace tfm {
namespace {

using train::TeacherForced;

// Bitwise equality of the three figures (EXPECT_EQ on doubles would let -0 equal +0).
::testing::AssertionResult same_bits(const TeacherForced& a, const TeacherForced& b) {
  if (std::memcmp(&a.loss, &b.loss, sizeof(double)) != 0 ||
      std::memcmp(&a.token_accuracy, &b.token_accuracy, sizeof(double)) != 0 ||
      std::memcmp(&a.sequence_accuracy, &b.sequence_accuracy, sizeof(double)) != 0)
    return ::testing::AssertionFailure() << "loss " << a.loss << " vs " << b.loss << ", token accuracy "
                                         << a.token_accuracy << " vs " << b.token_accuracy << ", sequence accuracy "
                                         << a.sequence_accuracy << " vs " << b.sequence_accuracy;
  return ::testing::AssertionSuccess();
}

// The number of batches in a part's record ([n, correct, rows, rows all right, n losses] each).
int64_t batches_in(const std::vector<double>& rec) {
  int64_t k = 0;
  for (size_t i = 0; i < rec.size(); i += 4 + static_cast<size_t>(rec[i])) ++k;
  return k;
}

// `n` pairs of random lengths 1..7 over the non-special ids of small_seq2seq's vocabularies.
std::vector<data::Example> random_examples(int n, uint64_t seed) {
  testing::Rng g(seed);
  std::vector<data::Example> out(static_cast<size_t>(n));
  for (auto& e : out) {
    for (int k = 0, len = g.uniform_int(1, 7); k < len; ++k) e.src.push_back(g.uniform_int(3, 10));
    for (int k = 0, len = g.uniform_int(1, 7); k < len; ++k) e.tgt.push_back(g.uniform_int(3, 12));
  }
  return out;
}

// A target the vocabulary could not name (<unk>: a tag unseen when the vocabulary was built) is never predicted
// right, though the argmax is that id: its decoded output, "<unk>", is not the token. Its loss still counts.
TEST(EvaluateSplit, PredictingUnkIsNeverCountedCorrect) {
  const ModelConfig c = testing::tiny_encoder(1);
  Generator gen{6, 0};
  Model model(c, gen);
  model.eval();
  std::vector<data::Example> examples(12);
  testing::Rng g(4);
  int64_t total = 0;
  for (auto& e : examples) {  // targets: the model's own argmax at each position, so every prediction is right
    for (int k = 0, len = g.uniform_int(2, 6); k < len; ++k) e.src.push_back(g.uniform_int(3, 19));
    data::TokenBatch b;
    b.B = 1;
    b.S = static_cast<int64_t>(e.src.size());
    b.src = e.src;
    const Tensor z = model.forward(b);  // (1, S, V)
    for (int64_t i = 0; i < b.S; ++i) {
      const float* row = z.data() + i * c.tgt_vocab_size;
      e.tgt.push_back(static_cast<int32_t>(std::max_element(row, row + c.tgt_vocab_size) - row));
      total += e.tgt.back() != c.pad_id;  // a pad target is not scored
    }
  }
  const TeacherForced all = train::evaluate_teacher_forced(model, examples, 16);
  EXPECT_EQ(all.token_accuracy, 1.0);
  int32_t unk = -1;  // the first target that is not the pad
  for (const auto& e : examples)
    for (const int32_t t : e.tgt)
      if (unk < 0 && t != c.pad_id) unk = t;
  ASSERT_GE(unk, 0);
  int64_t unks = 0;
  for (const auto& e : examples) unks += std::count(e.tgt.begin(), e.tgt.end(), unk);
  const TeacherForced with_unk = train::evaluate_teacher_forced(model, examples, 16, nullptr, unk);
  EXPECT_DOUBLE_EQ(with_unk.token_accuracy, 1.0 - static_cast<double>(unks) / static_cast<double>(total));
  EXPECT_LT(with_unk.sequence_accuracy, 1.0);
  EXPECT_EQ(std::memcmp(&with_unk.loss, &all.loss, sizeof(double)), 0);
}

TEST(EvaluateSplit, Seq2seqPartsReplayedEqualTheUnsplitEvaluationBitForBit) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  // Batches of 16: 7 batches, the last of 4; enough losses a batch that adding them in another order
  // rounds differently.
  const auto examples = random_examples(100, 3);
  const TeacherForced whole = train::evaluate_teacher_forced(model, examples, 16);
  EXPECT_TRUE(model.is_training());  // training mode restored
  ASSERT_GT(whole.loss, 0);
  for (int P : {1, 2, 3, 4, 7, 9}) {
    std::vector<std::vector<double>> parts;
    for (int r = 0; r < P; ++r) parts.push_back(train::teacher_forced_part(model, examples, 16, r, P));
    // Round robin: 7 batches over P parts, the earlier parts taking the extra ones.
    for (int r = 0; r < P; ++r) EXPECT_EQ(batches_in(parts[static_cast<size_t>(r)]), 7 / P + (r < 7 % P)) << P << " " << r;
    EXPECT_TRUE(same_bits(train::teacher_forced_replay(parts), whole)) << P << " parts";
  }
  // A Comm of one process takes the plain path.
  train::Comm single;
  EXPECT_TRUE(same_bits(train::evaluate_teacher_forced(model, examples, 16, &single), whole));
}

TEST(EvaluateSplit, TextPartsReplayedEqualTheUnsplitEvaluationBitForBit) {
  Generator gen{6, 0};
  Model model(testing::small_decoder(), gen);
  testing::Rng g(9);
  std::vector<int32_t> ids;
  for (int i = 0; i < 400; ++i) ids.push_back(g.uniform_int(3, 12));
  const data::TextCorpus corpus = data::TextCorpus::from_ids(ids, 13);
  const int64_t batches = data::validation_batch_count(corpus, 8, 6);
  ASSERT_GE(batches, 4);
  const TeacherForced whole = train::evaluate_teacher_forced_text(model, corpus, 8, 6);
  ASSERT_GT(whole.loss, 0);
  for (int P : {2, 3}) {
    std::vector<std::vector<double>> parts;
    for (int r = 0; r < P; ++r) parts.push_back(train::teacher_forced_text_part(model, corpus, 8, 6, r, P));
    for (int r = 0; r < P; ++r) EXPECT_EQ(batches_in(parts[static_cast<size_t>(r)]), batches / P + (r < batches % P));
    EXPECT_TRUE(same_bits(train::teacher_forced_replay(parts), whole)) << P << " parts";
  }
}

TEST(EvaluateSplit, RecordsThatAreNotARoundRobinSplitAreRejected) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  const auto examples = random_examples(23, 3);
  std::vector<double> p0 = train::teacher_forced_part(model, examples, 4, 0, 2);
  std::vector<double> p1 = train::teacher_forced_part(model, examples, 4, 1, 2);
  // Part 1 with a batch more than part 0: batch 5's part ran out first, part 1 has one left over.
  std::vector<double> p0_short(p0.begin(), p0.begin() + 4 + static_cast<int64_t>(p0[0]));
  EXPECT_THROW(train::teacher_forced_replay({p0_short, p1}), std::invalid_argument);
  std::vector<double> cut(p1.begin(), p1.end() - 1);
  EXPECT_THROW(train::teacher_forced_replay({p0, cut}), std::invalid_argument);
  EXPECT_THROW(train::teacher_forced_replay({}), std::invalid_argument);
  EXPECT_THROW(train::teacher_forced_part(model, examples, 4, 2, 2), std::invalid_argument);
  EXPECT_NO_THROW(train::teacher_forced_replay({p0, p1}));
}

// The trainer's validation of a language model and tfm eval --text are the same scorer: with the
// model's block size and the same batch they give the same loss bit for bit, on a text holding the
// special ids too (a text has no padding: every target is scored).
TEST(EvaluateSplit, TextValidationIsEvalTextBitForBit) {
  Generator gen{6, 0};
  Model model(testing::small_decoder(), gen);
  testing::Rng g(11);
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(g.uniform_int(0, 12));
  const data::TextCorpus corpus = data::TextCorpus::from_ids(ids, 13);
  const TeacherForced tf = train::evaluate_teacher_forced_text(model, corpus, model.config().max_len, 5);
  const TextScore ts = evaluate_text(model, corpus, 299, 5);
  EXPECT_EQ(ts.tokens, 299);
  EXPECT_EQ(std::memcmp(&tf.loss, &ts.loss, sizeof(double)), 0) << tf.loss << " vs " << ts.loss;
  EXPECT_TRUE(model.is_training());
}

}  // namespace
}  // namespace tfm
