// tests/cli/eval_cmd_test.cc — `tfm eval --data` scores the whole file: every line the model can take whatever the
// training's --max-tokens, the lines it skips (a source longer than the model's max_len among them) counted
// ("skipped" in --json and in train::evaluate's Metrics, "skipped lines" in the text report) or refused with
// --strict; its notes count the target tokens the vocabulary lacks, and quote a target an spm tokenizer changes so
// that the change is seen (and leave out changes of whitespace only, which BLEU and chrF do not see).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "tfm/data/tokenizer.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/evaluate.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

class EvalData : public ::testing::Test {
 protected:
  // A char seq2seq model trained 20 steps on word reversals of 2 to 6 letters a–e, with --max-tokens 8.
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("cli_eval"));
    tfm::testing::Rng g(5);
    std::ofstream train(*dir_ + "/train.tsv");
    for (int i = 0; i < 120; ++i) {
      std::string w;
      const int len = g.uniform_int(2, 6);
      for (int k = 0; k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
      train << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
    }
    train.close();
    std::string out;
    ASSERT_EQ(
        run_command(kCli + " train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/train.tsv --out " + *dir_ +
                        "/run --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32"
                        " --batch-size 16 --threads 1 --max-steps 20 --max-tokens 8",
                    &out),
        0)
        << out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  // Runs `cmd` (a shell command) with stdout and stderr apart; returns the exit status.
  static int run_split(const std::string& cmd, std::string* out, std::string* err) {
    const std::string err_file = *dir_ + "/stderr.txt";
    const int rc = run_command("((" + cmd + ") 2>" + err_file + ")", out);
    *err = tfm::testing::slurp(err_file);
    return rc;
  }
  static std::string* dir_;
};
std::string* EvalData::dir_ = nullptr;

// Pairs longer than the training's --max-tokens 8 (a 12-letter pair, a 300-letter target) are scored: the model
// (max_len 512) takes their sources, as tfm translate does. The line without a tab is skipped, noted and counted,
// the same in --json, the text report and train::evaluate's figures (Python's evaluate() returns that JSON).
TEST_F(EvalData, ScoresEveryLineWhateverTheTrainingsMaxTokensAndCountsTheSkipped) {
  const std::string f = *dir_ + "/long.tsv";
  std::ofstream(f) << "abc\tcba\n"
                   << "abcdeabcdeab\tbaedcbaedcba\n"
                   << "ab\t" << std::string(300, 'a') << "\n"
                   << "no tab on this line\n";
  const std::string eval = kCli + " eval --model " + *dir_ + "/run --data " + f + " --threads 1";
  std::string out, err;
  ASSERT_EQ(run_split(eval + " --json", &out, &err), 0) << err;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(out);
  EXPECT_EQ(j["examples"].get<int64_t>(), 3) << out;
  ASSERT_TRUE(j.contains("skipped")) << out;
  EXPECT_EQ(j["skipped"].get<int64_t>(), 1) << out;
  EXPECT_NE(err.find(f + ": skipped 1 of 4 lines (line 4: malformed line: no tab between source and target)\n"),
            std::string::npos)
      << err;
  {
    const tfm::TrainedModel m = tfm::load_model_dir(*dir_ + "/run");
    std::string note;
    const tfm::train::EvalSet set = tfm::train::tsv_test_set(m, f, &note);
    EXPECT_EQ(set.sources.size(), 3u);
    EXPECT_EQ(set.skipped, 1);
    EXPECT_EQ(set.references[2][0].size(), 300u);
    const tfm::train::Metrics r =
        tfm::train::evaluate(m, set, tfm::DecodeOptions{}, 64,
                             [&](const tfm::data::Tokens& t) { return tfm::data::detokenize(t, m.tgt_tokenizer); });
    EXPECT_EQ(r.skipped, 1);
    EXPECT_EQ(j.dump(), r.to_json());
  }
  ASSERT_EQ(run_split(eval, &out, &err), 0) << err;
  EXPECT_NE(out.find("examples             3\nskipped lines        1\n"), std::string::npos) << out;
  // A file without a bad line: 0.
  std::ofstream(*dir_ + "/clean.tsv") << "abc\tcba\n";
  ASSERT_EQ(run_split(kCli + " eval --model " + *dir_ + "/run --data " + *dir_ + "/clean.tsv --json", &out, &err), 0)
      << err;
  EXPECT_EQ(nlohmann::json::parse(out)["skipped"].get<int64_t>(), 0) << out;
  EXPECT_EQ(err.find("skipped"), std::string::npos) << err;
}

// A source longer than the model's max_len (512) is a line the model cannot take: skipped, noted and counted as a
// malformed line is, the other lines scored; with --strict it is the error, naming file:line.
TEST_F(EvalData, SkipsASourceLongerThanTheModelsMaxLenOrRefusesItWithStrict) {
  const std::string f = *dir_ + "/over.tsv";
  std::ofstream(f) << "abc\tcba\nabcd\tdcba\n" << std::string(600, 'a') << "\taa\nba\tab\n";
  const std::string eval = kCli + " eval --model " + *dir_ + "/run --data " + f + " --threads 1";
  std::string out, err;
  ASSERT_EQ(run_split(eval + " --json", &out, &err), 0) << err;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["examples"].get<int64_t>(), 3) << out;
  EXPECT_EQ(j["skipped"].get<int64_t>(), 1) << out;
  EXPECT_NE(err.find(f + ": skipped 1 of 4 lines (line 3: over-long source: 600 tokens, more than the model's "
                         "max_len 512)\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_split(eval + " --strict", &out, &err), 1);
  EXPECT_EQ(err,
            "tfm: error: " + f + ":3: over-long source: 600 tokens, more than the model's max_len 512 (--strict)\n");
  EXPECT_EQ(out, "");
}

// --strict: the first bad line is an error naming file:line, as tfm train --strict; only with --data.
TEST_F(EvalData, StrictRefusesTheFirstBadLine) {
  const std::string f = *dir_ + "/bad.tsv";
  std::ofstream(f) << "abc\tcba\n\tabc\nno tab\n";
  std::string out, err;
  EXPECT_EQ(run_split(kCli + " eval --model " + *dir_ + "/run --data " + f + " --strict", &out, &err), 1);
  EXPECT_EQ(err, "tfm: error: " + f + ":2: malformed line: empty source (--strict)\n");
  EXPECT_EQ(out, "");
  EXPECT_NE(run_split(kCli + " eval --model " + *dir_ + "/run --task reverse --strict", &out, &err), 0);
  EXPECT_EQ(err.rfind("tfm: error: --strict requires --data", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Target tokens the vocabulary lacks are counted beside the source's: a reference holding one can never be matched.
TEST_F(EvalData, NotesTargetTokensOutsideTheVocabulary) {
  const std::string f = *dir_ + "/unk.tsv";
  std::ofstream(f) << "abc\tcba\nabc\t\xCE\xB1\xCE\xB2\xCE\xB3\nzab\tbaz\n";  // αβγ: 3 target tokens; z on line 3
  std::string out, err;
  ASSERT_EQ(run_split(kCli + " eval --model " + *dir_ + "/run --data " + f, &out, &err), 0) << err;
  EXPECT_NE(
      err.find(f + ": 1 source and 4 target tokens are not in the model's vocabulary, on 2 of 3 lines (the "
                   "first: line 2): a source reads them as <unk>, and a target holding one can never be matched\n"),
      std::string::npos)
      << err;
}

// A SentencePiece pair model (NFKC): a target in NFD changes to NFC, quoted with the changed part as code points so
// that the two quotes differ on screen; a no-break space that becomes a space changes no word BLEU or chrF sees,
// and is not counted.
TEST(EvalSpm, QuotesTheChangeVisiblyAndLeavesOutWhitespace) {
  const std::string d = temp_dir("cli_eval_spm");
  {
    std::ofstream train(d + "/train.tsv");
    tfm::testing::Rng g(3);
    const char* words[] = {
        "\xC3\xA9"
        "cole",
        "caf\xC3\xA9",
        "the",
        "school",
        "and",
        "of",
        "a",
        "b",
        "cd",
        "ab"};
    for (int i = 0; i < 200; ++i) {
      std::string s;
      for (int k = 0; k < 4; ++k) s += std::string(k ? " " : "") + words[g.uniform_int(0, 9)];
      train << s << '\t' << s << '\n';
    }
  }
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --train " + d + "/train.tsv --valid " + d + "/train.tsv --out " + d +
                            "/run --tokens spm --vocab-size 24 --joint-vocab --arch seq2seq --d-model 16 --nhead 2"
                            " --layers 1 --dim-feedforward 32 --batch-size 16 --threads 1 --max-steps 1 2>&1",
                        &out),
            0)
      << out;
  const std::string f = d + "/test.tsv";
  // line 1: "ab<NBSP>cd" (NFKC: "ab cd"); line 2: "the e<U+0301>cole" (NFC: "the \u00e9cole")
  std::ofstream(f) << "ab cd\tab\xC2\xA0"
                      "cd\nthe school\tthe e\xCC\x81"
                      "cole\n";
  const tfm::TrainedModel m = tfm::load_model_dir(d + "/run");
  std::string note;
  tfm::train::tsv_test_set(m, f, &note);
  EXPECT_EQ(note, f + ": 1 of 2 targets change under the model's target tokenizer (line 2: 'the e\\u{301}cole' "
                      "becomes 'the \\u{e9}cole'): BLEU and chrF score against the targets as written, which the "
                      "output cannot reproduce; the token and sequence accuracies compare the tokenized forms");
  std::filesystem::remove_all(d);
}

}  // namespace
