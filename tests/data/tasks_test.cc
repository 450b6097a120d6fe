// tests/data/tasks_test.cc — built-in tasks (the notebook's distribution) and batch plans.
#include "tfm/data/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tfm/data/batching.h"

namespace tfm::data {
namespace {

TEST(Tasks, ReverseMatchesTheNotebookDistribution) {
  const auto set = make_task_set(Task::REVERSE, 7, Split::TRAIN, 20000);
  std::vector<int64_t> len_count(16, 0), tok_count(20, 0);
  for (const auto& e : set) {
    ASSERT_GE(e.src.size(), 3u);
    ASSERT_LE(e.src.size(), 15u);
    ++len_count[e.src.size()];
    for (int32_t t : e.src) {
      ASSERT_GE(t, 1);
      ASSERT_LE(t, 19);
      ++tok_count[static_cast<size_t>(t)];
    }
    std::vector<int32_t> r(e.src.rbegin(), e.src.rend());
    ASSERT_EQ(e.tgt, r);
  }
  // Uniform over 13 lengths: expected 20000/13 ≈ 1538 each, sd ≈ sqrt(1538·12/13) ≈ 38; ±6 sd = 230.
  for (int l = 3; l <= 15; ++l) EXPECT_NEAR(static_cast<double>(len_count[static_cast<size_t>(l)]), 20000.0 / 13, 230) << l;
  // Tokens: n ≈ 20000·9 = 180000 draws over 19 values, expected ≈ 9474 each, sd ≈ 95; ±6 sd = 570.
  int64_t n = 0;
  for (int t = 1; t <= 19; ++t) n += tok_count[static_cast<size_t>(t)];
  for (int t = 1; t <= 19; ++t)
    EXPECT_NEAR(static_cast<double>(tok_count[static_cast<size_t>(t)]), static_cast<double>(n) / 19, 570) << t;
}

TEST(Tasks, DeterministicPerIndexAndSplitsDiffer) {
  const auto a = make_task_example(Task::COPY, 3, Split::VALID, 41);
  const auto set = make_task_set(Task::COPY, 3, Split::VALID, 50);
  EXPECT_EQ(a.src, set[41].src);
  EXPECT_EQ(a.tgt, a.src);
  int same = 0;
  for (int i = 0; i < 50; ++i)
    same += make_task_example(Task::COPY, 3, Split::TRAIN, i).src == set[static_cast<size_t>(i)].src;
  EXPECT_LE(same, 2);  // a length-3 collision is possible (1/13 · 1/19³ per pair), not more
  const auto s = make_task_example(Task::SORT, 3, Split::TRAIN, 5);
  EXPECT_TRUE(std::is_sorted(s.tgt.begin(), s.tgt.end()));
  EXPECT_THROW(enum_from_name<Task>("rot13"), std::invalid_argument);
}

TEST(Tasks, VocabIdsAreTokenValues) {
  const Vocab v = task_vocab();
  EXPECT_EQ(v.size(), 22);
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.id("7"), 7);
  EXPECT_EQ(v.bos_id(), 20);
  EXPECT_EQ(v.eos_id(), 21);
  EXPECT_EQ(v.unk_id(), -1);
  EXPECT_THROW(v.id("20"), std::invalid_argument);
}

std::vector<Example> examples(int n, uint64_t seed) {
  std::vector<Example> out;
  for (const auto& e : make_task_set(Task::REVERSE, seed, Split::TRAIN, n)) out.push_back({e.src, e.tgt});
  return out;
}

TEST(Batching, EpochPlanCoversEveryExampleOnceAndIsDeterministic) {
  const auto ex = examples(1000, 1);
  BatchSettings s;
  s.batch_size = 32;
  const BatchPlan p = plan_epoch(ex, s, 9, 0);
  std::vector<int> seen(ex.size(), 0);
  for (const auto& b : p) {
    ASSERT_LE(b.size(), 32u);
    for (int64_t i : b) ++seen[static_cast<size_t>(i)];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  EXPECT_EQ(plan_epoch(ex, s, 9, 0), p);
  EXPECT_NE(plan_epoch(ex, s, 9, 1), p);
  EXPECT_NE(plan_epoch(ex, s, 10, 0), p);
}

TEST(Batching, BucketingKeepsPaddingSmall) {
  const auto ex = examples(4096, 2);
  BatchSettings s;
  s.batch_size = 32;
  int64_t real = 0, padded = 0;
  for (const auto& b : plan_epoch(ex, s, 0, 0)) {
    size_t longest = 0;
    for (int64_t i : b) longest = std::max(longest, ex[static_cast<size_t>(i)].src.size()), real += static_cast<int64_t>(ex[static_cast<size_t>(i)].src.size());
    padded += static_cast<int64_t>(longest * b.size());
  }
  // Pools of 64 batches over 13 lengths put ~5 batches on each length: padding nearly vanishes,
  // where random batches would pad to ~15 for a mean of 9 (efficiency ≈ 0.6).
  EXPECT_GT(static_cast<double>(real) / static_cast<double>(padded), 0.95);
}

TEST(Batching, TokenBudget) {
  const auto ex = examples(500, 3);
  BatchSettings s;
  s.batch_tokens = 100;
  for (const auto& b : plan_epoch(ex, s, 0, 0)) {
    size_t longest = 0;
    for (int64_t i : b) longest = std::max(longest, ex[static_cast<size_t>(i)].src.size() + 1);
    EXPECT_LE(static_cast<int64_t>(longest * b.size()), 100);
  }
}

TEST(Batching, MakeBatchLayouts) {
  const std::vector<Example> ex = {{{5, 6, 7}, {7, 6, 5}}, {{8}, {9}}};
  const TokenBatch e = make_batch(ex, {0, 1}, TargetLayout::PER_POSITION, 0, 20, 21);
  EXPECT_EQ(e.S, 3);
  EXPECT_EQ(e.T, 3);
  EXPECT_EQ(e.src, (std::vector<int32_t>{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(e.tgt_out, (std::vector<int32_t>{7, 6, 5, 9, 0, 0}));
  EXPECT_TRUE(e.tgt_in.empty());
  const TokenBatch s = make_batch(ex, {1, 0}, TargetLayout::SHIFTED, 0, 20, 21);
  EXPECT_EQ(s.T, 4);  // bos + 3 targets
  EXPECT_EQ(s.src, (std::vector<int32_t>{8, 0, 0, 5, 6, 7}));
  EXPECT_EQ(s.tgt_in, (std::vector<int32_t>{20, 9, 0, 0, 20, 7, 6, 5}));
  EXPECT_EQ(s.tgt_out, (std::vector<int32_t>{9, 21, 0, 0, 7, 6, 5, 21}));
  EXPECT_EQ(count_target_tokens(s, 0), 6);
  const std::vector<Example> bad = {{{1, 2}, {3}}};
  EXPECT_THROW(make_batch(bad, {0}, TargetLayout::PER_POSITION, 0, 20, 21), std::invalid_argument);
}

}  // namespace
}  // namespace tfm::data
