// tests/train/schedule_test.cc — learning-rate schedules, checked by hand, and AUTO's resolution.
#include "tfm/train/schedule.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace tfm::train {
namespace {

// Hand-checkable values: warmup 4 → 0.25, 0.5, 0.75, 1 × base; inverse_sqrt at s = 16: √(4/16) = 0.5;
// cosine with warmup 0 and 10 total steps at s = 5: 0.5·(1 + cos(π/2)) = 0.5.
TEST(Schedule, WarmupThenShape) {
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::CONSTANT, 1e-3f, 1, 4, 100), 0.25e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::CONSTANT, 1e-3f, 3, 4, 100), 0.75e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::CONSTANT, 1e-3f, 4, 4, 100), 1e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::CONSTANT, 1e-3f, 50, 4, 100), 1e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::INVERSE_SQRT, 2e-3f, 16, 4, 100), 1e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::INVERSE_SQRT, 2e-3f, 4, 4, 100), 2e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::INVERSE_SQRT, 2e-3f, 4, 0, 100), 1e-3f);  // no warmup: base/√s
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1.0f, 5, 0, 10), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1.0f, 2, 2, 12), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1.0f, 12, 2, 12), 0.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1.0f, 20, 2, 12), 0.0f);
  EXPECT_THROW(enum_from_name<Schedule>("linear"), std::invalid_argument);
  EXPECT_THROW(scheduled_lr(Schedule::CONSTANT, 1.0f, 0, 0, 10), std::invalid_argument);
  EXPECT_THROW(scheduled_lr(Schedule::COSINE, 1.0f, 5, 10, 10), std::invalid_argument);
}

// Cosine to min_lr (nanoGPT's decay): lr at the end of warmup, min_lr + (lr − min_lr)/2 half way, min_lr
// from the last step on; the warmup and the other schedules ignore it.
TEST(Schedule, CosineDecaysToMinLr) {
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1e-3f, 100, 100, 2000, 1e-4f), 1e-3f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1e-3f, 1050, 100, 2000, 1e-4f), 5.5e-4f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1e-3f, 2000, 100, 2000, 1e-4f), 1e-4f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1e-3f, 2500, 100, 2000, 1e-4f), 1e-4f);
  EXPECT_GT(scheduled_lr(Schedule::COSINE, 1e-3f, 1999, 100, 2000, 1e-4f), 1e-4f);
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::COSINE, 1e-3f, 50, 100, 2000, 1e-4f), 0.5e-3f);  // warmup from 0
  EXPECT_FLOAT_EQ(scheduled_lr(Schedule::CONSTANT, 1e-3f, 1500, 100, 2000, 1e-4f), 1e-3f);
}

TEST(Schedule, AutoIsCosineForAKnownLengthElseInverseSqrtOrConstant) {
  EXPECT_EQ(resolve_schedule(Schedule::AUTO, 100, 1600), Schedule::COSINE);
  EXPECT_EQ(resolve_schedule(Schedule::AUTO, 100, 0), Schedule::INVERSE_SQRT);  // length unknown
  EXPECT_EQ(resolve_schedule(Schedule::AUTO, 0, 0), Schedule::CONSTANT);
  EXPECT_EQ(resolve_schedule(Schedule::AUTO, 100, 50), Schedule::INVERSE_SQRT);  // warmup beyond the run
  EXPECT_EQ(resolve_schedule(Schedule::CONSTANT, 100, 1600), Schedule::CONSTANT);
  EXPECT_THROW(scheduled_lr(Schedule::AUTO, 1.0f, 1, 0, 10), std::invalid_argument);  // resolved first
}


// The budget schedule, by hand: warmup 4 → 0.25·base at s = 1; base while measuring (total 0) and up to
// decay_start 10; with total 30 half way at s = 20: min + (base − min)/2 = 0.55e-3 for base 1e-3, min
// 1e-4; min_lr from step 30 on. Continuous at decay_start (the cosine starts at base).
TEST(Schedule, BudgetHoldsThenDecaysFromTheFixedStepToMinLr) {
  EXPECT_FLOAT_EQ(budget_lr(1e-3f, 1, 4, 4, 0, 1e-4f), 0.25e-3f);
  EXPECT_FLOAT_EQ(budget_lr(1e-3f, 500, 4, 4, 0, 1e-4f), 1e-3f);  // not fixed yet: base, however late
  EXPECT_FLOAT_EQ(budget_lr(1e-3f, 10, 4, 10, 30, 1e-4f), 1e-3f);
  EXPECT_FLOAT_EQ(budget_lr(1e-3f, 20, 4, 10, 30, 1e-4f), 5.5e-4f);
  EXPECT_GT(budget_lr(1e-3f, 29, 4, 10, 30, 1e-4f), 1e-4f);
  EXPECT_EQ(budget_lr(1e-3f, 30, 4, 10, 30, 1e-4f), 1e-4f);
  EXPECT_EQ(budget_lr(1e-3f, 31, 4, 10, 30, 1e-4f), 1e-4f);
  // Just after decay_start the cosine has barely moved: continuous.
  EXPECT_NEAR(budget_lr(1e-3f, 11, 4, 10, 1000, 0.0f), 1e-3f, 1e-8f);
  // The decay is scheduled_lr's cosine with the warmup replaced by decay_start.
  EXPECT_EQ(budget_lr(1e-3f, 700, 100, 150, 2000, 1e-4f), scheduled_lr(Schedule::COSINE, 1e-3f, 700, 150, 2000, 1e-4f));
  EXPECT_THROW(budget_lr(1e-3f, 0, 4, 10, 30), std::invalid_argument);
  EXPECT_THROW(budget_lr(1e-3f, 5, 4, 3, 30), std::invalid_argument);  // the decay cannot start inside the warmup
}

}  // namespace
}  // namespace tfm::train
