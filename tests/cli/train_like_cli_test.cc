// tests/cli/train_like_cli_test.cc — examples/train_like_cli against `tfm train`: the same words after
// `tfm train` (but --out) train the same run, checked on the files a run writes that do not depend on
// the clock: model.safetensors and trainer_state.safetensors byte for byte, and config.json equal but
// for out_dir. One sequence task (reverse, encoder; then both resumed for 10 more steps) and one
// language model (--preset nanogpt-baby on a text written here), each well under a second on one
// thread; then the example's errors.
//
// The example's path comes from tests/CMakeLists.txt (TFM_TRAIN_LIKE_CLI_PATH); without the examples
// (TFM_BUILD_EXAMPLES=OFF) the tests are skipped.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::slurp;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;
#ifdef TFM_TRAIN_LIKE_CLI_PATH
const std::string kExample = TFM_TRAIN_LIKE_CLI_PATH;
#else
const std::string kExample;
#endif

// The clock-free files of runs A (`tfm train`) and B (train_like_cli) are the same.
void expect_same_files(const std::string& a, const std::string& b) {
  for (const char* f : {"model.safetensors", "trainer_state.safetensors"}) {
    const std::string fa = slurp(a + "/" + f), fb = slurp(b + "/" + f);
    EXPECT_FALSE(fa.empty()) << a << "/" << f << " missing or empty";
    EXPECT_TRUE(fa == fb) << f << " differs between `tfm train` (" << fa.size() << " bytes) and train_like_cli ("
                          << fb.size() << " bytes)";
  }
  // The same config: only the output directory differs.
  nlohmann::json ca = nlohmann::json::parse(slurp(a + "/config.json")), cb = nlohmann::json::parse(slurp(b + "/config.json"));
  ASSERT_EQ(ca["train"]["out_dir"], a);
  ASSERT_EQ(cb["train"]["out_dir"], b);
  ca["train"].erase("out_dir");
  cb["train"].erase("out_dir");
  EXPECT_EQ(ca, cb) << "config.json differs beyond out_dir:\n" << ca.dump(2) << "\n---\n" << cb.dump(2);
}

// Runs `tfm train ARGS --out A` and `train_like_cli ARGS --out B` and compares what they wrote; with
// RESUME_ARGS, then resumes both (`--resume DIR RESUME_ARGS`) and compares again.
void expect_same_run(const std::string& args, const std::string& dir, const std::string& resume_args = "") {
  const std::string a = dir + "/cli", b = dir + "/example";
  std::string out;
  ASSERT_EQ(run_command(kCli + " train " + args + " --out " + a, &out), 0) << out;
  ASSERT_EQ(run_command(kExample + " " + args + " --out " + b, &out), 0) << out;
  // The example's own lines: one per evaluation and the final step count.
  EXPECT_NE(out.find("eval step"), std::string::npos) << out;
  EXPECT_NE(out.find("trained "), std::string::npos) << out;
  expect_same_files(a, b);
  if (resume_args.empty()) return;
  const std::string before = slurp(a + "/model.safetensors");
  ASSERT_EQ(run_command(kCli + " train --resume " + a + " " + resume_args, &out), 0) << out;
  ASSERT_EQ(run_command(kExample + " --resume " + b + " " + resume_args, &out), 0) << out;
  EXPECT_NE(out.find("resuming " + b), std::string::npos) << out;
  EXPECT_TRUE(slurp(a + "/model.safetensors") != before) << "the resumed `tfm train` did not train";
  expect_same_files(a, b);
}

TEST(TrainLikeCli, ReverseTaskEncoderSameBytesAsTfmTrain) {
  if (kExample.empty()) GTEST_SKIP() << "examples not built (TFM_BUILD_EXAMPLES=OFF)";
  // Dropout on, so the run's random stream (initialisation, data, dropout) has to match too.
  expect_same_run(
      "--task reverse --arch encoder --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --dropout 0.1 "
      "--batch-size 32 --task-train-size 320 --max-steps 20 --eval-every 10 --threads 1",
      temp_dir("like_cli_reverse"), /*resume_args=*/"--max-steps 30 --threads 1");
}

TEST(TrainLikeCli, LanguageModelPresetSameBytesAsTfmTrain) {
  if (kExample.empty()) GTEST_SKIP() << "examples not built (TFM_BUILD_EXAMPLES=OFF)";
  const std::string dir = temp_dir("like_cli_lm");
  {  // ~3 KB of words over a small alphabet: enough windows of 17 characters for train and validation
    tfm::testing::Rng g(5);
    std::ofstream f(dir + "/text.txt");
    for (int i = 0; i < 600; ++i) {
      const int len = g.uniform_int(1, 6);
      for (int k = 0; k < len; ++k) f << static_cast<char>('a' + g.uniform_int(0, 9));
      f << ((i % 12 == 11) ? '\n' : ' ');
    }
  }
  expect_same_run("--preset nanogpt-baby --text " + dir + "/text.txt --max-steps 10 --block-size 16 --eval-every 5 "
                  "--threads 1",
                  dir);
}

TEST(TrainLikeCli, ErrorsExitOneWithTheLibrarysMessage) {
  if (kExample.empty()) GTEST_SKIP() << "examples not built (TFM_BUILD_EXAMPLES=OFF)";
  std::string out;
  EXPECT_EQ(run_command(kExample + " --task reverse", &out), 1) << out;
  EXPECT_NE(out.find("train_like_cli: error: --out is required"), std::string::npos) << out;
  EXPECT_EQ(run_command(kExample + " --task reverse --out x --frobnicate 3", &out), 1) << out;
  EXPECT_NE(out.find("train_like_cli: error: unknown option --frobnicate"), std::string::npos) << out;
  EXPECT_EQ(run_command(kExample + " --task reverse --out x --d-model", &out), 1) << out;
  EXPECT_NE(out.find("train_like_cli: error: --d-model needs a value"), std::string::npos) << out;
  EXPECT_EQ(run_command(kExample + " --task reverse --text t --out x", &out), 1) << out;
  EXPECT_NE(out.find("train_like_cli: error: --text excludes --task"), std::string::npos) << out;
}

}  // namespace
