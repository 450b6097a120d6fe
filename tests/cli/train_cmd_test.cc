// tests/cli/train_cmd_test.cc — `tfm train`, `tfm eval` and `tfm translate` end to end through the
// executable: a TSV task made here, bad and empty files, SIGINT → checkpoint → resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"
#include "tfm/train/evaluate.h"
#include "tfm/train/text_metrics.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

// A tiny char-level reversal data set: words over "abcde" of length 2..5, target = reversed word.
void write_pairs(const std::string& path, int n, unsigned seed) {
  tfm::testing::Rng g(seed);
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    std::string w;
    const int len = g.uniform_int(2, 5);
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
    f << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
  }
}

const char* kTinySeq2seq =
    " --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --batch-size 16 --threads 1";

TEST(TrainCli, TsvTrainsEvaluatesAndTranslates) {
  const std::string d = temp_dir("cli_tsv");
  write_pairs(d + "/train.tsv", 80, 1);
  write_pairs(d + "/valid.tsv", 10, 2);
  // One source with two accepted targets: eval counts it once.
  { std::ofstream(d + "/valid.tsv", std::ios::app) << "ab\tba\nab\tab\n"; }
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv --out " + d + "/run" +
                            kTinySeq2seq + " --max-steps 30 --eval-every 10",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("validation: sequence accuracy"), std::string::npos) << out;
  for (const char* f : {"config.json", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "metrics.csv", "curves.svg"})
    EXPECT_TRUE(std::filesystem::exists(d + "/run/" + f)) << f;

  ASSERT_EQ(run_command("(" + kCli + " eval --model " + d + "/run --data " + d + "/valid.tsv --json 2>/dev/null)", &out), 0) << out;
  const auto j = nlohmann::json::parse(out);
  for (const char* k :
       {"token_accuracy", "sequence_accuracy", "token_error_rate", "sequence_error_rate", "examples", "bleu", "chrf"})
    EXPECT_TRUE(j.contains(k)) << k << " missing in " << out;
  // 10 random words plus "ab" (listed twice) — fewer if the random words repeat a source.
  EXPECT_LE(j["examples"].get<int>(), 11);
  EXPECT_GE(j["examples"].get<int>(), 2);
  EXPECT_NEAR(j["sequence_accuracy"].get<double>() + j["sequence_error_rate"].get<double>(), 1.0, 1e-12);
  {  // BLEU and chrF score the text translate prints against the file's targets, grouped by source
    const tfm::TrainedModel m = tfm::load_model_dir(d + "/run");
    const tfm::train::EvalSet set = tfm::train::tsv_test_set(m, d + "/valid.tsv", nullptr);
    std::vector<std::string> sources;
    std::vector<std::vector<std::string>> refs;
    for (size_t i = 0; i < set.sources.size(); ++i) {
      sources.push_back(tfm::data::detokenize(set.sources[i], m.src_tokenizer));
      refs.emplace_back();
      for (const auto& r : set.references[i]) refs.back().push_back(tfm::data::detokenize(r, m.tgt_tokenizer));
    }
    const auto hyps = tfm::translate_lines(m, sources, 1, 64);
    EXPECT_EQ(j["bleu"].get<double>(), tfm::train::corpus_bleu(hyps, refs));
    EXPECT_EQ(j["chrf"].get<double>(), tfm::train::corpus_chrf(hyps, refs));
    EXPECT_GT(j["chrf"].get<double>(), 0.0);  // after 30 steps at least some letters are right
  }

  // Characters the model never saw: eval says how many source tokens read <unk>, and how many target tokens the
  // model can never write.
  { std::ofstream(d + "/unseen.tsv") << "ab\tba\nzq\tqz\nqqa\taqq\n"; }
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/run --data " + d + "/unseen.tsv 2>&1", &out), 0) << out;
  EXPECT_NE(out.find(d + "/unseen.tsv: 4 source and 4 target tokens are not in the model's vocabulary, on 2 of 3 "
                         "lines (the first: line 2): a source reads them as <unk>, and a target holding one can never "
                         "be matched"),
            std::string::npos)
      << out;
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/run --data " + d + "/valid.tsv --beam 2", &out), 0) << out;
  EXPECT_NE(out.find("token error rate"), std::string::npos) << out;
  EXPECT_NE(out.find("BLEU"), std::string::npos) << out;
  EXPECT_NE(out.find("chrF2"), std::string::npos) << out;

  ASSERT_EQ(run_command("(printf 'abc\\n\\nedcba\\n' | " + kCli + " translate --model " + d + "/run --batch-size 2 2>/dev/null)",
                        &out),
            0)
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;

  // --dtype bf16 decodes the same sources (bfloat16 matmuls; predictions may differ after 30 steps).
  ASSERT_EQ(run_command("(printf 'abc\\n\\nedcba\\n' | " + kCli + " translate --model " + d + "/run --dtype bf16 2>/dev/null)",
                        &out),
            0)
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  ASSERT_EQ(run_command("(" + kCli + " eval --model " + d + "/run --data " + d + "/valid.tsv --dtype bf16 --json 2>/dev/null)", &out),
            0)
      << out;
  EXPECT_EQ(nlohmann::json::parse(out)["examples"], j["examples"]);
}

TEST(TrainCli, BadTsvLinesAreReportedWithLineNumbers) {
  const std::string d = temp_dir("cli_bad");
  write_pairs(d + "/valid.tsv", 5, 3);
  { std::ofstream(d + "/train.tsv") << "ab\tba\ncd\tdc\n\nno tab\nef\tfe\n"; }
  std::string out;
  const std::string base =
      kCli + " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv --out " + d + "/run" + kTinySeq2seq;
  EXPECT_EQ(run_command(base + " --max-steps 1 --strict", &out), 1) << out;
  EXPECT_NE(out.find("train.tsv:3: blank line"), std::string::npos) << out;
  ASSERT_EQ(run_command(base + " --max-steps 1", &out), 0) << out;
  EXPECT_NE(out.find("train.tsv: skipped 2 of 5 lines (line 3: blank line; line 4: malformed line"), std::string::npos)
      << out;

  { std::ofstream(d + "/empty.tsv"); }
  EXPECT_EQ(run_command(kCli + " train --train " + d + "/empty.tsv --valid " + d + "/valid.tsv --out " + d + "/e", &out), 1);
  EXPECT_NE(out.find("empty.tsv: file is empty"), std::string::npos) << out;
}

// A budgeted run on the test clock (TFM_TEST_SECONDS_PER_STEP: 0.125 s a step, evaluations free): the
// note names the fitted count, the summary says how far from the budget the run ended; --ema outside
// (0, 1) is one line naming the option; --resume with a new --time-budget is refused by name.
TEST(TrainCli, TimeBudgetFitsItsStepsAndEmaIsChecked) {
  const std::string d = temp_dir("cli_budget");
  write_pairs(d + "/train.tsv", 60, 1);
  write_pairs(d + "/valid.tsv", 10, 2);
  const std::string base = kCli + " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq;
  std::string out;
  ASSERT_EQ(run_command("TFM_TEST_SECONDS_PER_STEP=0.125 " + base + " --warmup 5 --time-budget 12.5 --ema 0.99 --out " +
                            d + "/run",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("time budget: 100 steps fit the 5.0 s left"), std::string::npos) << out;
  EXPECT_NE(out.find("trained 100 steps in 12.5 s (time-budget)"), std::string::npos) << out;
  EXPECT_NE(out.find("time budget 12.5 s: training and its evaluations took 12.5 s, 0.0 s (0.0%) within it (100 steps "
                     "fitted to it)"),
            std::string::npos)
      << out;
  EXPECT_EQ(run_command(kCli + " train --resume " + d + "/run --time-budget 20", &out), 1) << out;
  EXPECT_NE(out.find("--time-budget: the run in " + d + "/run fixed its length at 100 steps"), std::string::npos) << out;
  EXPECT_EQ(run_command(base + " --max-steps 1 --ema 1.5 --out " + d + "/bad", &out), 1) << out;
  EXPECT_NE(out.find("ema (--ema) must be a decay in (0, 1)"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

// A budget that runs out before a step count is fixed (a constant schedule fits none): the clock is read before
// each step, so on the test clock (0.125 s a step) the step that starts at 5.0 s is the last, 41 in all; resuming the
// finished run trains nothing and leaves its files as they were.
TEST(TrainCli, SpentTimeBudgetResumesToNothing) {
  const std::string d = temp_dir("cli_budget_spent");
  write_pairs(d + "/train.tsv", 60, 1);
  write_pairs(d + "/valid.tsv", 10, 2);
  std::string out;
  ASSERT_EQ(run_command("TFM_TEST_SECONDS_PER_STEP=0.125 " + kCli + " train --train " + d + "/train.tsv --valid " + d +
                            "/valid.tsv" + kTinySeq2seq + " --warmup 5 --schedule constant --time-budget 5 --out " + d +
                            "/run 2>&1",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("trained 41 steps"), std::string::npos) << out;
  const auto bytes = [&](const char* f) { return tfm::testing::slurp(d + "/run/" + f); };
  const std::string model = bytes("model.safetensors"), metrics = bytes("metrics.csv");
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(run_command("TFM_TEST_SECONDS_PER_STEP=0.125 " + kCli + " train --resume " + d + "/run 2>&1", &out), 0)
        << out;
    EXPECT_NE(out.find("spent its --time-budget already (5.125 of 5 s): nothing to train"), std::string::npos) << out;
    EXPECT_NE(out.find("trained 41 steps"), std::string::npos) << out;
    EXPECT_EQ(bytes("model.safetensors"), model);
    EXPECT_EQ(bytes("metrics.csv"), metrics);
  }
}

// Under mpirun a negative --grad-shards is refused for its range, as one process refuses it, not as a count that
// is no multiple of the processes (which -1 is not of 2).
TEST(TrainCli, NegativeGradShardsUnderMpirunIsARangeError) {
  if (!tfm::train::Comm::available()) GTEST_SKIP() << "tfm was built without MPI (TFM_MPI=OFF): nothing to launch";
  if (run_command("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not on the PATH (openmpi-bin)";
  const std::string d = temp_dir("cli_grad_shards");
  const std::string mpirun =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 2 ";
  std::string out;
  EXPECT_NE(run_command(mpirun + kCli +
                            " train --task reverse --arch encoder --max-steps 1 --threads 1 --grad-shards -1 --out " +
                            d + "/run",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("grad_shards must be ≥ 0 (0: one part per process), got -1"), std::string::npos) << out;
  EXPECT_EQ(out.find("is not a multiple"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(d + "/run/config.json"));
}

TEST(TrainCli, SigintWritesACheckpointAndResumes) {
  const std::string d = temp_dir("cli_sigint");
  const std::string run = d + "/run";
  // Wait for the first evaluation line (the loop is running, the handler installed), then SIGINT.
  const std::string script =
      kCli + " train --task reverse --arch encoder --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 " +
      "--batch-size 32 --max-steps 1000000 --eval-every 5 --threads 1 --out " + run + " 2>" + d + "/err & pid=$!; " +
      "for i in $(seq 600); do grep -q '^eval' " + d + "/err 2>/dev/null && break; sleep 0.1; done; " +
      "kill -INT $pid; wait $pid; echo rc=$?";
  std::string out;
  run_command(script, &out);
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  std::string err;
  run_command("cat " + d + "/err", &err);
  EXPECT_NE(err.find("interrupted (SIGINT) at step"), std::string::npos) << err;
  EXPECT_NE(err.find("resume with: tfm train --resume " + run), std::string::npos) << err;
  EXPECT_TRUE(std::filesystem::exists(run + "/trainer_state.safetensors"));
  // Resume with a shorter length: no further steps, then the final evaluation.
  ASSERT_EQ(run_command(kCli + " train --resume " + run + " --max-steps 1 --threads 1", &out), 0) << out;
  EXPECT_NE(out.find("resuming " + run + " at step"), std::string::npos) << out;
  EXPECT_NE(out.find("validation: sequence accuracy"), std::string::npos) << out;

  ASSERT_EQ(run_command(kCli + " eval --model " + run + " --task reverse --count 40", &out), 0) << out;
  EXPECT_NE(out.find("examples             40"), std::string::npos) << out;
  ASSERT_EQ(run_command("echo '1 2 3' | " + kCli + " translate --model " + run, &out), 0) << out;
}

// docs/errors.md rows for eval/translate options: exit code 1 and exactly one line on stderr,
// "tfm: error: <message>", checked against a model trained for one step on a TSV file (so its
// vocabulary is not the built-in tasks').
class TrainCliErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("cli_errors"));
    write_pairs(*dir_ + "/train.tsv", 20, 4);
    write_pairs(*dir_ + "/valid.tsv", 4, 5);
    std::string out;
    ASSERT_EQ(run_command(kCli + " train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/valid.tsv --out " +
                              *dir_ + "/run" + kTinySeq2seq + " --max-steps 1",
                          &out),
              0)
        << out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  // Runs `tfm <args>` with stdin from /dev/null; expects exit 1, no stdout, one stderr line.
  static void expect_error(const std::string& args, const std::string& message) {
    const std::string err = *dir_ + "/stderr.txt";
    std::string out;
    // The subshell keeps stderr in the file: run_command appends its own 2>&1 outside it.
    const int rc = run_command("(" + kCli + " " + args + " </dev/null 2>" + err + ")", &out);
    EXPECT_EQ(rc, 1) << args << "\nstdout: " << out;
    EXPECT_EQ(out, "") << args;
    EXPECT_EQ(tfm::testing::slurp(err), "tfm: error: " + message + "\n") << args;
  }
  static std::string* dir_;
};
std::string* TrainCliErrors::dir_ = nullptr;

TEST_F(TrainCliErrors, EvalTaskOnAModelTrainedOnTsv) {
  const std::string run = *dir_ + "/run";
  expect_error("eval --model " + run + " --task reverse",
               run + " was not trained on a built-in task (its vocabulary differs)");
}

// A model directory's config.json with a key taken out (nhead sizes no weight: read by default it would
// compute other numbers) or a "train" value of the wrong type: refused, naming the file.
TEST_F(TrainCliErrors, ModelDirectoryConfigMissingAKeyOrHoldingABadTrainValue) {
  namespace fs = std::filesystem;
  std::string out;
  ASSERT_EQ(
      run_command(kCli + " train --task reverse --out " + *dir_ + "/task_run" + kTinySeq2seq + " --max-steps 1", &out),
      0)
      << out;
  for (const char* what : {"no_nhead", "bad_lr", "bad_lr_task"}) {
    const std::string copy = *dir_ + "/" + what;
    fs::remove_all(copy);
    fs::copy(*dir_ + (std::string(what) == "bad_lr_task" ? "/task_run" : "/run"), copy, fs::copy_options::recursive);
    auto j = nlohmann::ordered_json::parse(tfm::testing::slurp(copy + "/config.json"));
    if (std::string(what) == "no_nhead") j["model"].erase("nhead");
    else j["train"]["lr"] = "x";
    std::ofstream(copy + "/config.json") << j.dump(1);
  }
  expect_error("eval --model " + *dir_ + "/no_nhead --data " + *dir_ + "/valid.tsv",
               *dir_ + "/no_nhead/config.json: model config: missing required key 'nhead'");
  // The "train" section is read where eval takes the run's own setting (a task's seed); a file's pairs are scored
  // with the model's settings alone, as tfm translate translates them.
  expect_error("eval --model " + *dir_ + "/bad_lr_task --task reverse --count 5",
               *dir_ + "/bad_lr_task/config.json: train config: 'lr' must be a number, got \"x\"");
  EXPECT_EQ(
      run_command("(" + kCli + " eval --model " + *dir_ + "/bad_lr --data " + *dir_ + "/valid.tsv 2>/dev/null)", &out),
      0)
      << out;
}

// Data words spelled like the padding or sequence marks would be read as those marks (masked out, or a target
// ending early): refused with the file and line, in training and in evaluation.
TEST_F(TrainCliErrors, DataWordsNamedLikeSpecialTokens) {
  tfm::testing::spit(*dir_ + "/marks.tsv", "a b\tb a\nc <eos> d\td <eos> c\n");
  expect_error("train --train " + *dir_ + "/marks.tsv --valid " + *dir_ + "/marks.tsv --src-tokens space --tgt-tokens space "
                   "--out " + *dir_ + "/never_marks" + kTinySeq2seq + " --max-steps 1",
               *dir_ + "/marks.tsv:2: source token '<eos>' is the name of a special token (sequence end), which the model "
                       "would read as that, not as a word of the text");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/never_marks/config.json"));
  tfm::testing::spit(*dir_ + "/words.tsv", "a b\tb a\nc d\td c\n");
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --train " + *dir_ + "/words.tsv --valid " + *dir_ + "/words.tsv --src-tokens space " +
                            "--tgt-tokens space --out " + *dir_ + "/words_run" + kTinySeq2seq + " --max-steps 1",
                        &out),
            0)
      << out;
  tfm::testing::spit(*dir_ + "/pad.tsv", "a <pad>\tb\n");
  expect_error("eval --model " + *dir_ + "/words_run --data " + *dir_ + "/pad.tsv",
               *dir_ + "/pad.tsv:1: source token '<pad>' is the name of a special token (padding), which the model would "
                       "read as that, not as a word of the text");
}

TEST_F(TrainCliErrors, BeamOutOfRange) {
  const std::string run = *dir_ + "/run";
  expect_error("eval --model " + run + " --data " + *dir_ + "/valid.tsv --beam 0", "beam must be ≥ 1, got 0");
  expect_error("eval --model " + run + " --task reverse --beam -2", "beam must be ≥ 1, got -2");
  expect_error("translate --model " + run + " --beam 0", "beam must be ≥ 1, got 0");
  // Wider than decode's bound: refused at once, not run until the memory runs out.
  expect_error("eval --model " + run + " --data " + *dir_ + "/valid.tsv --beam 1000000",
               "beam must be at most 1024, got 1000000");
}

TEST_F(TrainCliErrors, BatchSizeBelowOne) {
  const std::string run = *dir_ + "/run";
  expect_error("translate --model " + run + " --batch-size 0", "--batch-size must be ≥ 1");
  expect_error("translate --model " + run + " --batch-size -3", "--batch-size must be ≥ 1");
}

TEST_F(TrainCliErrors, UnknownTask) {
  expect_error("eval --model " + *dir_ + "/run --task rot13", "unknown task 'rot13' (expected reverse, copy or sort)");
  expect_error("train --task rot13 --out " + *dir_ + "/never",
               "train config: unknown task 'rot13' (expected reverse, copy or sort)");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/never"));
}

// A resumed run keeps its saved settings; an option that would be ignored is refused, by name,
// and the run directory is left as it was.
TEST_F(TrainCliErrors, ResumeRefusesOptionsItWouldIgnore) {
  const std::string run = *dir_ + "/run";
  const std::string before = tfm::testing::slurp(run + "/config.json");
  const std::string head = "--resume continues the run with the settings saved in " + run +
                           "/config.json; only --epochs, --max-steps, --time-budget, --threads, --comm-timeout, --bucket-mb (and --dtype naming "
                           "the run's own) may be given with it (got ";
  expect_error("train --resume " + run + " --lr 0.5", head + "--lr)");
  expect_error("train --resume " + run + " --max-steps 3 --dropout 0.3 --norm-first --threads 1",
               head + "--dropout, --norm-first)");
  expect_error("train --resume " + run + " --task reverse", head + "--task)");
  expect_error("train --resume " + run + " --out " + *dir_ + "/elsewhere", head + "--out)");
  expect_error("train --resume " + run + " --dtype bf16", "--dtype bf16: the run in " + run +
                   " trains in f32 (config.json \"dtype\"); --resume continues in it (start a new run, or "
                   "--init-from its model, to change it)");
  expect_error("train --resume " + run + " --dtype int8",  // not the advice above: int8 trains nothing
               "train config: dtype (--dtype) int8 is for inference (eval, translate, generate, forward, bench --mode "
               "infer); train in f32 or bf16");
  EXPECT_EQ(tfm::testing::slurp(run + "/config.json"), before);
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/elsewhere"));
}

TEST_F(TrainCliErrors, InitFromRefusesModelOptions) {
  const std::string run = *dir_ + "/run";
  const std::string data = " --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/valid.tsv --out " + *dir_ + "/tuned";
  const std::string head = "--init-from takes the model (and its tokenizations) from the model directory; only "
                           "--dropout and --drop-path of the model options may be given with it (got ";
  expect_error("train --init-from " + run + data + " --d-model 8", head + "--d-model)");
  expect_error("train --init-from " + run + data + " --dropout 0 --arch encoder --no-qkv-bias --src-tokens space",
               head + "--src-tokens, --arch, --qkv-bias)");
  expect_error(
      "train --init-from " + run + " --preset nanogpt-baby --text " + *dir_ + "/train.tsv --out " + *dir_ + "/tuned",
      head + "--preset, which sets the model's options)");
  expect_error("train --resume " + run + " --init-from " + run,
               "--resume continues the run with the settings saved in " + run +
                   "/config.json; only --epochs, --max-steps, --time-budget, --threads, --comm-timeout, --bucket-mb (and --dtype naming the "
                   "run's own) may be given with it (got --init-from)");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/tuned"));
}

TEST_F(TrainCliErrors, TranslateSourceLongerThanMaxLen) {
  // The tiny model keeps the default max_len 512; line 2 has 600 characters (char-level tokens).
  const std::string err = *dir_ + "/stderr.txt";
  std::string out;
  const std::string line2(600, 'a');
  const int rc = run_command(
      "(printf 'ab\\n" + line2 + "\\n' | " + kCli + " translate --model " + *dir_ + "/run 2>" + err + ")", &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(tfm::testing::slurp(err),
            "tfm: error: input line 2: 600 source tokens, more than the model's max_len 512\n");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "line 1's translation is printed first: " << out;
  // The same for a line that is not UTF-8, after three good ones in one chunk: their translations come first.
  EXPECT_EQ(run_command("(printf 'ab\\nba\\nabc\\na\\377b\\nab\\n' | " + kCli + " translate --model " + *dir_ +
                            "/run 2>" + err + ")",
                        &out),
            1);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  EXPECT_NE(tfm::testing::slurp(err).find("tfm: error: input line 4: "), std::string::npos) << tfm::testing::slurp(err);
}

// A fresh run into another run's directory would mix the two: refused, naming it, and the run is left as it
// was; --force replaces that run whole (here a TSV run by a language model: its src_vocab.txt goes too), once
// the new run writes its first checkpoint.
// An --out no file can be written in is refused before training, not at the first checkpoint after it
// (sysfs: no new files even for root).
TEST_F(TrainCliErrors, OutWhereNothingCanBeWrittenIsRefusedAtOnce) {
  if (!std::filesystem::is_directory("/sys/kernel")) GTEST_SKIP() << "no /sys";
  expect_error("train --task reverse --out /sys/kernel --max-steps 1 --threads 1",
               "/sys/kernel: cannot write files there (Permission denied)");
}

// An --out that cannot be a directory is said to be so, before anything is made: a file, a symbolic link to a
// directory that does not exist (named), a path under a file.
TEST_F(TrainCliErrors, OutThatCannotBeADirectoryIsRefusedByName) {
  const std::string afile = *dir_ + "/afile", link = *dir_ + "/dangling";
  tfm::testing::spit(afile, "x");
  std::filesystem::create_symlink("nowhere/dir", link);
  const std::string args = " --max-steps 1 --threads 1";
  expect_error("train --task reverse --out " + afile + args,
               afile +
                   ": cannot make the directory (Not a directory: a file of that name exists); choose another "
                   "output directory");
  expect_error("train --task reverse --out " + link + args,
               link +
                   ": cannot make the directory (No such file or directory: it is a symbolic link to 'nowhere/dir', "
                   "which does not exist); make that directory first, or choose another output directory");
  expect_error("train --task reverse --out " + afile + "/run" + args,
               afile + "/run: cannot make the directory (Not a directory: " + afile + " is a file)");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/nowhere"));
  std::filesystem::remove(afile);
  std::filesystem::remove(link);
}

TEST_F(TrainCliErrors, OutHoldingARunIsRefusedUnlessForced) {
  namespace fs = std::filesystem;
  const std::string run = *dir_ + "/run", copy = *dir_ + "/forced";
  const std::string model = tfm::testing::slurp(run + "/model.safetensors");
  expect_error("train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/valid.tsv --out " + run + kTinySeq2seq +
                   " --max-steps 1",
               "--out " + run + " holds a run or model already (" + run +
                   "/model.safetensors): continue a run with --resume " + run +
                   ", train into another --out, or give --force to delete it and start over");
  EXPECT_EQ(tfm::testing::slurp(run + "/model.safetensors"), model);
  fs::copy(run, copy, fs::copy_options::recursive);
  ASSERT_TRUE(fs::exists(copy + "/src_vocab.txt"));
  std::string out;
  // A forced run that fails before its first checkpoint (here its task set cannot be allocated) leaves the
  // run it would have replaced whole: the directory changes with the new run's first checkpoint.
  EXPECT_EQ(run_command(kCli + " train --task reverse --task-train-size 1000000000000 --out " + copy +
                            " --force --max-steps 1 --threads 1",
                        &out),
            1)
      << out;
  EXPECT_EQ(tfm::testing::slurp(copy + "/model.safetensors"), model);
  EXPECT_TRUE(fs::exists(copy + "/src_vocab.txt") && fs::exists(copy + "/trainer_state.safetensors"));
  ASSERT_EQ(run_command(kCli + " train --text " + *dir_ + "/train.tsv --out " + copy + " --force --d-model 16 --nhead 2 " +
                            "--layers 1 --dim-feedforward 32 --block-size 8 --batch-size 4 --max-steps 1 --threads 1",
                        &out),
            0)
      << out;
  EXPECT_FALSE(fs::exists(copy + "/src_vocab.txt")) << "the replaced run's files are deleted";
  EXPECT_TRUE(fs::exists(copy + "/src_vocab.json"));  // (the trainer's own deletion of the old run: Trainer.FreshRunDeletesTheFilesOfTheRunItReplaces)
  EXPECT_EQ(nlohmann::json::parse(tfm::testing::slurp(copy + "/config.json"))["model"]["arch"], "decoder");
}

// What a fresh run would delete decides the refusal, not config.json alone: a run stopped before its first
// checkpoint leaves its description only (nothing to resume, nothing to lose), and a new run takes the directory;
// a best/ model without a config is refused, and kept; --resume of a directory holding no run says so.
TEST_F(TrainCliErrors, OutIsRefusedForWhatTheRunWouldDeleteOnly) {
  namespace fs = std::filesystem;
  const std::string stopped = *dir_ + "/stopped", best = *dir_ + "/best_only", empty = *dir_ + "/empty";
  fs::create_directories(stopped);
  for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt"})  // what describe() writes for this run
    fs::copy_file(*dir_ + "/run/" + f, stopped + "/" + f);
  const std::string train = " --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/valid.tsv" + kTinySeq2seq;
  expect_error("train --resume " + stopped,
               stopped +
                   "/trainer_state.safetensors: no checkpoint to resume from (the run stopped before its first "
                   "checkpoint was whole; start it again without --resume)");
  { std::ofstream(stopped + "/.tgt_vocab.txt.tmp.123") << "half"; }  // a kill while describe() wrote
  std::string out;
  EXPECT_EQ(run_command(kCli + " train" + train + " --max-steps 1 --out " + stopped, &out), 0) << out;
  EXPECT_TRUE(fs::exists(stopped + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(stopped + "/.tgt_vocab.txt.tmp.123")) << "a fresh run removes what a killed one left";
  // A kill inside the first checkpoint: the weights, not the state (renamed last). --resume says --force, and a
  // fresh run does not offer --resume.
  fs::remove(stopped + "/trainer_state.safetensors");
  expect_error("train --resume " + stopped,
               stopped +
                   "/trainer_state.safetensors: no checkpoint to resume from (the run stopped before its first "
                   "checkpoint was whole; start it again without --resume, with --force: " +
                   stopped + "/model.safetensors is left from that unfinished checkpoint)");
  expect_error("train" + train + " --max-steps 1 --out " + stopped,
               "--out " + stopped + " holds a run or model already (" + stopped +
                   "/model.safetensors): train into another --out, or give --force to delete it and start over");
  // A model directory (a run's best/, an import: no clock, no state) is no run to resume or to --force over.
  fs::remove(stopped + "/trainer_clock.json");
  expect_error("train --resume " + stopped,
               stopped + "/trainer_state.safetensors: no checkpoint to resume from: " + stopped +
                   " holds a model, not a run (train from it with --init-from " + stopped + ")");
  // Fine-tuning into the model directory it starts from: said before the directory's refusal (which would offer
  // --resume of the source).
  expect_error("train --init-from " + *dir_ + "/run --train " + *dir_ + "/train.tsv --valid " + *dir_ +
                   "/valid.tsv --max-steps 1 --out " + *dir_ + "/run",
               "train config: out_dir " + *dir_ +
                   "/run is the init_from directory; a fine-tuning run writes into a "
                   "new directory (its source stays as it is)");
  fs::create_directories(best + "/best");
  { std::ofstream(best + "/best/notes.txt") << "mine\n"; }
  expect_error("train" + train + " --max-steps 1 --out " + best,
               "--out " + best + " holds a run or model already (" + best +
                   "/best): train into another --out, or give --force to delete it and start over");
  EXPECT_EQ(tfm::testing::slurp(best + "/best/notes.txt"), "mine\n");
  fs::create_directories(empty);
  expect_error("train --resume " + empty, "--resume " + empty + ": no run to resume there (no " + empty +
                                              "/config.json; a run writes it with its first checkpoint)");
}

// Thread counts, task counts and seeds out of range: one line each, nothing run.
TEST_F(TrainCliErrors, CountsOutOfRange) {
  const std::string run = *dir_ + "/run";
  const std::string threads = "--threads must be in [0, 1024] (0: OMP_NUM_THREADS, else every core), got ";
  expect_error("translate --model " + run + " --threads 100000", threads + "100000");
  expect_error("eval --model " + run + " --data " + *dir_ + "/valid.tsv --threads -3", threads + "-3");
  expect_error("train --task reverse --out " + *dir_ + "/never --threads 5000", threads + "5000");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/never"));
  // Train's integers are the option table's to check, as in Python: one message, and before the other checks.
  expect_error("train --task reverse --out " + *dir_ + "/never --max-steps 99999999999999999999",
               "train config: --max-steps must be an integer in range, got '99999999999999999999'");
  expect_error("train --task reverse --out " + *dir_ + "/never --seed 18446744073709551616",
               "train config: --seed must be an integer in range, got '18446744073709551616'");
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/never"));
  expect_error("eval --model " + run + " --task reverse --count 0", "count (--count) must be ≥ 1 task sequences, got 0");
  const std::string err = *dir_ + "/stderr.txt";
  std::string out;
  EXPECT_NE(run_command("(" + kCli + " translate --model " + run + " --sample --seed -1 </dev/null 2>" + err + ")", &out), 0);
  EXPECT_EQ(tfm::testing::slurp(err),
            "tfm: error: --seed: must be a non-negative integer, got -1 (tfm --help, tfm <command> --help)\n");
  EXPECT_NE(run_command("(" + kCli + " bogus 2>" + err + ")", &out), 0);
  EXPECT_EQ(tfm::testing::slurp(err).rfind("tfm: error: unknown command 'bogus' (the commands: forward, train,", 0), 0u)
      << tfm::testing::slurp(err);
}

TEST_F(TrainCliErrors, EvalBatchSizeBelowOne) {
  expect_error("eval --model " + *dir_ + "/run --data " + *dir_ + "/valid.tsv --batch-size 0",
               "--batch-size must be ≥ 1");
}

// `tfm train --task reverse` trains the library's preset: the CLI holds no defaults of its own. Options
// given still apply, and every boolean option has its negative form.
TEST(TrainCli, TaskRunIsTheLibrarysPresetPlusTheOptionsGiven) {
  const std::string d = temp_dir("cli_preset");
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --task reverse --arch seq2seq --out " + d + "/a --max-steps 2 --threads 1" +
                            " --task-train-size 64 --norm-first --tie-embeddings --no-tie-embeddings --d-model 32",
                        &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(tfm::testing::slurp(d + "/a/config.json"));
  tfm::train::TrainConfig expect = tfm::train::task_preset(tfm::data::Task::REVERSE, tfm::Arch::SEQ2SEQ);
  expect.task_train_size = 64;
  expect.max_steps = 2;
  expect.model.norm_first = true;
  expect.model.d_model = 32;
  const tfm::train::TrainConfig got = tfm::train::TrainConfig::from_json(j.at("train").dump());
  const tfm::ModelConfig model = tfm::ModelConfig::from_json(j.at("model").dump());
  EXPECT_EQ(got.lr, expect.lr);
  EXPECT_EQ(got.warmup, expect.warmup);
  EXPECT_EQ(got.clip_norm, expect.clip_norm);
  EXPECT_EQ(got.schedule, expect.schedule);
  EXPECT_EQ(got.batch.batch_size, expect.batch.batch_size);
  EXPECT_EQ(got.max_steps, expect.max_steps);
  EXPECT_EQ(got.epochs, expect.epochs);
  EXPECT_EQ(got.task_train_size, expect.task_train_size);
  EXPECT_EQ(model.arch, expect.model.arch);
  EXPECT_EQ(model.d_model, expect.model.d_model);
  EXPECT_EQ(model.nhead, expect.model.nhead);
  EXPECT_EQ(model.num_encoder_layers, expect.model.num_encoder_layers);
  EXPECT_EQ(model.num_decoder_layers, expect.model.num_decoder_layers);
  EXPECT_EQ(model.dim_feedforward, expect.model.dim_feedforward);
  EXPECT_EQ(model.dropout, expect.model.dropout);
  EXPECT_EQ(model.activation, expect.model.activation_value());  // saved resolved
  EXPECT_EQ(model.norm_first, true);
  EXPECT_EQ(model.tie_embeddings, false);  // --no-tie-embeddings came last
}

// Every layer-variant option sets its ModelConfig field (both forms of each flag; the last one given
// wins), the trained directory loads for eval and translate (a seq2seq with learned positions decodes
// through the cache), and an option not given leaves the field unset (null in config.json).
TEST(TrainCli, LayerVariantOptionsReachTheModelConfig) {
  const std::string d = temp_dir("cli_variants");
  std::string out;
  const std::string common = " --task reverse --max-steps 2 --threads 1 --task-train-size 64 --d-model 16 --nhead 2"
                             " --layers 2 --dim-feedforward 32 --batch-size 16";
  ASSERT_EQ(run_command(kCli + " train" + common + " --arch encoder --out " + d + "/enc" +
                            " --head-dim 12 --v-head-dim 6 --no-bias --qkv-bias --no-out-bias --ffn-bias"
                            " --no-norm-bias --norm-bias --no-norm-bias --attn-scale 0.25 --norm-type layer_norm"
                            " --share-layers --drop-path 0.1 --positional learned --scale-embeddings",
                        &out),
            0)
      << out;
  auto model_of = [&](const std::string& run) {
    const auto j = nlohmann::json::parse(tfm::testing::slurp(d + "/" + run + "/config.json"));
    return tfm::ModelConfig::from_json(j.at("model").dump());
  };
  const tfm::ModelConfig e = model_of("enc");
  EXPECT_EQ(e.attention.head_dim, 12);
  EXPECT_EQ(e.attention.v_head_dim, 6);
  EXPECT_FALSE(e.bias);
  EXPECT_EQ(e.attention.qkv_bias, true);
  EXPECT_EQ(e.attention.out_bias, false);
  EXPECT_EQ(e.ffn_bias, true);
  EXPECT_EQ(e.norm_bias, false);  // --no-norm-bias came last
  EXPECT_EQ(e.attention.attn_scale, 0.25f);
  EXPECT_EQ(e.norm_type, tfm::NormType::LAYER_NORM);
  EXPECT_TRUE(e.share_layers);
  EXPECT_FLOAT_EQ(e.drop_path, 0.1f);
  EXPECT_EQ(e.positional, tfm::Positional::LEARNED);
  EXPECT_EQ(e.scale_embeddings, true);
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/enc --task reverse --count 8", &out), 0) << out;

  ASSERT_EQ(run_command(kCli + " train" + common + " --arch seq2seq --out " + d + "/s2s --positional learned"
                            " --no-scale-embeddings --no-qkv-bias --no-out-bias --norm-first --norm-type rms_norm --share-layers",
                        &out),
            0)
      << out;
  const tfm::ModelConfig s = model_of("s2s");
  EXPECT_EQ(s.positional, tfm::Positional::LEARNED);
  EXPECT_EQ(s.scale_embeddings, false);
  EXPECT_EQ(s.attention.qkv_bias, false);
  EXPECT_EQ(s.attention.out_bias, false);
  EXPECT_FALSE(s.attention.head_dim || s.attention.v_head_dim || s.ffn_bias || s.norm_bias || s.attention.attn_scale);  // not given: unset
  EXPECT_TRUE(s.bias);
  EXPECT_EQ(s.norm_type, tfm::NormType::RMS_NORM);
  EXPECT_TRUE(s.share_layers);
  EXPECT_EQ(s.drop_path, 0.0f);
  ASSERT_EQ(run_command("echo '1 2 3' | " + kCli + " translate --model " + d + "/s2s --beam 2", &out), 0) << out;
  ASSERT_EQ(run_command("echo '1 2 3' | " + kCli + " translate --model " + d + "/s2s --dtype bf16", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/s2s --task reverse --count 8", &out), 0) << out;

  // A bad value names its option's key.
  EXPECT_EQ(run_command(kCli + " train" + common + " --arch encoder --out " + d + "/bad --head-dim 0", &out), 1);
  EXPECT_NE(out.find("head_dim"), std::string::npos) << out;
  EXPECT_EQ(run_command(kCli + " train" + common + " --arch encoder --out " + d + "/bad --positional rope", &out), 1);
  EXPECT_NE(out.find("rope"), std::string::npos) << out;
  EXPECT_EQ(run_command(kCli + " train" + common + " --arch encoder --out " + d + "/bad --norm-type rms_norm --norm-bias",
                        &out),
            1);
  EXPECT_NE(out.find("norm_bias"), std::string::npos) << out;
  std::filesystem::remove_all(d);
}

// A small text for the language-model runs: sentences over a few words.
void write_text(const std::string& path, int sentences, unsigned seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog"};
  tfm::testing::Rng g(seed);
  std::ofstream f(path);
  for (int i = 0; i < sentences; ++i) {
    const int n = g.uniform_int(3, 6);
    for (int k = 0; k < n; ++k) f << (k ? " " : "") << words[g.uniform_int(0, 7)];
    f << ".\n";
  }
}

const char* kTinyLm = " --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --batch-size 8 --threads 1";

// --preset nanogpt-baby is train::preset_config's recipe; options given still apply on top of it.
TEST(TrainCli, NanogptBabyPresetIsTheLibrarysRecipePlusTheOptionsGiven) {
  const std::string d = temp_dir("cli_preset");
  write_text(d + "/t.txt", 40, 4);
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --preset nanogpt-baby --text " + d + "/t.txt --block-size 16 --max-steps 2 " +
                            "--eval-every 2 --threads 1 --out " + d + "/run",
                        &out),
            0)
      << out;
  const auto config = nlohmann::json::parse(tfm::testing::slurp(d + "/run/config.json"));
  const tfm::train::TrainConfig p = tfm::train::preset_config(tfm::train::Preset::NANOGPT_BABY);
  EXPECT_EQ(config["model"]["arch"], "decoder");
  EXPECT_EQ(config["model"]["d_model"], p.model.d_model);
  EXPECT_EQ(config["model"]["num_decoder_layers"], p.model.num_decoder_layers);
  EXPECT_EQ(config["model"]["num_encoder_layers"], 0);  // a language model has no encoder
  EXPECT_EQ(config["model"]["nhead"], p.model.nhead);
  EXPECT_EQ(config["model"]["dim_feedforward"], p.model.dim_feedforward);
  EXPECT_EQ(config["model"]["bias"], false);
  EXPECT_EQ(config["train"]["optimizer"], "adamw");
  EXPECT_FLOAT_EQ(config["train"]["lr"].get<float>(), p.lr);
  EXPECT_FLOAT_EQ(config["train"]["min_lr"].get<float>(), p.min_lr);
  EXPECT_FLOAT_EQ(config["train"]["beta2"].get<float>(), 0.99f);
  EXPECT_FLOAT_EQ(config["train"]["weight_decay"].get<float>(), 0.1f);
  EXPECT_EQ(config["train"]["decay_params"], "matrices");
  EXPECT_EQ(config["train"]["batch_size"], 12);
  EXPECT_EQ(config["train"]["block_size"], 16);  // given: overrides the preset's 64
  EXPECT_EQ(config["train"]["max_steps"], 2);    // given: replaces the preset's 2000
  EXPECT_NE(run_command(kCli + " train --preset nanogpt-baby --out " + d + "/x", &out), 0);
  EXPECT_NE(out.find("--preset requires --text"), std::string::npos) << out;
  EXPECT_NE(run_command(kCli + " train --preset gpt-9 --text " + d + "/t.txt --out " + d + "/y", &out), 0);
  EXPECT_NE(out.find("unknown preset 'gpt-9' (expected nanogpt-baby)"), std::string::npos) << out;
}

TEST(TrainCli, LanguageModelTrainsOnTextAndResumes) {
  const std::string d = temp_dir("cli_lm");
  write_text(d + "/t.txt", 80, 1);
  write_text(d + "/v.txt", 10, 2);
  std::string out;
  // No --arch: text data trains a decoder.
  ASSERT_EQ(run_command(kCli + " train --text " + d + "/t.txt --valid-text " + d + "/v.txt --tokens char --block-size 16" +
                            kTinyLm + " --max-steps 20 --eval-every 10 --out " + d + "/run",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("validation: loss "), std::string::npos) << out;
  EXPECT_NE(out.find("bits per token"), std::string::npos) << out;
  EXPECT_NE(out.find("| val loss "), std::string::npos) << out;  // the eval line
  for (const char* f : {"config.json", "model.safetensors", "src_vocab.json", "tgt_vocab.json", "metrics.csv", "curves.svg"})
    EXPECT_TRUE(std::filesystem::exists(d + "/run/" + f)) << f;
  const auto config = nlohmann::json::parse(tfm::testing::slurp(d + "/run/config.json"));
  EXPECT_EQ(config["model"]["arch"], "decoder");
  EXPECT_EQ(config["model"]["max_len"], 16);
  EXPECT_EQ(config["train"]["text_path"], d + "/t.txt");
  EXPECT_EQ(config["train"]["block_size"], 16);
  EXPECT_EQ(config["vocab"]["tgt"], "tgt_vocab.json");
  EXPECT_EQ(config["vocab"]["tgt_tokens"], "char");
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/run --max-steps 25", &out), 0) << out;
  EXPECT_NE(out.find("resuming " + d + "/run at step 20"), std::string::npos) << out;
  {  // a text holds no <eos>: the model never learned it, and never draws it
    const tfm::TrainedModel m = tfm::load_model_dir(d + "/run");
    const std::vector<int32_t> never = tfm::never_generated(m);
    EXPECT_NE(std::find(never.begin(), never.end(), m.tgt_vocab.eos_id()), never.end());
  }
  // Characters the training text never had read as <unk>: eval says how many (the JSON too).
  { std::ofstream(d + "/greek.txt") << "the cat \u03b1\u03b2 sat.\n"; }
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/run --text " + d + "/greek.txt --json 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("tfm: note: " + d + "/greek.txt: 2 tokens are not in the model's vocabulary, read as <unk>"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\"unknown_tokens\":2"), std::string::npos) << out;
  // Another validation text under the same name: refused, naming the file (its losses are compared across the run).
  const std::string valid = tfm::testing::slurp(d + "/v.txt");
  write_text(d + "/v.txt", 10, 4);
  EXPECT_EQ(run_command(kCli + " train --resume " + d + "/run --max-steps 30", &out), 1) << out;
  EXPECT_NE(out.find(d + "/v.txt: not the validation text this run started with"), std::string::npos) << out;
  tfm::testing::spit(d + "/v.txt", valid);
  // Another text under the same name: refused, naming the file.
  write_text(d + "/t.txt", 80, 3);
  EXPECT_EQ(run_command(kCli + " train --resume " + d + "/run --max-steps 30", &out), 1) << out;
  EXPECT_NE(out.find(d + "/t.txt: not the training text this run started with"), std::string::npos) << out;
  // A validation text with characters the training text lacks: the run says how many read as <unk>.
  { std::ofstream(d + "/v2.txt") << tfm::testing::slurp(d + "/v.txt") << "\u03b1\u03b2\u03b3 the cat.\n"; }
  ASSERT_EQ(
      run_command(kCli + " train --text " + d + "/t.txt --valid-text " + d + "/v2.txt --tokens char --block-size 16" +
                      kTinyLm + " --max-steps 2 --out " + d + "/unk 2>&1",
                  &out),
      0)
      << out;
  EXPECT_NE(out.find(d + "/v2.txt: 3 of its "), std::string::npos) << out;
  EXPECT_NE(out.find(" tokens are not in the vocabulary and read as <unk>"), std::string::npos) << out;
  // Byte tokens, a held-out fraction, sequential windows.
  ASSERT_EQ(run_command(kCli + " train --text " + d + "/v.txt --valid-fraction 0.25 --tokens byte --block-size 8 --sequential" +
                            kTinyLm + " --max-steps 3 --out " + d + "/bytes",
                        &out),
            0)
      << out;
  const auto bytes = nlohmann::json::parse(tfm::testing::slurp(d + "/bytes/config.json"));
  EXPECT_EQ(bytes["vocab"]["tgt_size"], 259);
  EXPECT_EQ(bytes["train"]["sequential"], true);
  EXPECT_EQ(bytes["train"]["valid_fraction"], 0.25);
}

TEST(TrainCli, TextOptionErrors) {
  const std::string d = temp_dir("cli_lm_err");
  write_text(d + "/t.txt", 20, 1);
  { std::ofstream(d + "/bad.txt") << "ok\n\xC3("; }
  const std::string t = " --out " + d + "/x --threads 1";
  const auto fails = [&](const std::string& args, const std::string& message) {
    std::string out;
    EXPECT_NE(run_command(kCli + " train " + args + t, &out), 0) << args;
    EXPECT_NE(out.find(message), std::string::npos) << args << ": " << out;
  };
  fails("--text " + d + "/t.txt --task reverse", "--text excludes --task");
  fails("--text " + d + "/t.txt --train a.tsv --valid b.tsv", "--train excludes --text");
  fails("--task reverse --valid-text " + d + "/t.txt", "--valid-text requires --text");
  fails("--text " + d + "/t.txt --valid-text " + d + "/t.txt --valid-fraction 0.2", "--valid-text excludes --valid-fraction");
  fails("--task reverse --block-size 8", "--block-size requires --text");
  fails("--task reverse --sequential", "--sequential requires --text");
  fails("--task reverse --token-cache " + d + "/c", "--token-cache requires --text");
  fails("--text " + d + "/t.txt --tokens char --tgt-tokens char", "excludes");
  fails("--text " + d + "/t.txt --tokens space", "train config: tgt_tokens must be char or byte for text data (not space)");
  fails("--text " + d + "/t.txt --arch encoder", "train config: arch must be decoder for text data");
  fails("--task reverse --arch decoder", "train config: text_path is required by arch decoder");
  fails("--text " + d + "/t.txt --valid-fraction 1",
        "train config: valid_fraction must be in (0, 1) when there is no validation text, got 1");
  fails("--text " + d + "/t.txt --block-size 0", "train config: block_size must be ≥ 1, got 0");
  fails("--text " + d + "/t.txt --batch-tokens 64", "train config: batch_tokens does not apply to text data");
  fails("--text " + d + "/t.txt --block-size 100000", "tokens, too few for one window of block_size + 1 = 100001 tokens");
  fails("--text " + d + "/bad.txt --valid-text " + d + "/t.txt", d + "/bad.txt: invalid UTF-8 at byte 3");
  fails("--text " + d + "/none.txt", d + "/none.txt: ");
  std::string out;
  EXPECT_NE(run_command(kCli + " train --out " + d + "/y", &out), 0);
  EXPECT_NE(out.find("--task or --train/--valid or --text is required"), std::string::npos) << out;
  ASSERT_EQ(run_command(kCli + " train --help", &out), 0);
  for (const char* opt : {"--text", "--valid-text", "--valid-fraction", "--block-size", "--sequential", "--tokens", "--token-cache"})
    EXPECT_NE(out.find(opt), std::string::npos) << opt;
}

TEST(TrainCli, HelpHasExamples) {
  for (const char* cmd : {"train", "eval", "translate"}) {
    std::string out;
    EXPECT_EQ(run_command(kCli + " " + cmd + " --help", &out), 0) << cmd;
    EXPECT_NE(out.find("Example"), std::string::npos) << cmd << ": " << out;
  }
}

}  // namespace
