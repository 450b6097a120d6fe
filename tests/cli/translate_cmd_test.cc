// tests/cli/translate_cmd_test.cc — `tfm translate`: --sample (greedy at temperature 0, the same
// output for a seed whatever --batch-size (and so the input chunking) and --threads), the length limit
// (--max-len and the note on outputs it cut), errors naming the input line in the stream, a line
// translated as soon as it is written (a coprocess), and the option errors; and `tfm eval`'s decoding
// options on the same models.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "test_util.h"
#include "tfm/data/tokenizer.h"
#include "tfm/inference.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/evaluate.h"

extern char** environ;

namespace {

using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

// A program run with its stdin and stdout on pipes held here (stderr to /dev/null): a coprocess, as an
// interactive user of `tfm translate` runs it. Killed on destruction if still running.
class Coprocess {
 public:
  explicit Coprocess(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&fa, fd);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) pid_ = -1;
  }
  ~Coprocess() {
    close_input();
    if (from_ >= 0) ::close(from_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  bool write_text(const std::string& s) { return ::write(to_, s.data(), s.size()) == static_cast<ssize_t>(s.size()); }
  void close_input() {
    if (to_ >= 0) ::close(to_);
    to_ = -1;
  }
  // The next line of its output (without the newline), waiting at most `seconds` for it; nothing at the
  // end of its output or when the time is up.
  std::optional<std::string> read_line(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;  // timeout (checked above) or EINTR
      char tmp[4096];
      const ssize_t n = ::read(from_, tmp, sizeof tmp);
      if (n <= 0) return std::nullopt;
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  // Its exit status (-1 unless it exited), after it ends.
  int wait() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buf_;
};

// The note `tfm translate` and `tfm eval` print when outputs stopped at the length limit: its count, or -1
// when `err` has no such note (and a test failure when it has more than one).
int64_t truncated_in_note(const std::string& err, int64_t outputs) {
  const std::regex note("tfm: note: (\\d+) of " + std::to_string(outputs) +
                        " outputs? stopped at the length limit \\([^)]*\\) without an end token; a larger max_len "
                        "\\(--max-len; in Python max_len=\\) raises it");
  std::smatch m;
  if (!std::regex_search(err, m, note)) return -1;
  EXPECT_EQ(err.find("tfm: note:", static_cast<size_t>(m.position(0)) + 1), std::string::npos) << "one note: " << err;
  return std::stoll(m[1].str());
}

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
    // An encoder (one prediction a source position, no search) on the built-in reversal task.
    ASSERT_EQ(run_command(kCli + " train --task reverse --arch encoder --out " + *dir_ +
                              "/enc --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --threads 1 --max-steps 2",
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
  // Runs `cmd` (a shell command) with stdout and stderr apart; returns the exit status.
  static int run_split(const std::string& cmd, std::string* out, std::string* err) {
    const std::string err_file = *dir_ + "/stderr.txt";
    const int rc = run_command("((" + cmd + ") 2>" + err_file + ")", out);
    *err = tfm::testing::slurp(err_file);
    return rc;
  }
  static std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
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

// A byte order mark opening standard input is not text (as in a TSV file): the first line translates as
// it does without it, with no note of an unknown token; one anywhere else is a character.
TEST_F(TranslateSample, AByteOrderMarkOpeningTheInputIsNotText) {
  std::ofstream(*dir_ + "/bom.txt", std::ios::binary) << "\xEF\xBB\xBF" << tfm::testing::slurp(*dir_ + "/in.txt");
  std::string out, err;
  ASSERT_EQ(run_split(kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/bom.txt", &out, &err), 0) << err;
  EXPECT_EQ(out, translate(""));
  EXPECT_EQ(err.find("unknown"), std::string::npos) << err;
}

// UTF-16 on standard input (a Windows "Unicode" file, with or without its byte order mark) is said to be UTF-16, as
// in a data file, not read as lines of NUL-laden tokens, nor as "input line 1: invalid UTF-8 at byte 0".
TEST_F(TranslateSample, Utf16InputIsSaidToBeUtf16) {
  std::string le;
  for (char ch : tfm::testing::slurp(*dir_ + "/in.txt")) le += std::string{ch, '\0'};
  std::ofstream(*dir_ + "/le.txt", std::ios::binary) << le;
  std::ofstream(*dir_ + "/bom16.txt", std::ios::binary) << "\xFF\xFE" << le;
  const std::string convert = "; tfm reads UTF-8: convert it, e.g. iconv -f ";
  std::string out, err;
  EXPECT_EQ(run_split(kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/le.txt", &out, &err), 1);
  EXPECT_EQ(err,
            "tfm: error: standard input: UTF-16LE text without a byte order mark (NUL bytes at odd offsets of its "
            "start: the high bytes of ASCII characters in UTF-16LE)" +
                convert + "UTF-16LE -t UTF-8\n");
  EXPECT_EQ(out, "");
  EXPECT_EQ(run_split(kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/bom16.txt", &out, &err), 1);
  EXPECT_EQ(err, "tfm: error: standard input: UTF-16 text (it starts with the byte order mark FF FE)" + convert +
                     "UTF-16 -t UTF-8\n");
}

// Byte tokens read any bytes: a byte model trains on a TSV file whose lines carry NULs at odd offsets (as UTF-16LE's
// ASCII has them), evaluates it and translates such lines from standard input; a source read as UTF-8 (the char
// model) refuses them as UTF-16.
TEST_F(TranslateSample, ByteModelsReadNulBytesAsBytes) {
  std::string pairs, sources;
  for (int i = 0; i < 16; ++i) {
    const std::string w{static_cast<char>('a' + i % 5), '\0', static_cast<char>('a' + i % 3), '\0'};
    pairs += w + '\t' + std::string(w.rbegin(), w.rend()) + '\n';
    sources += w + "a\n";  // 6 bytes: every line's NULs at odd offsets too
  }
  std::ofstream(*dir_ + "/bytes.tsv", std::ios::binary) << pairs;
  std::ofstream(*dir_ + "/bytes.txt", std::ios::binary) << sources;
  std::string out, err;
  ASSERT_EQ(run_split(kCli + " train --train " + *dir_ + "/bytes.tsv --valid " + *dir_ + "/bytes.tsv --out " + *dir_ +
                          "/bytes --tokens byte --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32"
                          " --threads 1 --max-steps 1",
                      &out, &err),
            0)
      << err;
  ASSERT_EQ(run_split(kCli + " eval --model " + *dir_ + "/bytes --data " + *dir_ + "/bytes.tsv --json --max-len 4",
                      &out, &err),
            0)
      << err;
  EXPECT_EQ(nlohmann::json::parse(out)["skipped"].get<int64_t>(), 0) << out;
  ASSERT_EQ(
      run_split(kCli + " translate --model " + *dir_ + "/bytes --max-len 4 < " + *dir_ + "/bytes.txt", &out, &err), 0)
      << err;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 16) << out;
  EXPECT_EQ(err.find("UTF-16"), std::string::npos) << err;
  EXPECT_EQ(run_split(kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/bytes.txt", &out, &err), 1);
  EXPECT_EQ(err.rfind("tfm: error: standard input: UTF-16LE text without a byte order mark", 0), 0u) << err;
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
  fails("--sample --beam 2", "tfm: error: sample needs beam 1 (a draw replaces the search), got beam 2\n");
  fails("--sample --top-p 0", "tfm: error: sampling: top_p must be in (0, 1]");
  fails("--sample --temperature -1", "tfm: error: sampling: temperature must be finite and ≥ 0");
  fails("--sample --top-k -1", "tfm: error: sampling: top_k must be ≥ 0");
  fails("--temperature 0.5", "--temperature: needs --sample");
  fails("--seed 3", "--seed: needs --sample");
  // A value just outside a range is printed as it is, not rounded into the range ("1.000000").
  fails("--sample --top-p 1.0000001", "tfm: error: sampling: top_p must be in (0, 1], got 1.0000001\n");
  fails("--sample --temperature -0.0000001", "tfm: error: sampling: temperature must be finite and ≥ 0, got -1e-07\n");
  // Beyond what float32 holds: refused with the value typed (float32_option), not as inf or 0.
  fails("--sample --temperature 1e39", "tfm: error: --temperature must be representable as a float32, got 1e+39\n");
  fails("--sample --temperature 1e-50", "tfm: error: --temperature must be representable as a float32, got 1e-50\n");
  // An integer beyond its type is refused, not clamped to the largest value.
  fails("--sample --seed 18446744073709551616", "tfm: error: --seed: 18446744073709551616 is out of range");
  fails("--batch-size 9223372036854775808", "tfm: error: --batch-size: 9223372036854775808 is out of range");
  fails("--max-len -1", "tfm: error: max_len must be ≥ 0 (0: the default limit), got -1\n");
  fails("--max-len 513", "tfm: error: max_len 513 is beyond the model's max_len 512");
  // An encoder predicts every position at once: a beam or a length limit would be silently ignored.
  const auto fails_enc = [](const std::string& options, const std::string& message) {
    std::string out;
    const int rc = run_command("(echo '1 2 3' | " + kCli + " translate --model " + *dir_ + "/enc " + options + ")", &out);
    EXPECT_EQ(rc, 1) << options;
    EXPECT_EQ(out, "tfm: error: " + message + "\n") << options;
  };
  fails_enc("--beam 2", "beam 2 does nothing for " + *dir_ +
                            "/enc (arch encoder): it predicts every source position at once, without a search (use beam 1)");
  fails_enc("--max-len 5", "max_len does nothing for " + *dir_ +
                               "/enc (arch encoder): its output has one token per source position, whatever the limit");
}

// Outputs cut at the length limit (2·source + 10 by default; a model trained 20 steps rarely ends) are
// counted in one note on stderr, and --max-len lets them go on: the same output first, then more. Those
// that ended at eos are the same under both limits, and only cut ones can change.
TEST_F(TranslateSample, LengthLimitIsNotedAndMaxLenRaisesIt) {
  const std::string cmd = kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/in.txt";
  std::string out, err;
  ASSERT_EQ(run_split(cmd, &out, &err), 0) << err;
  const std::vector<std::string> cut = lines_of(out);
  ASSERT_EQ(cut.size(), 70u);
  const int64_t n_cut = truncated_in_note(err, 70);
  ASSERT_GT(n_cut, 0) << err;
  EXPECT_NE(err.find("(by default 2·source tokens + 10, at most the model's max_len 512)"), std::string::npos) << err;
  ASSERT_EQ(run_split(cmd + " --max-len 100", &out, &err), 0) << err;
  const std::vector<std::string> longer = lines_of(out);
  ASSERT_EQ(longer.size(), 70u);
  int64_t went_on = 0;
  for (size_t i = 0; i < 70; ++i) {
    EXPECT_EQ(longer[i].substr(0, cut[i].size()), cut[i]) << "line " << i + 1;
    went_on += longer[i].size() > cut[i].size();
  }
  EXPECT_GT(went_on, 0);
  EXPECT_LE(went_on, n_cut);
  const int64_t n_longer = truncated_in_note(err, 70);
  EXPECT_LE(n_longer, n_cut) << err;  // -1: none reached 100 tokens
  if (n_longer > 0) {
    EXPECT_NE(err.find("(max_len 100)"), std::string::npos) << err;
  }
  // A limit of 1 token (a character) keeps each output's first token; the step after it still scores the
  // end token, so an output the model ends after one token is complete (not counted), and every longer one is cut.
  ASSERT_EQ(run_split(cmd + " --max-len 1", &out, &err), 0) << err;
  const std::vector<std::string> one = lines_of(out);
  ASSERT_EQ(one.size(), 70u);
  int64_t longer_than_one = 0, just_one = 0;
  for (size_t i = 0; i < 70; ++i) {
    EXPECT_EQ(one[i], cut[i].substr(0, 1)) << "line " << i + 1;
    longer_than_one += cut[i].size() > 1;
    just_one += cut[i].size() == 1;
  }
  EXPECT_EQ(truncated_in_note(err, 70), longer_than_one) << err;
  EXPECT_GT(just_one, 0);  // the premise: some outputs end after one token
  // An output of exactly --max-len tokens that the model ends there is whole: the same output, no note.
  size_t whole = 0;
  while (whole < 70 && !(longer[whole].size() >= 2 && longer[whole].size() < 100)) ++whole;
  ASSERT_LT(whole, 70u);
  ASSERT_EQ(run_split("sed -n " + std::to_string(whole + 1) + "p " + *dir_ + "/in.txt | " + kCli +
                          " translate --model " + *dir_ + "/run --max-len " + std::to_string(longer[whole].size()),
                      &out, &err),
            0)
      << err;
  EXPECT_EQ(out, longer[whole] + "\n");
  EXPECT_EQ(err, "");
  // Nothing cut: no note.
  ASSERT_EQ(run_split("printf '' | " + kCli + " translate --model " + *dir_ + "/run", &out, &err), 0);
  EXPECT_EQ(err, "");
  // At the model's own max_len no larger limit exists: the note says so instead of offering one.
  const tfm::TrainedModel m = tfm::load_model_dir(*dir_ + "/run");
  EXPECT_EQ(tfm::truncation_note(m, 2, 5, 512),
            "2 of 5 outputs stopped at the length limit (the model's max_len 512, its longest output) without an end "
            "token");
  EXPECT_EQ(tfm::truncation_note(m, 1, 1, 30),
            "1 of 1 output stopped at the length limit (max_len 30) without an end token; a larger max_len "
            "(--max-len; in Python max_len=) raises it, up to the model's max_len 512");
  EXPECT_EQ(tfm::truncation_note(m, 0, 5, 0), "");
}

// A line that cannot be tokenized after the first chunk (--batch-size 1: 64 lines a chunk) is named by
// its line number in the input, once.
TEST_F(TranslateSample, ErrorNamesTheInputLine) {
  std::string out, err;
  EXPECT_EQ(run_split("(for i in $(seq 69); do echo abc; done; printf 'ab\\377\\n') | " + kCli + " translate --model " +
                          *dir_ + "/run --batch-size 1",
                      &out, &err),
            1);
  EXPECT_EQ(err.rfind("tfm: error: input line 70: invalid UTF-8", 0), 0u) << err;
  EXPECT_EQ(err.find("input line", 20), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Output that cannot be written (a full disk: /dev/full) is an error, not a success over lost predictions;
// eval and generate likewise (main's check after every command).
TEST_F(TranslateSample, StdoutWriteErrorIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  std::string out, err;
  EXPECT_EQ(run_split(kCli + " translate --model " + *dir_ + "/run < " + *dir_ + "/in.txt > /dev/full", &out, &err), 1);
  EXPECT_EQ(err, "tfm: error: stdout: write failed (No space left on device)\n");
  EXPECT_EQ(run_split(kCli + " eval --model " + *dir_ + "/run --data " + *dir_ + "/valid.tsv --json > /dev/full", &out,
                      &err),
            1);
  const std::string last = "tfm: error: stdout: write failed (No space left on device)\n";  // after eval's notes
  EXPECT_TRUE(err.size() >= last.size() && err.compare(err.size() - last.size(), last.size(), last) == 0) << err;
}

// A coprocess writes a line and waits for its translation before writing the next: each arrives while
// the input is still open (before, nothing came until 64·--batch-size lines or the end of input, and the
// wait would time out). The translations are those of the whole input at once.
TEST_F(TranslateSample, TranslatesALineAsSoonAsItIsWritten) {
  ::signal(SIGPIPE, SIG_IGN);  // a dead coprocess fails the test, not the test process
  std::ifstream f(*dir_ + "/in.txt");
  std::string first, second;
  std::getline(f, first);
  std::getline(f, second);
  std::string out, err;
  ASSERT_EQ(run_split("printf '%s\\n%s\\n' " + first + " " + second + " | " + kCli + " translate --model " + *dir_ + "/run",
                      &out, &err),
            0);
  const std::vector<std::string> want = lines_of(out);
  ASSERT_EQ(want.size(), 2u);
  Coprocess tr({kCli, "translate", "--model", *dir_ + "/run"});
  ASSERT_TRUE(tr.started());
  ASSERT_TRUE(tr.write_text(first + "\n"));
  const std::optional<std::string> a = tr.read_line(60);
  ASSERT_TRUE(a.has_value()) << "no translation of the first line within 60 s while the input stays open";
  EXPECT_EQ(*a, want[0]);
  ASSERT_TRUE(tr.write_text(second + "\r\n"));  // a CRLF line too
  const std::optional<std::string> b = tr.read_line(60);
  ASSERT_TRUE(b.has_value()) << "no translation of the second line within 60 s";
  EXPECT_EQ(*b, want[1]);
  tr.close_input();
  EXPECT_FALSE(tr.read_line(60).has_value());  // the end of its output, nothing more
  EXPECT_EQ(tr.wait(), 0);
}

// `tfm eval` with a file: --max-len sets the limit, the note and "truncated" in --json count the
// predictions it cut, and the other figures are train::evaluate's (which Python's evaluate runs).
TEST_F(TranslateSample, EvalCountsTruncatedPredictions) {
  const std::string eval = kCli + " eval --model " + *dir_ + "/run --data " + *dir_ + "/valid.tsv";
  std::string out, err;
  ASSERT_EQ(run_split(eval + " --json", &out, &err), 0) << err;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(out);
  const int64_t truncated = j["truncated"].get<int64_t>();
  EXPECT_EQ(truncated_in_note(err, 10), truncated > 0 ? truncated : -1) << err;
  {
    const tfm::TrainedModel m = tfm::load_model_dir(*dir_ + "/run");
    std::string note;
    const tfm::train::EvalSet set = tfm::train::tsv_test_set(m, *dir_ + "/valid.tsv", &note);
    const tfm::train::Metrics r = tfm::train::evaluate(m, set, tfm::DecodeOptions{}, 64, [&](const tfm::data::Tokens& t) {
      return tfm::data::detokenize(t, m.tgt_tokenizer);
    });
    EXPECT_EQ(j.dump(), r.to_json());
  }
  ASSERT_EQ(run_split(eval + " --json --max-len 1", &out, &err), 0) << err;
  const int64_t cut = nlohmann::json::parse(out)["truncated"].get<int64_t>();
  EXPECT_GT(cut, truncated);  // a 20-step model's outputs are longer than one character
  EXPECT_EQ(truncated_in_note(err, 10), cut) << err;
  EXPECT_NE(err.find("(max_len 1)"), std::string::npos) << err;
  ASSERT_EQ(run_split(eval + " --max-len 1", &out, &err), 0) << err;  // the text report notes it too
  EXPECT_EQ(truncated_in_note(err, 10), cut) << err;
}

// A model whose position table is shorter than a source (an imported model's max_len can be below the data's
// --max-tokens; here config.json's, with sinusoidal positions): eval skips, notes and counts the line it cannot take
// and scores the others, or with --strict refuses it naming file:line (the first line of eval's output, "examples",
// counts those scored).
TEST_F(TranslateSample, EvalSkipsASourceLongerThanTheModelsMaxLen) {
  namespace fs = std::filesystem;
  const std::string short_run = *dir_ + "/short_positions";
  fs::remove_all(short_run);
  fs::copy(*dir_ + "/run", short_run, fs::copy_options::recursive);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(tfm::testing::slurp(short_run + "/config.json"));
  ASSERT_NE(j["model"].value("positional", std::string("sinusoidal")), "learned");
  j["model"]["max_len"] = 3;
  tfm::testing::spit(short_run + "/config.json", j.dump(2));
  const std::string f = *dir_ + "/short.tsv";
  std::ofstream(f) << "ab\tba\nabcd\tdcba\nabc\tcba\n";
  const std::string eval = kCli + " eval --model " + short_run + " --data " + f + " --max-len 3";
  std::string out, err;
  ASSERT_EQ(run_split(eval + " --json", &out, &err), 0) << err;
  EXPECT_EQ(nlohmann::json::parse(out)["examples"].get<int64_t>(), 2) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["skipped"].get<int64_t>(), 1) << out;
  EXPECT_NE(err.find(f + ": skipped 1 of 3 lines (line 2: over-long source: 4 tokens, more than the model's max_len "
                         "3)\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(run_split(eval + " --strict", &out, &err), 1);
  EXPECT_EQ(err, "tfm: error: " + f + ":2: over-long source: 4 tokens, more than the model's max_len 3 (--strict)\n");
}

// An encoder predicts one token per source token: eval skips (and notes) a pair of unequal lengths, as training does,
// instead of scoring the prediction on the reference's length only.
TEST_F(TranslateSample, EvalOfAnEncoderSkipsPairsOfUnequalLengths) {
  std::ofstream(*dir_ + "/enc.tsv") << "1 2 3\t3 2 1\n4 5\t5 4 3\n6 7\t7 6\n";
  std::string out, err;
  ASSERT_EQ(run_split(kCli + " eval --model " + *dir_ + "/enc --data " + *dir_ + "/enc.tsv --json", &out, &err), 0)
      << err;
  EXPECT_EQ(nlohmann::json::parse(out)["examples"].get<int64_t>(), 2) << out;
  EXPECT_NE(err.find(*dir_ + "/enc.tsv: skipped 1 of 3 lines (line 2: malformed line: source has 2 tokens, target 3 "
                             "(arch encoder needs one target token per source token))"),
            std::string::npos)
      << err;
}

TEST_F(TranslateSample, EvalRefusesOptionsWithoutEffect) {
  const auto fails = [](const std::string& args, const std::string& message) {
    std::string out;
    const int rc = run_command("(" + kCli + " eval --model " + *dir_ + "/" + args + ")", &out);
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(out.find(message), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  };
  // --count and --seed make a task's sequences; a file's pairs are read.
  fails("run --data " + *dir_ + "/valid.tsv --count 5", "tfm: error: --count excludes --data");
  fails("run --data " + *dir_ + "/valid.tsv --seed 3", "tfm: error: --seed excludes --data");
  fails("run --data " + *dir_ + "/valid.tsv --max-len 513", "tfm: error: max_len 513 is beyond the model's max_len 512");
  fails("run --data " + *dir_ + "/valid.tsv --max-len -2", "tfm: error: max_len must be ≥ 0");
  fails("enc --task reverse --count 5 --beam 3", "tfm: error: beam 3 does nothing for " + *dir_ + "/enc (arch encoder)");
  fails("enc --task reverse --count 5 --max-len 3", "tfm: error: max_len does nothing for " + *dir_ + "/enc (arch encoder)");
  std::string out;
  EXPECT_EQ(run_command(kCli + " eval --model " + *dir_ + "/enc --task reverse --count 5 --seed 3 --json", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["truncated"].get<int64_t>(), 0);  // one token a position: never cut
}

}  // namespace
