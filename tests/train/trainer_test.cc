// tests/train/trainer_test.cc — metrics arithmetic, metrics.csv / curves.svg, and the training loop:
// exact resume, thread-count independence, divergence handling, and a trained model directory.
#include "tfm/train/trainer.h"

#include "tfm/models/model_dir.h"
#include "tfm/train/evaluate.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/file_util.h"
#include "test_util.h"

namespace tfm::train {
namespace {

// ---- the loop (needs the model) ---------------------------------------------------------------------

// A tiny reverse-task run: 7 batches an epoch (200 examples / 32), 40 steps ≈ 6 epochs, dropout on so
// the RNG stream matters, evaluation every 10 steps.
TrainConfig tiny(const std::string& out) {
  TrainConfig c;
  c.task = data::Task::REVERSE;
  c.task_train_size = 200;
  c.task_valid_size = 50;
  c.model.arch = Arch::ENCODER;
  c.model.d_model = 16;
  c.model.nhead = 2;
  c.model.num_encoder_layers = 1;
  c.model.num_decoder_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.dropout = 0.1f;
  c.max_steps = 40;
  c.eval_every = 10;
  c.lr = 3e-3f;
  c.warmup = 5;
  c.clip_norm = 1.0f;
  c.batch.batch_size = 32;
  c.seed = 11;
  c.out_dir = out;
  return c;
}

std::string file(const std::string& dir, const char* name) { return io::read_file(dir + "/" + name); }

TEST(Trainer, InterruptedAndResumedEqualsUninterrupted) {
  const std::string a = testing::temp_dir("train_a"), b = testing::temp_dir("train_b");
  const TrainResult ra = run_training(tiny(a));
  EXPECT_EQ(ra.steps, 40);
  EXPECT_EQ(ra.stop_reason, StopReason::MAX_STEPS);
  ASSERT_EQ(ra.history.size(), 4u);

  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 17; };  // not an evaluation step
  const TrainResult rb1 = run_training(tiny(b), stop);
  EXPECT_TRUE(rb1.interrupted);
  EXPECT_EQ(rb1.steps, 17);
  const TrainResult rb2 = run_training(load_train_config(b), {}, /*resume=*/true);
  EXPECT_EQ(rb2.steps, 40);

  // Bit for bit: the weights file, and every loss in the history.
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "weights differ after resume";
  ASSERT_EQ(rb2.history.size(), ra.history.size());
  for (size_t i = 0; i < ra.history.size(); ++i) {
    EXPECT_EQ(ra.history[i].step, rb2.history[i].step);
    EXPECT_EQ(ra.history[i].train_loss, rb2.history[i].train_loss) << "row " << i;
    EXPECT_EQ(ra.history[i].valid_loss, rb2.history[i].valid_loss) << "row " << i;
  }
  EXPECT_EQ(ra.final_metrics.exact, rb2.final_metrics.exact);
  for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt", "metrics.csv", "curves.svg", "trainer_state.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(a + "/" + f)) << f;
}

TEST(Trainer, SameNumbersForOneAndTwoThreads) {
  const std::string a = testing::temp_dir("thr1"), b = testing::temp_dir("thr2");
  TrainConfig c = tiny(a);
  c.max_steps = 15;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  run_training(c);
  omp_set_num_threads(2);
  c.out_dir = b;
  run_training(c);
  omp_set_num_threads(saved);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "thread count changed the weights";
}

TEST(Trainer, ResumeWithoutCheckpointIsAClearError) {
  const std::string a = testing::temp_dir("nockpt");
  TrainConfig c = tiny(a);
  c.max_steps = 3;
  c.eval_every = 100;
  TrainHooks stop;
  stop.should_stop = [](int64_t) { return false; };
  run_training(c, stop);  // ends normally: one final checkpoint
  std::filesystem::remove(a + "/trainer_state.safetensors");
  try {
    run_training(load_train_config(a), {}, true);
    FAIL() << "resumed without a checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to resume from"), std::string::npos) << e.what();
  }
}

TEST(Trainer, DivergenceNamesTheStepAndSkipGivesUp) {
  const std::string a = testing::temp_dir("diverge");
  TrainConfig c = tiny(a);
  c.lr = 1e30f;  // Adam moves every weight by ≈ lr on the first step: the next loss overflows
  c.clip_norm = 0;
  c.warmup = 0;
  c.schedule = Schedule::CONSTANT;
  try {
    run_training(c);
    FAIL() << "lr 1e30 did not diverge";
  } catch (const TrainingDiverged& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("training diverged at step "), std::string::npos) << m;
    EXPECT_NE(m.find("--skip-nonfinite"), std::string::npos) << m;
    EXPECT_NE(m.find("No checkpoint was written yet"), std::string::npos) << m;
  }
  c.skip_nonfinite = true;
  try {
    run_training(c);
    FAIL() << "skipping never gave up";
  } catch (const TrainingDiverged& e) {
    EXPECT_NE(std::string(e.what()).find("consecutive batches"), std::string::npos) << e.what();
  }
}

TEST(Trainer, LoadedModelTranslatesAndEvaluates) {
  const std::string a = testing::temp_dir("loaded");
  TrainConfig c = tiny(a);
  c.max_steps = 5;
  run_training(c);
  const TrainedModel m = load_model_dir(a);
  EXPECT_EQ(m.model->config().arch, Arch::ENCODER);
  const auto out = translate_lines(m, {"3 1 4", "", "19 18 17 16 15"}, 1, 2);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(std::count(out[0].begin(), out[0].end(), ' '), 2);  // encoder: one token per source token
  EXPECT_EQ(out[1], "");
  EXPECT_THROW(translate_lines(m, {"1 99"}, 1, 2), std::invalid_argument);  // 99 is not a task token
  const Metrics r = evaluate(m, EvalSet{{{"1", "2"}}, {{{"2", "1"}}}}, 1, 4);
  EXPECT_EQ(r.examples, 1);
  EXPECT_EQ(r.reference_tokens, 2);
}

}  // namespace
}  // namespace tfm::train
