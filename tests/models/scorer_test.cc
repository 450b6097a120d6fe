// tests/models/scorer_test.cc — the one teacher-forced scorer (src/models/scorer.h): one process
// (part 0 of 1, each record replayed as it is made) equals every round-robin split into P parts
// replayed, bit for bit, for pairs and for a text's windows; the figures do not depend on the thread
// count; the model's mode is restored, also when scoring throws; and the sums agree with the model's
// own float32 loss.
//
// Tolerance against Model::loss: the scorer sums each target's lse − z_y in double; Model::loss is
// float32 cross-entropy (lse within 4·eps_f of the twin's, tests/kernels/cross_entropy_test.cc) whose
// mean adds at most 16 rows × 8 targets = 128 float terms, relative error ≤ 128·eps_f ≈ 7.6e-6 in
// the worst case; compared at 2e-5 relative.
#include "models/scorer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <stdexcept>

#include "model_configs.h"
#include "test_util.h"
#include "tfm/autograd.h"

namespace tfm {
namespace {

using detail::ScoreBatches;
using detail::ScoreSums;

// Bitwise equality of the sums (EXPECT_EQ on doubles would let -0 equal +0).
::testing::AssertionResult same_sums(const ScoreSums& a, const ScoreSums& b) {
  if (std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)) != 0 || a.tokens != b.tokens || a.correct != b.correct ||
      a.rows != b.rows || a.rows_correct != b.rows_correct)
    return ::testing::AssertionFailure() << "loss_sum " << a.loss_sum << " vs " << b.loss_sum << ", tokens " << a.tokens
                                         << " vs " << b.tokens << ", correct " << a.correct << " vs " << b.correct
                                         << ", rows " << a.rows << " vs " << b.rows << ", rows correct "
                                         << a.rows_correct << " vs " << b.rows_correct;
  return ::testing::AssertionSuccess();
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

std::vector<std::vector<double>> all_parts(const Model& m, const ScoreBatches& batches, int P) {
  std::vector<std::vector<double>> parts;
  for (int r = 0; r < P; ++r) parts.push_back(detail::score_part(m, batches, r, P));
  return parts;
}

TEST(Scorer, PairsOneProcessEqualsEveryPartsReplayedBitForBit) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  const auto examples = random_examples(100, 3);
  const ScoreBatches batches = detail::pair_batches(model.config(), examples, 16);
  ASSERT_EQ(batches.count, 7);  // the last of 4 pairs
  const ScoreSums whole = detail::score(model, batches);
  EXPECT_TRUE(model.is_training());
  int64_t targets = 0;
  for (int64_t k = 0; k < batches.count; ++k) targets += data::count_target_tokens(batches.make(k), model.config().pad_id);
  EXPECT_EQ(whole.tokens, targets);
  EXPECT_EQ(whole.rows, 100);
  EXPECT_GT(whole.loss_sum, 0);
  for (int P : {1, 2, 3, 4, 7, 9}) EXPECT_TRUE(same_sums(detail::replay_parts(all_parts(model, batches, P)), whole)) << P;

  // The sums against the model's own float32 loss (eval mode, no label smoothing), batch by batch.
  EvalModeGuard eval(model);
  NoGradGuard no_grad;
  double sum = 0;
  for (int64_t k = 0; k < batches.count; ++k) {
    const data::TokenBatch b = batches.make(k);
    sum += static_cast<double>(model.loss(b).item()) * static_cast<double>(data::count_target_tokens(b, model.config().pad_id));
  }
  EXPECT_NEAR(whole.loss_sum, sum, 2e-5 * sum);
}

TEST(Scorer, TextWindowsOneProcessEqualsEveryPartsReplayedBitForBit) {
  Generator gen{6, 0};
  Model model(testing::small_decoder(), gen);
  testing::Rng g(9);
  std::vector<int32_t> ids;
  for (int i = 0; i < 400; ++i) ids.push_back(g.uniform_int(0, 12));  // the specials too: a text has no padding
  const data::TextCorpus corpus = data::TextCorpus::from_ids(ids, 13);
  // 399 targets: 49 full windows of 8 in 9 batches of at most 6 (the last of 1), then the shorter
  // window of 7 alone.
  const ScoreBatches batches = detail::window_batches(corpus, 8, 6);
  ASSERT_EQ(batches.count, 10);
  const ScoreSums whole = detail::score(model, batches);
  EXPECT_TRUE(model.is_training());
  EXPECT_EQ(whole.tokens, 399);  // every token but the first, pad ids included
  EXPECT_EQ(whole.rows, 50);
  EXPECT_GT(whole.loss_sum, 0);
  for (int P : {1, 2, 3, 4, 10, 11}) EXPECT_TRUE(same_sums(detail::replay_parts(all_parts(model, batches, P)), whole)) << P;
  // 400 targets: 50 full windows, no shorter one.
  ids.push_back(4);
  const data::TextCorpus longer = data::TextCorpus::from_ids(ids, 13);
  const ScoreBatches more = detail::window_batches(longer, 8, 6);
  ASSERT_EQ(more.count, 9);
  const ScoreSums s = detail::score(model, more);
  EXPECT_EQ(s.tokens, 400);
  EXPECT_EQ(s.rows, 50);
  for (int P : {2, 4}) EXPECT_TRUE(same_sums(detail::replay_parts(all_parts(model, more, P)), s)) << P;
}

TEST(Scorer, ThreadCountDoesNotChangeTheFigures) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  const auto examples = random_examples(60, 4);
  const ScoreBatches batches = detail::pair_batches(model.config(), examples, 16);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const ScoreSums one = detail::score(model, batches);
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_TRUE(same_sums(detail::score(model, batches), one)) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Scorer, ModeIsRestoredAlsoWhenScoringThrows) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  const auto examples = random_examples(20, 5);
  const ScoreBatches batches = detail::pair_batches(model.config(), examples, 8);
  model.eval();
  detail::score(model, batches);
  EXPECT_FALSE(model.is_training());  // a model in eval mode stays there
  model.train();
  ScoreBatches failing = batches;
  failing.make = [&](int64_t k) {
    if (k == 1) throw std::runtime_error("batch 1");
    return batches.make(k);
  };
  EXPECT_THROW(detail::score(model, failing), std::runtime_error);
  EXPECT_TRUE(model.is_training());
  // A target outside the logits' classes is refused, naming it.
  ScoreBatches bad = batches;
  bad.make = [&](int64_t k) {
    data::TokenBatch b = batches.make(k);
    b.tgt_out[0] = 13;
    return b;
  };
  EXPECT_THROW(detail::score(model, bad), std::invalid_argument);
  EXPECT_TRUE(model.is_training());
}

TEST(Scorer, PartsThatAreNotARoundRobinSplitAreRejected) {
  Generator gen{5, 0};
  Model model(testing::small_seq2seq(), gen);
  const auto examples = random_examples(23, 3);
  const ScoreBatches batches = detail::pair_batches(model.config(), examples, 4);  // 6 batches
  const auto parts = all_parts(model, batches, 2);
  EXPECT_NO_THROW(detail::replay_parts(parts));
  std::vector<double> p0_short(parts[0].begin(), parts[0].begin() + 4 + static_cast<int64_t>(parts[0][0]));
  EXPECT_THROW(detail::replay_parts({p0_short, parts[1]}), std::invalid_argument);  // part 1 has one left over
  std::vector<double> cut(parts[1].begin(), parts[1].end() - 1);
  EXPECT_THROW(detail::replay_parts({parts[0], cut}), std::invalid_argument);
  EXPECT_THROW(detail::replay_parts({}), std::invalid_argument);
  EXPECT_THROW(detail::score_part(model, batches, 2, 2), std::invalid_argument);
  EXPECT_THROW(detail::score_part(model, batches, -1, 2), std::invalid_argument);
  EXPECT_THROW(detail::score_part(model, batches, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace tfm
