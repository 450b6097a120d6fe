// tests/spm/spm_cli_test.cc — SentencePiece vocabularies end to end through the executable: a TSV of
// English sentences made here from /usr/share/common-licenses/GPL-3 (source: the sentence's words
// reversed, target: the sentence) trains a seq2seq model with spm on both sides; translate prints
// text; the same seed gives the same files on 1 and 2 threads; --resume equals the uninterrupted
// run; joint vocabularies, language models and the errors naming files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/evaluate.h"
#include "tfm/train/text_metrics.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::slurp;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;
const std::string kSpace = "\xE2\x96\x81";  // "▁", SentencePiece's space

// Lines of GPL-3 with 4 to 14 words, whitespace collapsed.
std::vector<std::string> sentences() {
  std::ifstream f("/usr/share/common-licenses/GPL-3");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::vector<std::string> w;
    for (std::string x; ss >> x;) w.push_back(x);
    if (w.size() < 4 || w.size() > 14) continue;
    std::string s;
    for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
    out.push_back(s);
  }
  return out;
}

std::string reversed_words(const std::string& s) {
  std::istringstream ss(s);
  std::vector<std::string> w;
  for (std::string x; ss >> x;) w.push_back(x);
  std::string r;
  for (auto it = w.rbegin(); it != w.rend(); ++it) r += (r.empty() ? "" : " ") + *it;
  return r;
}

// train.tsv (the first n sentences), valid.tsv (the next 20); returns the valid sources.
std::vector<std::string> write_tsv(const std::string& d, size_t n) {
  const auto s = sentences();
  EXPECT_GT(s.size(), n + 20);
  std::ofstream train(d + "/train.tsv"), valid(d + "/valid.tsv");
  std::vector<std::string> sources;
  for (size_t i = 0; i < n + 20; ++i) {
    (i < n ? train : valid) << reversed_words(s[i]) << '\t' << s[i] << '\n';
    if (i >= n) sources.push_back(reversed_words(s[i]));
  }
  return sources;
}

const std::string kTiny =
    " --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --batch-size 16 --warmup 2 "
    "--schedule constant --eval-every 3 --seed 3";

std::string train_cmd(const std::string& d, const std::string& run, const std::string& extra) {
  return kCli + " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv --out " + d + "/" + run + kTiny + " " +
         extra + " 2>&1";
}

const std::string kSpm = "--src-tokens spm --tgt-tokens spm --src-vocab-size 150 --tgt-vocab-size 200";

TEST(SpmCli, Seq2seqTrainsTranslatesTextAndIsThreadIndependent) {
  const std::string d = temp_dir("spm_cli");
  const auto sources = write_tsv(d, 300);
  std::string out;
  ASSERT_EQ(run_command(train_cmd(d, "t1", kSpm + " --max-steps 6 --threads 1"), &out), 0) << out;
  ASSERT_EQ(run_command(train_cmd(d, "t2", kSpm + " --max-steps 6 --threads 2"), &out), 0) << out;
  for (const char* f : {"src.spm.model", "tgt.spm.model", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt"}) {
    ASSERT_TRUE(std::filesystem::exists(d + "/t1/" + f)) << f;
    EXPECT_EQ(slurp(d + "/t1/" + f), slurp(d + "/t2/" + f)) << f << " differs between --threads 1 and 2";
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/t1/spm.model"));
  EXPECT_NE(slurp(d + "/t1/src.spm.model"), slurp(d + "/t1/tgt.spm.model"));
  EXPECT_NE(slurp(d + "/t1/config.json").find("\"src_tokens\": \"spm\""), std::string::npos);
  // The vocabulary is the model's pieces: 200 entries, tfm's specials first.
  const std::string vocab = slurp(d + "/t1/tgt_vocab.txt");
  EXPECT_EQ(vocab.rfind("<pad>\n<bos>\n<eos>\n<unk>\n", 0), 0u);
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), '\n'), 200);

  // translate prints text: one line per source, no pieces.
  {
    std::ofstream(d + "/src.txt") << sources[0] << '\n' << sources[1] << '\n' << sources[2] << '\n';
  }
  ASSERT_EQ(run_command("(" + kCli + " translate --model " + d + "/t1 < " + d + "/src.txt 2>/dev/null)", &out), 0) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  EXPECT_EQ(out.find(kSpace), std::string::npos) << out;
  EXPECT_EQ(out.find("<unk>"), std::string::npos) << out;

  // Fine-tuning from the directory uses its SentencePiece models (copied along), and resumes.
  ASSERT_EQ(run_command(kCli + " train --init-from " + d + "/t1 --train " + d + "/train.tsv --valid " + d +
                            "/valid.tsv --max-steps 2 --threads 1 --out " + d + "/ft 2>&1",
                        &out),
            0)
      << out;
  EXPECT_EQ(slurp(d + "/ft/src.spm.model"), slurp(d + "/t1/src.spm.model"));
  EXPECT_EQ(slurp(d + "/ft/tgt.spm.model"), slurp(d + "/t1/tgt.spm.model"));
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/ft --max-steps 3 --threads 1 2>&1", &out), 0) << out;
  EXPECT_NE(run_command(kCli + " train --init-from " + d + "/t1 --train " + d + "/train.tsv --valid " + d +
                            "/valid.tsv --src-vocab-size 100 --out " + d + "/ft2 2>&1",
                        &out),
            0);
  EXPECT_NE(out.find("--src-vocab-size"), std::string::npos) << out;

  // eval on the TSV: accuracies count pieces; BLEU and chrF score the detokenized text, the text
  // translate prints, against the file's targets as text.
  ASSERT_EQ(run_command("(" + kCli + " eval --model " + d + "/t1 --data " + d + "/valid.tsv --json 2>/dev/null)", &out), 0)
      << out;
  {
    const auto j = nlohmann::json::parse(out);
    const tfm::TrainedModel m = tfm::load_model_dir(d + "/t1");
    const tfm::train::EvalSet set = tfm::train::tsv_test_set(m, d + "/valid.tsv", nullptr);
    std::vector<std::string> srcs;
    std::vector<std::vector<std::string>> refs;
    for (size_t i = 0; i < set.sources.size(); ++i) {
      srcs.push_back(m.src_tokenizer.detokenize(set.sources[i]));
      refs.emplace_back();
      for (const auto& r : set.references[i]) refs.back().push_back(m.tgt_tokenizer.detokenize(r));
      EXPECT_EQ(refs.back()[0].find(kSpace), std::string::npos) << refs.back()[0];
    }
    EXPECT_EQ(srcs[0], sources[0]);  // the text itself, not pieces
    const auto hyps = tfm::translate_lines(m, srcs, 1, 64);
    EXPECT_EQ(j.at("bleu").get<double>(), tfm::train::corpus_bleu(hyps, refs));
    EXPECT_EQ(j.at("chrf").get<double>(), tfm::train::corpus_chrf(hyps, refs));
    EXPECT_GT(j.at("chrf").get<double>(), 0.0);
  }

  // A missing tokenizer file is an error naming it.
  std::filesystem::copy(d + "/t1", d + "/broken", std::filesystem::copy_options::recursive);
  std::filesystem::remove(d + "/broken/tgt.spm.model");
  EXPECT_NE(run_command(kCli + " translate --model " + d + "/broken < " + d + "/src.txt 2>&1", &out), 0);
  EXPECT_NE(out.find(d + "/broken/tgt.spm.model: missing"), std::string::npos) << out;
}

TEST(SpmCli, ResumeEqualsTheUninterruptedRunAndReusesTheModels) {
  const std::string d = temp_dir("spm_resume");
  write_tsv(d, 200);
  std::string out;
  ASSERT_EQ(run_command(train_cmd(d, "full", kSpm + " --max-steps 8 --threads 1"), &out), 0) << out;
  ASSERT_EQ(run_command(train_cmd(d, "part", kSpm + " --max-steps 4 --threads 1"), &out), 0) << out;
  const std::string model = slurp(d + "/part/src.spm.model");
  // A resumed run never trains its SentencePiece models again: with a training file too small for
  // them, resuming (to the same length: no step) still works.
  std::filesystem::rename(d + "/train.tsv", d + "/train.keep");
  { std::ofstream(d + "/train.tsv") << "a b\tb a\n"; }
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/part --max-steps 4 --threads 1 2>&1", &out), 0) << out;
  std::filesystem::rename(d + "/train.keep", d + "/train.tsv");
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/part --max-steps 8 --threads 2 2>&1", &out), 0) << out;
  EXPECT_EQ(slurp(d + "/part/src.spm.model"), model);
  EXPECT_EQ(slurp(d + "/part/model.safetensors"), slurp(d + "/full/model.safetensors"));
  EXPECT_EQ(slurp(d + "/part/tgt.spm.model"), slurp(d + "/full/tgt.spm.model"));
}

TEST(SpmCli, JointVocabularyAndGivenModelFiles) {
  const std::string d = temp_dir("spm_joint");
  write_tsv(d, 200);
  std::string out;
  ASSERT_EQ(run_command(train_cmd(d, "j", "--tokens spm --joint-vocab --vocab-size 250 --spm-type bpe --max-steps 2"), &out),
            0)
      << out;
  EXPECT_TRUE(std::filesystem::exists(d + "/j/spm.model"));
  EXPECT_FALSE(std::filesystem::exists(d + "/j/src.spm.model"));
  EXPECT_EQ(slurp(d + "/j/src_vocab.txt"), slurp(d + "/j/tgt_vocab.txt"));
  EXPECT_NE(slurp(d + "/j/model.safetensors").find("src_embedding.weight"), std::string::npos);
  // --share-embeddings: the encoder reads tgt_embedding; no src_embedding.weight; translate works.
  ASSERT_EQ(run_command(train_cmd(d, "s", "--tokens spm --joint-vocab --vocab-size 250 --share-embeddings --max-steps 2"),
                        &out),
            0)
      << out;
  EXPECT_EQ(slurp(d + "/s/model.safetensors").find("src_embedding.weight"), std::string::npos);
  EXPECT_NE(slurp(d + "/s/model.safetensors").find("tgt_embedding.weight"), std::string::npos);
  EXPECT_NE(slurp(d + "/s/config.json").find("\"share_embeddings\": true"), std::string::npos);
  ASSERT_EQ(run_command("echo 'License Public General' | " + kCli + " translate --model " + d + "/s 2>&1", &out), 0) << out;
  EXPECT_EQ(out.find(kSpace), std::string::npos) << out;
  // A given .model file is used as it is (copied into the run directory).
  ASSERT_EQ(run_command(train_cmd(d, "g", "--tokens spm --src-spm-model " + d + "/j/spm.model --tgt-spm-model " + d +
                                              "/j/spm.model --max-steps 1"),
                        &out),
            0)
      << out;
  EXPECT_EQ(slurp(d + "/g/spm.model"), slurp(d + "/j/spm.model"));
  ASSERT_EQ(run_command("echo 'License Public General' | " + kCli + " translate --model " + d + "/g 2>&1", &out), 0) << out;
  EXPECT_EQ(out.find(kSpace), std::string::npos) << out;
}

TEST(SpmCli, LanguageModelKeepsNewlinesAndScoresBitsPerChar) {
  const std::string d = temp_dir("spm_lm");
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --text /usr/share/common-licenses/GPL-3 --tokens spm --vocab-size 400 --d-model 16 "
                               "--nhead 2 --layers 1 --dim-feedforward 32 --block-size 32 --batch-size 8 --max-steps 3 "
                               "--threads 1 --out " + d + "/lm 2>&1",
                        &out),
            0)
      << out;
  EXPECT_TRUE(std::filesystem::exists(d + "/lm/spm.model"));
  // With a validation text and no --token-cache, nothing is cached (no file in the working directory).
  ASSERT_EQ(run_command("cd " + d + " && " + kCli + " train --text /usr/share/common-licenses/GPL-3 --valid-text " +
                            "/usr/share/common-licenses/GPL-2 --tokens spm --vocab-size 400 --d-model 16 --nhead 2 " +
                            "--layers 1 --dim-feedforward 32 --block-size 32 --batch-size 8 --max-steps 1 --threads 1 " +
                            "--out " + d + "/lm2 2>&1",
                        &out),
            0)
      << out;
  EXPECT_FALSE(std::filesystem::exists(d + "/.valid"));
  ASSERT_EQ(run_command(kCli + " generate --model " + d + "/lm --prompt 'The GNU' --max-new-tokens 40 --seed 1 2>&1", &out), 0)
      << out;
  EXPECT_EQ(out.rfind("The GNU", 0), 0u) << out;
  EXPECT_EQ(out.find(kSpace), std::string::npos) << out;
  // --stop matches the printed text, whatever pieces hold it: with the same seed (the same draws) the
  // sample is the full one cut right after the piece that completes the continuation's first "e" (a
  // piece of this 400-token vocabulary is at most a word).
  std::string full, cut;
  const std::string gen = kCli + " generate --model " + d + "/lm --prompt 'The GNU' --max-new-tokens 60 --seed 1 --ignore-eos";
  ASSERT_EQ(run_command(gen + " 2>/dev/null", &full), 0) << full;
  ASSERT_EQ(run_command(gen + " --stop e 2>/dev/null", &cut), 0) << cut;
  const size_t first = full.find('e', 7);  // after the prompt
  ASSERT_NE(first, std::string::npos) << full;
  if (!cut.empty() && cut.back() == '\n' && full.compare(0, cut.size(), cut) != 0) cut.pop_back();  // the closing newline
  EXPECT_EQ(full.compare(0, cut.size(), cut), 0) << "a prefix of the full sample:\n" << cut << "\n" << full;
  EXPECT_GT(cut.size(), first) << cut;
  EXPECT_LE(cut.size(), first + 16) << "ends with the piece holding the first 'e':\n" << cut;
  // --init-from keeps the model's block size (32) when --block-size is not given: the default, 256,
  // would exceed the model's positions.
  ASSERT_EQ(run_command(kCli + " train --init-from " + d + "/lm --text /usr/share/common-licenses/GPL-2 --max-steps 1 " +
                            "--threads 1 --out " + d + "/ft 2>&1",
                        &out),
            0)
      << out;
  EXPECT_EQ(nlohmann::json::parse(slurp(d + "/ft/config.json"))["train"]["block_size"], 32);
  ASSERT_EQ(run_command(kCli + " eval --model " + d + "/lm --text /usr/share/common-licenses/GPL-3 --json 2>/dev/null", &out), 0)
      << out;
  EXPECT_NE(out.find("\"bits_per_char\""), std::string::npos) << out;
}

TEST(SpmCli, OptionErrorsAreOneClearLine) {
  const std::string d = temp_dir("spm_errors");
  write_tsv(d, 30);
  const auto fails = [&](const std::string& extra, const std::string& message) {
    std::string out;
    EXPECT_NE(run_command(train_cmd(d, "e", extra + " --max-steps 1"), &out), 0) << extra;
    EXPECT_NE(out.find(message), std::string::npos) << extra << "\n" << out;
  };
  fails("--tokens spm", "src_tokens spm needs exactly one of src_vocab_size (train a model) and src_spm_model");
  fails(
      "--tokens spm --vocab-size 50",
      "train config: vocab_size is the one vocabulary of text data or joint_vocab: TSV pairs without joint_vocab take "
      "one per side (src_vocab_size or src_spm_model, and the target's), or give joint_vocab for one");
  fails("--tokens spm --src-vocab-size 100 --tgt-vocab-size 100 --vocab-size 50", "vocab_size needs spm tokens");
  fails("--src-vocab-size 100", "src_vocab_size needs src_tokens spm");
  fails("--tokens spm --src-vocab-size 100000 --tgt-vocab-size 100",
        d + "/train.tsv (source side): SentencePiece cannot make a vocabulary of 100000 pieces");
  fails("--tokens spm --src-vocab-size 10 --tgt-vocab-size 100",
        d + "/train.tsv (source side): a vocabulary of 10 pieces is too small: this text needs ");  // in tfm's words, not spm's
  fails("--tokens spm --src-spm-model " + d + "/nope.model --tgt-vocab-size 100", d + "/nope.model");
  fails("--tokens spm --joint-vocab --vocab-size 100 --src-vocab-size 100", "src_vocab_size is for one side");
  fails("--tokens spm --src-vocab-size 100 --tgt-vocab-size 100 --share-embeddings", "share_embeddings needs joint_vocab");
}

}  // namespace
