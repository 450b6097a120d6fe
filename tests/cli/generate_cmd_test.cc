// tests/cli/generate_cmd_test.cc — `tfm generate` and `tfm eval --text` end to end through the
// executable, on a tiny char-level language model directory written here (random weights, so its
// predictions are close to uniform: these tests check the commands, not the model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tfm/data/text.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;
const std::string kText =
    "the cat sat on the mat.\nthe dog sat on the log.\na cat and a dog met on a mat by a log.\n";

class GenerateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("cli_generate"));
    {
      std::ofstream f(*dir_ + "/text.txt");
      for (int i = 0; i < 20; ++i) f << kText;
    }
    // The model directory tfm train would write for a char-level decoder with block size 16.
    const std::string lm = *dir_ + "/lm";
    std::filesystem::create_directories(lm);
    const tfm::data::Vocab vocab = tfm::data::build_text_vocab(*dir_ + "/text.txt", tfm::data::Tokenization::CHAR);
    vocab_size_ = vocab.size();
    tfm::ModelConfig c;
    c.arch = tfm::Arch::DECODER;
    c.src_vocab_size = c.tgt_vocab_size = vocab.size();
    c.d_model = 16;
    c.nhead = 2;
    c.num_decoder_layers = 1;
    c.dim_feedforward = 32;
    c.max_len = 16;
    tfm::Generator g{1, 0};
    tfm::Model model(c.with_arch_defaults(), g);
    tfm::model_dir::save_vocabs(lm, vocab, vocab, /*json=*/true);
    tfm::testing::spit(tfm::model_dir::path(lm, tfm::model_dir::CONFIG),
                       tfm::model_dir::config_json(c.with_arch_defaults(), "{}", vocab, vocab, tfm::data::Tokenization::CHAR,
                                                   tfm::data::Tokenization::CHAR, /*json_vocab=*/true));
    tfm::io::save_safetensors(tfm::model_dir::path(lm, tfm::model_dir::MODEL), model.state_dict());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  // stdout of `tfm generate --model lm <options>` (stderr dropped); expects exit 0.
  static std::string generate(const std::string& options) {
    std::string out;
    EXPECT_EQ(run_command("(" + kCli + " generate --model " + *dir_ + "/lm " + options + " 2>/dev/null)", &out), 0)
        << options << "\n" << out;
    return out;
  }
  static std::string* dir_;
  static int64_t vocab_size_;
};
std::string* GenerateCli::dir_ = nullptr;
int64_t GenerateCli::vocab_size_ = 0;

// 40 characters after the prompt (each char one token), then the closing newline.
TEST_F(GenerateCli, PromptThenContinuationDeterministic) {
  const std::string a = generate("--prompt 'the ' --max-new-tokens 40 --seed 3 --threads 2");
  ASSERT_EQ(a.rfind("the ", 0), 0u) << a;
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 40 --seed 3 --threads 1"), a);
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 40 --seed 3 --no-mmap"), a);  // copied, not mapped
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 40 --seed 3 --no-mmap --dtype bf16"),
            generate("--prompt 'the ' --max-new-tokens 40 --seed 3 --dtype bf16"));
  EXPECT_NE(generate("--prompt 'the ' --max-new-tokens 40 --seed 4"), a);
  std::string prompt_file = *dir_ + "/prompt.txt";
  std::ofstream(prompt_file) << "the ";
  EXPECT_EQ(generate("--prompt-file " + prompt_file + " --max-new-tokens 40 --seed 3"), a);
  // A pipe as the prompt file: read to its end.
  std::string piped;
  EXPECT_EQ(run_command("(cat " + prompt_file + " | " + kCli + " generate --model " + *dir_ +
                            "/lm --prompt-file /dev/stdin --max-new-tokens 40 --seed 3 2>/dev/null)",
                        &piped),
            0);
  EXPECT_EQ(piped, a);
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 0"), "the \n");
  // Past the block size (16): the window slides, generation goes on.
  const std::string long_run = generate("--prompt 'the ' --max-new-tokens 100 --temperature 0");
  EXPECT_GE(long_run.size(), 104u);
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 100 --top-k 1 --seed 8"), long_run);
}

// Prompt characters the vocabulary lacks are read as <unk>, and stderr says how many; a prompt the
// vocabulary covers gets no note (stdout, the text, is dropped here). The library's count is the one printed.
TEST_F(GenerateCli, UnknownPromptCharactersAreNoted) {
  std::string out;
  ASSERT_EQ(run_command("(" + kCli + " generate --model " + *dir_ + "/lm --prompt 'the Zebra€' --max-new-tokens 3 2>&1 >/dev/null)",
                        &out),
            0);
  EXPECT_EQ(out, "note: 3 prompt tokens are not in the model's vocabulary, read as <unk>\n");
  ASSERT_EQ(run_command("(" + kCli + " generate --model " + *dir_ + "/lm --prompt 'Q' --max-new-tokens 3 2>&1 >/dev/null)", &out), 0);
  EXPECT_EQ(out, "note: 1 prompt token is not in the model's vocabulary, read as <unk>\n");
  ASSERT_EQ(run_command("(" + kCli + " generate --model " + *dir_ + "/lm --prompt 'the cat' --max-new-tokens 3 2>&1 >/dev/null)",
                        &out),
            0);
  EXPECT_EQ(out, "");
  // A bad option is said alone (checked before the note).
  ASSERT_NE(run_command("(" + kCli + " generate --model " + *dir_ + "/lm --prompt 'Q' --max-new-tokens -1 2>&1 >/dev/null)",
                        &out),
            0);
  EXPECT_EQ(out.find("note:"), std::string::npos) << out;
  EXPECT_NE(out.find("max_new_tokens must be"), std::string::npos) << out;
  const tfm::TrainedModel m = tfm::load_model_dir(*dir_ + "/lm");
  EXPECT_EQ(tfm::unknown_tokens(m, "the Zebra\xe2\x82\xac"), 3);  // Z, r (not in the text), €
  EXPECT_EQ(tfm::unknown_tokens(m, "a cat"), 0);
  EXPECT_THROW(tfm::unknown_tokens(m, "bad \xff byte", "p.txt"), std::invalid_argument);
  // The CLI encodes its prompt once (encode_prompt), counts on the ids and generates from them: the same
  // count and the same text as from the string.
  const std::vector<int32_t> ids = tfm::encode_prompt(m, "the Zebra\xe2\x82\xac");
  EXPECT_EQ(tfm::unknown_tokens(m, ids), 3);
  tfm::GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.seed = 5;
  const tfm::InferenceMode scope;
  EXPECT_EQ(tfm::generate_text(m, ids, opt), tfm::generate_text(m, "the Zebra\xe2\x82\xac", opt));
  try {
    tfm::encode_prompt(m, "", "p.txt");
    ADD_FAILURE() << "an empty prompt encoded";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "p.txt: the prompt is empty (give at least one character)");
  }
}

TEST_F(GenerateCli, SamplesSeparatedByDashes) {
  const std::string out = generate("--prompt 'a ' --max-new-tokens 20 --num-samples 3 --seed 1");
  std::vector<std::string> samples;
  size_t start = 0, at;
  while ((at = out.find("\n---\n", start)) != std::string::npos) {
    samples.push_back(out.substr(start, at + 1 - start));
    start = at + 5;
  }
  samples.push_back(out.substr(start));
  ASSERT_EQ(samples.size(), 3u) << out;
  for (const auto& s : samples) {
    EXPECT_EQ(s.rfind("a ", 0), 0u) << s;
    EXPECT_EQ(s.back(), '\n') << s;
  }
  // Sample 0 is the sample of a one-sample run with that seed.
  EXPECT_EQ(generate("--prompt 'a ' --max-new-tokens 20 --seed 1"), samples[0]);
}

// With --stop, a sample ends right after the first occurrence of the stop text in its continuation.
TEST_F(GenerateCli, StopText) {
  const std::string full = generate("--prompt 'the ' --max-new-tokens 60 --temperature 0");
  const std::string cont = full.substr(4);
  const std::string stop = cont.substr(3, 2);  // two characters of the greedy continuation
  const size_t end = cont.find(stop) + stop.size();
  std::string want = "the " + cont.substr(0, end);
  if (want.back() != '\n') want += '\n';
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 60 --temperature 0 --stop '" + stop + "'"), want);
}

// The stop text is looked for in the continuation only, as --help says: a match made of the prompt's last
// character and the first generated one does not end the sample; its first match inside the continuation does.
TEST_F(GenerateCli, StopTextIsMatchedInTheContinuationOnly) {
  const std::string full = generate("--prompt 'the ' --max-new-tokens 60 --temperature 0");
  const std::string cont = full.substr(4);
  ASSERT_FALSE(cont.empty());
  const std::string across = " " + cont.substr(0, 1);  // the prompt's last character + the first generated
  const size_t at = cont.find(across);
  std::string want = at == std::string::npos ? full : "the " + cont.substr(0, at + across.size());
  if (want.back() != '\n') want += '\n';
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 60 --temperature 0 --stop '" + across + "'"), want);
  EXPECT_GT(want.size(), 4 + 1 + 1u);  // it went on past the first generated character
  std::string help;
  ASSERT_EQ(run_command(kCli + " generate --help", &help), 0);
  EXPECT_NE(help.find("its continuation (the prompt not included) contains this text"), std::string::npos) << help;
  EXPECT_NE(help.find("--stop is looked for in each sample's continuation only, not across the prompt's end"),
            std::string::npos)
      << help;
}

TEST_F(GenerateCli, EvalText) {
  std::string out;
  ASSERT_EQ(run_command("(" + kCli + " eval --model " + *dir_ + "/lm --text " + *dir_ + "/text.txt --json 2>/dev/null)",
                        &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out);
  const int64_t chars = 20 * static_cast<int64_t>(kText.size());  // ASCII: one code point a byte
  EXPECT_EQ(j["tokens"].get<int64_t>(), chars - 1);
  const double loss = j["loss"].get<double>();
  EXPECT_GT(loss, 0.0);
  EXPECT_NEAR(loss, std::log(static_cast<double>(vocab_size_)), 0.05);  // random weights: about uniform
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(loss), 1e-9 * std::exp(loss));
  EXPECT_NEAR(j["bits_per_token"].get<double>(), loss / std::log(2.0), 1e-12);
  EXPECT_NEAR(j["bits_per_char"].get<double>(), j["bits_per_token"].get<double>(), 1e-12);  // char tokens
  ASSERT_EQ(run_command(kCli + " eval --model " + *dir_ + "/lm --text " + *dir_ + "/text.txt", &out), 0) << out;
  EXPECT_NE(out.find("bits per char"), std::string::npos) << out;
}

TEST_F(GenerateCli, Errors) {
  const auto fails = [](const std::string& args, const std::string& message) {
    std::string out;
    const int rc = run_command("(" + kCli + " " + args + " </dev/null)", &out);
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
  };
  const std::string lm = " --model " + *dir_ + "/lm";
  fails("generate" + lm + " --top-p 0", "tfm: error: sampling: top_p must be in (0, 1]");
  fails("generate" + lm + " --temperature -1", "tfm: error: sampling: temperature");
  fails("generate" + lm + " --num-samples 0", "tfm: error: generate: num_samples must be ≥ 1");
  // Beyond the bound, refused before anything is set up for the samples (not an allocation failure).
  fails("generate" + lm + " --num-samples 1000000000000", "tfm: error: generate: num_samples must be at most 1048576");
  // Integers beyond their type are refused, not clamped: the largest seed is taken, one more is not.
  fails("generate" + lm + " --seed 18446744073709551616",
        "tfm: error: --seed: 18446744073709551616 is out of range (beyond an unsigned 64-bit integer)");
  fails("generate" + lm + " --seed 99999999999999999999999", "tfm: error: --seed: 99999999999999999999999 is out of range");
  fails("generate" + lm + " --max-new-tokens 9223372036854775808",
        "tfm: error: --max-new-tokens: 9223372036854775808 is out of range");
  fails("generate" + lm + " --max-new-tokens -9223372036854775809",
        "tfm: error: --max-new-tokens: -9223372036854775809 is out of range");
  EXPECT_EQ(generate("--seed 18446744073709551615 --max-new-tokens 3 --prompt ab").substr(0, 2), "ab");
  fails("generate" + lm + " --top-p 1.0000001", "tfm: error: sampling: top_p must be in (0, 1], got 1.0000001\n");
  fails("generate" + lm + " --prompt ''", "tfm: error: the prompt is empty");
  fails("generate" + lm + " --prompt a --prompt-file x", "excludes");
  fails("generate" + lm + " --prompt-file " + *dir_ + "/missing.txt", "tfm: error: " + *dir_ + "/missing.txt: open failed");
  fails("generate" + lm + " --prompt-file " + *dir_, "tfm: error: " + *dir_ + ": is a directory, not a prompt file");
  fails("generate" + lm + " --prompt-file /dev/zero", "tfm: error: /dev/zero: longer than 64 MiB");  // not read forever
  // The library's refusal, as Python's stop="" gets it; checked before the model is loaded (a missing one unread).
  fails("generate" + lm + " --prompt ab --stop ''", "tfm: error: stop: empty: give the text to stop at\n");
  fails("generate --model " + *dir_ + "/nowhere --stop ''", "tfm: error: stop: empty: give the text to stop at\n");
  // "-" is standard input, as it is to most tools.
  std::string piped;
  ASSERT_EQ(run_command("(printf ab | " + kCli + " generate --model " + *dir_ + "/lm --prompt-file - --seed 3 "
                        "--max-new-tokens 4 2>/dev/null)",
                        &piped),
            0);
  EXPECT_EQ(piped, generate("--prompt ab --seed 3 --max-new-tokens 4"));
  tfm::testing::spit(*dir_ + "/empty_prompt.txt", "");
  fails("generate" + lm + " --prompt-file " + *dir_ + "/empty_prompt.txt",
        "tfm: error: " + *dir_ + "/empty_prompt.txt: the prompt is empty");
  tfm::testing::spit(*dir_ + "/bad_prompt.txt", "ok\xff");
  fails("generate" + lm + " --prompt-file " + *dir_ + "/bad_prompt.txt",
        "tfm: error: " + *dir_ + "/bad_prompt.txt: invalid UTF-8 at byte 2");
  fails("eval" + lm + " --task reverse", "is a language model: evaluate it on a text with --text FILE");
  for (const std::string opt : {"--beam", "--max-len", "--count", "--seed"})  // a text is scored, never decoded
    fails("eval" + lm + " --text " + *dir_ + "/missing.txt " + opt + " 2", opt + " excludes --text");
  fails("translate" + lm, "is a language model: sample from it with tfm generate");
}

// A float option is refused with the value typed when float32 would turn it into inf or 0 (the library's
// float32_option, as Python's generate refuses it), not checked as the rounded value ("got inf", "got 0") or, for a
// temperature of 1e-50, run greedily without a word. top_p is a double: any value in (0, 1] is taken.
TEST_F(GenerateCli, FloatOptionsAreCheckedAsTyped) {
  const auto fails = [](const std::string& args, const std::string& message) {
    std::string out;
    const int rc = run_command("(" + kCli + " generate --model " + *dir_ + "/lm " + args + " </dev/null)", &out);
    EXPECT_NE(rc, 0) << args;
    EXPECT_EQ(out, message) << args;
  };
  fails("--temperature 1e39", "tfm: error: --temperature must be representable as a float32, got 1e+39\n");
  fails("--temperature 1e-50", "tfm: error: --temperature must be representable as a float32, got 1e-50\n");
  fails("--temperature -1e-50", "tfm: error: --temperature must be representable as a float32, got -1e-50\n");
  fails("--temperature inf", "tfm: error: sampling: temperature must be finite and ≥ 0, got inf\n");
  const std::string greedy = generate("--prompt 'the ' --max-new-tokens 20 --temperature 0");
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 20 --top-p 1e-50 --seed 4"), greedy);
  EXPECT_EQ(generate("--prompt 'the ' --max-new-tokens 20 --temperature 1e-30 --seed 4"), greedy);
}

TEST_F(GenerateCli, HelpShowsExamples) {
  std::string out;
  ASSERT_EQ(run_command(kCli + " --help", &out), 0);
  EXPECT_NE(out.find("  generate"), std::string::npos) << out;
  ASSERT_EQ(run_command(kCli + " generate --help", &out), 0);
  EXPECT_NE(out.find("Examples:\n  tfm generate --model"), std::string::npos) << out;
}

}  // namespace
