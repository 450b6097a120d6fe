// tests/train/progress_eta_test.cc — the progress events' ETA rests on the steps after a session's first (whose
// warm-up would overstate the run several times over), once those have taken a second: none (−1) before.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.h"
#include "tfm/train/trainer.h"

namespace tfm::train {
namespace {

// Every progress call takes 0.6 s (the run waits for it), so the steps after the first have taken 0.6 s at step 2's
// event and 1.2 s at step 3's: steps 1 and 2 have no ETA, steps 3 to 5 have one, 0 at the last step.
TEST(ProgressEta, WaitsForASecondOfStepsAfterTheFirst) {
  const std::string d = testing::temp_dir("progress_eta");
  TrainConfig c;
  c.task = data::Task::REVERSE;
  c.task_train_size = 64;
  c.task_valid_size = 16;
  c.model.arch = Arch::ENCODER;
  c.model.d_model = 16;
  c.model.nhead = 2;
  c.model.num_encoder_layers = 1;
  c.model.num_decoder_layers = 1;
  c.model.dim_feedforward = 32;
  c.max_steps = 5;
  c.warmup = 1;
  c.batch.batch_size = 16;
  c.out_dir = d + "/run";
  std::vector<std::pair<int64_t, double>> etas;  // (step, eta_seconds) of each step event
  TrainHooks hooks;
  hooks.progress = [&](const ProgressEvent& e) {
    if (e.kind != ProgressEvent::Kind::STEP) return;
    etas.emplace_back(e.step, e.eta_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  };
  run_training(c, hooks);
  ASSERT_EQ(etas.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(etas[static_cast<size_t>(i)].first, i + 1);
  EXPECT_EQ(etas[0].second, -1);  // the first step alone
  EXPECT_EQ(etas[1].second, -1);  // 0.6 s of steps after it
  EXPECT_GT(etas[2].second, 0);   // 1.2 s: two steps left of ~0.6 s each
  EXPECT_LT(etas[2].second, 3);
  EXPECT_GT(etas[3].second, 0);
  EXPECT_EQ(etas[4].second, 0);  // the last step: nothing left
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace tfm::train
