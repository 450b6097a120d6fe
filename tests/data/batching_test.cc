// tests/data/batching_test.cc — epoch and evaluation plans (coverage, determinism, bucketing, token
// budgets) and TokenBatch layouts.
#include "tfm/data/batching.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tfm/data/tasks.h"

namespace tfm::data {
namespace {

// n examples of the reverse task: lengths 3..15, as the trainer sees them.
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

// A data-parallel rank builds only its rows, padded to the whole batch's lengths, and counts the
// whole batch's targets from the examples; both must be what the whole batch says.
TEST(Batching, RowsOfABatchAndTargetsWithoutBuildingIt) {
  const std::vector<Example> ex = examples(40, 3);
  std::vector<int64_t> idx = {5, 17, 2, 33, 8, 21, 14};
  for (const TargetLayout layout : {TargetLayout::SHIFTED, TargetLayout::PER_POSITION}) {
    const TokenBatch whole = make_batch(ex, idx, layout, 0, 1, 2);
    EXPECT_EQ(count_target_tokens(ex, idx, layout, 0, 2), count_target_tokens(whole, 0));
    for (const auto& [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {0, 3}, {3, 7}, {6, 7}, {4, 4}}) {
      const TokenBatch rows = make_batch_rows(ex, idx, r0, r1, layout, 0, 1, 2);
      EXPECT_EQ(rows.B, r1 - r0);
      EXPECT_EQ(rows.S, whole.S);
      EXPECT_EQ(rows.T, whole.T);
      EXPECT_EQ(rows.src, std::vector<int32_t>(whole.src.begin() + r0 * whole.S, whole.src.begin() + r1 * whole.S));
      EXPECT_EQ(rows.tgt_out,
                std::vector<int32_t>(whole.tgt_out.begin() + r0 * whole.T, whole.tgt_out.begin() + r1 * whole.T));
      if (layout == TargetLayout::SHIFTED) {
        EXPECT_EQ(rows.tgt_in,
                  std::vector<int32_t>(whole.tgt_in.begin() + r0 * whole.T, whole.tgt_in.begin() + r1 * whole.T));
      }
    }
  }
  // A target token equal to the pad id is not a target, in both counts; an eos that is the pad id
  // neither.
  const std::vector<Example> padded = {{{4, 5}, {0, 6}}, {{7}, {8}}};
  EXPECT_EQ(count_target_tokens(padded, {0, 1}, TargetLayout::SHIFTED, 0, 2),
            count_target_tokens(make_batch(padded, {0, 1}, TargetLayout::SHIFTED, 0, 1, 2), 0));
  EXPECT_EQ(count_target_tokens(padded, {0, 1}, TargetLayout::SHIFTED, 0, 0),
            count_target_tokens(make_batch(padded, {0, 1}, TargetLayout::SHIFTED, 0, 1, 0), 0));
  EXPECT_THROW(make_batch_rows(ex, idx, 3, 8, TargetLayout::SHIFTED, 0, 1, 2), std::invalid_argument);
}

}  // namespace
}  // namespace tfm::data
