// tests/cli/translate_cmd_test.cc — `tfm translate --sample`: greedy at temperature 0, the same
// output for a seed whatever --batch-size (and so the input chunking) and --threads, and the
// option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

class TranslateSample : public ::testing::Test {
 protected:
  // A seq2seq model trained 20 steps on random word reversals, and 70 input lines (more than one
  // input chunk of translate --batch-size 1, which reads 64 lines at a time).
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("cli_translate"));
    tfm::testing::Rng g(9);
    std::ofstream train(*dir_ + "/train.tsv"), valid(*dir_ + "/valid.tsv"), in(*dir_ + "/in.txt");
    for (int i = 0; i < 120; ++i) {
      std::string w;
      const int len = g.uniform_int(2, 6);
      for (int k = 0; k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
      train << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
      if (i < 70) in << w << '\n';
      if (i < 10) valid << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
    }
    train.close();
    valid.close();
    in.close();
    std::string out;
    ASSERT_EQ(run_command(kCli + " train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/valid.tsv --out " + *dir_ +
                              "/run --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32"
                              " --batch-size 16 --threads 1 --max-steps 20",
                          &out),
              0)
        << out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string translate(const std::string& options) {
    std::string out;
    EXPECT_EQ(run_command("(" + kCli + " translate --model " + *dir_ + "/run " + options + " < " + *dir_ +
                              "/in.txt 2>/dev/null)",
                          &out),
              0)
        << options << "\n" << out;
    return out;
  }
  static std::string* dir_;
};
std::string* TranslateSample::dir_ = nullptr;

TEST_F(TranslateSample, TemperatureZeroIsGreedy) {
  const std::string greedy = translate("");
  EXPECT_EQ(std::count(greedy.begin(), greedy.end(), '\n'), 70);
  EXPECT_EQ(translate("--sample --temperature 0 --seed 4"), greedy);
  EXPECT_EQ(translate("--sample --top-k 1"), greedy);
}

TEST_F(TranslateSample, SeedFixesTheSampleWhateverBatchAndThreads) {
  const std::string a = translate("--sample --seed 5 --temperature 1.5 --threads 2");
  EXPECT_EQ(std::count(a.begin(), a.end(), '\n'), 70);
  EXPECT_EQ(translate("--sample --seed 5 --temperature 1.5 --threads 1 --batch-size 1"), a);
  EXPECT_EQ(translate("--sample --seed 5 --temperature 1.5 --batch-size 7 --top-p 1"), a);
  EXPECT_NE(translate("--sample --seed 6 --temperature 1.5"), a);
  EXPECT_NE(translate("--sample --seed 5 --temperature 1.5"), translate(""));  // an untrained-ish model: flat
}

TEST_F(TranslateSample, Errors) {
  const auto fails = [](const std::string& options, const std::string& message) {
    std::string out;
    const int rc = run_command("(" + kCli + " translate --model " + *dir_ + "/run " + options + " </dev/null)", &out);
    EXPECT_NE(rc, 0) << options;
    EXPECT_NE(out.find(message), std::string::npos) << options << "\n" << out;
  };
  fails("--sample --beam 2", "tfm: error: --sample cannot be used with --beam above 1");
  fails("--sample --top-p 0", "tfm: error: sampling: top_p must be in (0, 1]");
  fails("--sample --temperature -1", "tfm: error: sampling: temperature must be finite and ≥ 0");
  fails("--sample --top-k -1", "tfm: error: sampling: top_k must be ≥ 0");
  fails("--temperature 0.5", "--temperature: needs --sample");
  fails("--seed 3", "--seed: needs --sample");
}

}  // namespace
