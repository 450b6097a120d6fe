// tests/cli/quantize_cmd_test.cc — `tfm quantize` and int8 on the command line: a quantized copy of
// a tiny trained seq2seq directory runs in int8 by default (the same output as --dtype int8 given),
// and from its dequantized weights with --dtype f32; the refusals, each one line naming the thing
// refused: an existing --out without --force (or with it, holding other files than a model's), training from the
// copy, tools/import_torch.py reverse on it; SIGINT and SIGTERM stop it with nothing written. The numbers
// themselves are tested in tests/models/quantize_test.cc and tests/ops/inference_test.cc; this file checks the
// wiring.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "io/file_util.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using tfm::testing::run_command;
using tfm::testing::temp_dir;
using tfm::testing::with_file_size_limit;

const std::string kCli = TFM_CLI_PATH;
const std::string kSource = TFM_SOURCE_DIR;

class QuantizeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("cli_quantize"));
    tfm::testing::Rng g(3);
    std::ofstream train(*dir_ + "/train.tsv"), in(*dir_ + "/in.txt");
    for (int i = 0; i < 80; ++i) {
      std::string w;
      const int len = g.uniform_int(2, 6);
      for (int k = 0; k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
      train << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
      if (i < 20) in << w << '\n';
    }
    train.close();
    in.close();
    std::string out;
    ASSERT_EQ(run_command(kCli + " train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/train.tsv --out " + *dir_ +
                              "/run --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32"
                              " --batch-size 16 --threads 1 --max-steps 10",
                          &out),
              0)
        << out;
    ASSERT_EQ(run_command(kCli + " quantize --model " + *dir_ + "/run --out " + *dir_ + "/int8", &out), 0) << out;
    EXPECT_NE(out.find("wrote " + *dir_ + "/int8"), std::string::npos) << out;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string translate(const std::string& model, const std::string& options) {
    std::string out;
    EXPECT_EQ(run_command("(" + kCli + " translate --model " + *dir_ + "/" + model + " " + options + " < " + *dir_ +
                              "/in.txt 2>/dev/null)",
                          &out),
              0)
        << options << "\n" << out;
    return out;
  }
  // Runs a command that must fail with one line on stderr holding `part`.
  static void expect_refused(const std::string& cmd, const std::string& part) {
    std::string out;
    EXPECT_NE(run_command("(" + cmd + ") 2>&1", &out), 0) << cmd;
    EXPECT_NE(out.find(part), std::string::npos) << cmd << "\n" << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line:\n" << out;
  }
  static std::string* dir_;
};
std::string* QuantizeCli::dir_ = nullptr;

TEST_F(QuantizeCli, QuantizedDirectoryRunsInt8ByDefault) {
  const std::string by_default = translate("int8", "");
  EXPECT_EQ(std::count(by_default.begin(), by_default.end(), '\n'), 20);
  EXPECT_EQ(translate("int8", "--dtype int8 --threads 2"), by_default);
  EXPECT_EQ(translate("int8", "--dtype int8 --threads 1 --batch-size 3"), by_default) << "any --threads";
  EXPECT_EQ(translate("int8", "--dtype f32").size() > 0, true);
  std::string a, b;
  // (In parentheses: run_command adds 2>&1 after the command, which would send the notes on stderr
  // into the JSON.)
  ASSERT_EQ(run_command("(" + kCli + " eval --model " + *dir_ + "/int8 --data " + *dir_ + "/train.tsv --json 2>/dev/null)", &a),
            0);
  ASSERT_EQ(run_command("(" + kCli + " eval --model " + *dir_ + "/int8 --data " + *dir_ +
                            "/train.tsv --json --dtype int8 2>/dev/null)",
                        &b),
            0);
  EXPECT_EQ(a.rfind("{\"token_accuracy\":", 0), 0u) << a;
  EXPECT_EQ(a, b);
  EXPECT_FALSE(fs::exists(*dir_ + "/int8/trainer_state.safetensors"));
  // Smaller, though not by 4: at width 16 the header and the float32 biases and norms weigh as much
  // as the matrices (docs/int8.md has the figure for a real model).
  EXPECT_LT(fs::file_size(*dir_ + "/int8/model.safetensors"), fs::file_size(*dir_ + "/run/model.safetensors"));
}

// Without vector integer products (forced here by TFM_FORCE_SCALAR) int8 runs on the portable loop, says so on
// stderr, and gives the same translations: the int32 sums are exact either way (the other kernels' scalar twins differ
// from their AVX-512 bodies by float ulps at most, which do not change this model's greedy choices).
TEST_F(QuantizeCli, WithoutVnniTheSameOutputAndANote) {
  std::string out, err;
  EXPECT_EQ(run_command("(TFM_FORCE_SCALAR=1 " + kCli + " translate --model " + *dir_ + "/int8 < " + *dir_ +
                            "/in.txt 2>" + *dir_ + "/note.txt)",
                        &out),
            0);
  EXPECT_EQ(out, translate("int8", ""));
  std::ifstream f(*dir_ + "/note.txt");
  std::getline(f, err);
  EXPECT_NE(err.find("tfm: note: no AVX2, AVX512-VNNI or AMX-INT8"), std::string::npos) << err;
}

TEST_F(QuantizeCli, Refusals) {
  expect_refused(kCli + " quantize --model " + *dir_ + "/run --out " + *dir_ + "/int8",
                 "tfm: error: quantize: " + *dir_ + "/int8 exists (give --force to replace it)");
  // --force replaces a model directory, and deletes nothing else: a directory holding another file is refused.
  fs::create_directories(*dir_ + "/notes");
  tfm::testing::spit(*dir_ + "/notes/keep.txt", "keep");
  expect_refused(
      kCli + " quantize --model " + *dir_ + "/run --out " + *dir_ + "/notes --force",
      "tfm: error: quantize: " + *dir_ +
          "/notes holds 'keep.txt', which is not a model directory's file: "
          "--force replaces a model directory and deletes nothing else (choose another --out, or move it away)");
  EXPECT_TRUE(fs::exists(*dir_ + "/notes/keep.txt"));
  // --force replaces a directory, not a file: said at once.
  tfm::testing::spit(*dir_ + "/afile", "x");
  expect_refused(kCli + " quantize --model " + *dir_ + "/run --out " + *dir_ + "/afile --force",
                 "tfm: error: quantize: " + *dir_ + "/afile exists and is not a directory (choose another --out)");
  expect_refused(kCli + " train --train " + *dir_ + "/train.tsv --valid " + *dir_ + "/train.tsv --init-from " + *dir_ + "/int8 --out " + *dir_ +
                     "/ft --max-steps 1",
                 "init_from " + *dir_ + "/int8 is an int8-quantized model directory");
  expect_refused(kCli + " eval --model " + *dir_ + "/int8 --data " + *dir_ + "/train.tsv --dtype int4",
                 "unknown precision 'int4' (expected f32, bf16 or int8)");
  std::string out;
  if (run_command("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) GTEST_SKIP() << "no numpy for import_torch.py";
  EXPECT_NE(run_command("/usr/bin/python3 " + kSource + "/tools/import_torch.py reverse --map " + kSource +
                            "/tools/import_maps/nb4_reverse.json --target model --model-dir " + *dir_ + "/int8 --out " + *dir_ +
                            "/back.safetensors 2>&1",
                        &out),
            0);
  EXPECT_NE(out.find(*dir_ + "/int8 is an int8-quantized model directory"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(*dir_ + "/back.safetensors"));
}

// A write that fails inside the output (a full disk; here a file-size limit) is said of --out, not of the hidden
// staging directory it was written in (deleted by then), in the "<file>: <what>" form also when it is the copy of the
// model's description (std::filesystem's copy, whose own text is "filesystem error: cannot copy file: ... [a] [b]");
// nothing is left beside --out.
TEST_F(QuantizeCli, WriteErrorsNameTheOutNotItsStagingDirectory) {
  const std::string run = *dir_ + "/run", full = *dir_ + "/full", dest = full + "/q";
  fs::create_directories(full);
  size_t description = 0;
  for (const auto& e : fs::directory_iterator(*dir_ + "/int8"))
    if (e.path().filename() != "model.safetensors")
      description = std::max(description, static_cast<size_t>(e.file_size()));
  const size_t weights = fs::file_size(*dir_ + "/int8/model.safetensors");
  ASSERT_LT(description + 1, weights);
  std::string out;
  int rc = 0;
  with_file_size_limit(fs::file_size(run + "/config.json") - 1,
                       [&] { rc = run_command(kCli + " quantize --model " + run + " --out " + dest, &out); });
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(out,
            "tfm: error: " + dest + "/config.json: cannot copy file from " + run + "/config.json: File too large\n");
  with_file_size_limit(description + 1,
                       [&] { rc = run_command(kCli + " quantize --model " + run + " --out " + dest, &out); });
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(out, "tfm: error: " + dest + "/model.safetensors: write failed: File too large\n");
  EXPECT_TRUE(fs::is_empty(full));
  fs::remove_all(full);
}

// --force into an --out whose lock another process holds — a running tfm train, or another tfm quantize (import,
// export) replacing it — is refused, saying who may hold it (not "a tfm train" alone: two quantize --force into one
// --out refuse one of them so); the directory untouched.
TEST_F(QuantizeCli, ForceIntoADirectoryAnotherProcessHoldsSaysWhoMayHoldIt) {
  const std::string dest = *dir_ + "/int8";
  const std::string model = tfm::testing::slurp(dest + "/model.safetensors");
  {
    tfm::io::StagedDirectory other(dest, /*replace=*/true);  // another quantize --force, writing its copy
    expect_refused(kCli + " quantize --model " + *dir_ + "/run --out " + dest + " --force",
                   "tfm: error: " + dest +
                       ": a tfm train is running in this directory, or a tfm quantize, import or export is replacing "
                       "it (it holds the directory's lock): wait for it to end, or write into another --out");
  }
  EXPECT_EQ(tfm::testing::slurp(dest + "/model.safetensors"), model);
}

// `tfm quantize` sent `sig` as soon as its stop handler is installed (its /proc/<pid>/status lists the signal as
// caught), i.e. while it loads or quantizes: the run stops with nothing written, its staging directory deleted, one
// line on stderr and exit status 128 + sig, as `tfm train` does. A run that finished before the signal (a tiny
// model, a slow poll) is tried again.
TEST_F(QuantizeCli, SigintAndSigtermStopItWithNothingWritten) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string out = *dir_ + "/stopped", err = *dir_ + "/stopped.err";
    int rc = 0;
    for (int attempt = 0; attempt < 20 && rc != 128 + sig; ++attempt) {
      fs::remove_all(out);
      std::vector<std::string> args = {kCli, "quantize", "--model", *dir_ + "/run", "--out", out};
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
      posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawnattr_t attr;  // the signals' default disposition, as a terminal's Ctrl-C finds it
      posix_spawnattr_init(&attr);
      sigset_t defaults;
      sigemptyset(&defaults);
      sigaddset(&defaults, SIGINT);
      sigaddset(&defaults, SIGTERM);
      posix_spawnattr_setsigdefault(&attr, &defaults);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
      pid_t pid = 0;
      ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ), 0);
      posix_spawn_file_actions_destroy(&fa);
      posix_spawnattr_destroy(&attr);
      const auto caught = [&] {  // SigCgt: the caught signals' mask in hex, bit sig − 1
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        for (std::string line; std::getline(status, line);)
          if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
        return 0ull;
      };
      int status = 0;
      while (!caught() && ::waitpid(pid, &status, WNOHANG) == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      ::kill(pid, sig);
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      rc = WEXITSTATUS(status);
      if (rc == 0) {  // finished before the signal: whole
        EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
        continue;
      }
      EXPECT_EQ(rc, 128 + sig);
      EXPECT_FALSE(fs::exists(out));
      std::ifstream e(err);
      const std::string said((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
      EXPECT_EQ(said, std::string(sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)") + ": " + out +
                          " not written\n");
    }
    EXPECT_EQ(rc, 128 + sig) << "never stopped in time";
    for (const auto& e : fs::directory_iterator(*dir_))
      EXPECT_EQ(e.path().filename().string().rfind(".stopped.tmp.", 0), std::string::npos) << "left: " << e.path();
  }
}

}  // namespace
