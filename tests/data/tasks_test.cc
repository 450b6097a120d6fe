// tests/data/tasks_test.cc — built-in tasks: the notebook's distribution, determinism, vocabulary.
#include "tfm/data/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>

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

}  // namespace
}  // namespace tfm::data
