// tests/train/checkpoint_test.cc — the run's checkpoint (src/train/checkpoint.cc) survives SIGKILL at
// arbitrary moments: `tfm train` is killed (kill -9: no handler, no cleanup) at several pseudo-random
// moments, and after each kill the output directory must still hold a readable checkpoint that
// `tfm eval` accepts and that the next `tfm train --resume` continues from.
//
// Why this holds (src/io/file_util.cc, AtomicFileWriter): every file of the run directory is written
// to a hidden temporary ".<name>.tmp.<pid>.<n>.<stamp>" in the same directory, fsync'ed, then
// renamed over <name>; rename(2) replaces the directory entry atomically, so a reader sees the old
// file or the new one, never a prefix. A kill between the two renames of a checkpoint leaves
// model.safetensors one checkpoint ahead of trainer_state.safetensors; each is whole on its own, and
// resume reads only trainer_state.safetensors (which carries its own copy of the weights).
// A kill mid-write leaves a temporary behind: it must never look like a checkpoint file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tfm/io/safetensors.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tfm::testing::run_command;
using tfm::testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

// A tiny encoder model on the reverse task with a checkpoint every 2 steps, so a good share of the
// run's time is spent writing checkpoints and the kills land during writes as well as between them.
const std::vector<std::string> kTrainArgs = {"--task", "reverse", "--arch", "encoder", "--d-model", "16",
                                             "--nhead", "2", "--layers", "1", "--dim-feedforward", "32",
                                             "--batch-size", "16", "--eval-every", "2", "--threads", "1"};

// Starts `tfm args...` with stdout and stderr appended to `log`; returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {kCli};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kCli.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + kCli + " failed: " + std::strerror(rc));
  return pid;
}

// SIGKILLs `pid` and reaps it; true when the signal is what ended it (the process was still running).
bool kill9(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The step recorded in a checkpoint's commit file (its metadata's "tfm_trainer_state" JSON).
int64_t checkpoint_step(const std::string& dir) {
  const tfm::io::SafeTensorsFile f = tfm::io::load_safetensors(dir + "/trainer_state.safetensors");
  return nlohmann::json::parse(f.metadata.at("tfm_trainer_state")).at("step").get<int64_t>();
}

// Every entry of the run directory is either one of the run's files or a hidden temporary of the
// atomic writer, whose name cannot be taken for a checkpoint (it does not end in ".safetensors" and
// starts with a dot). Returns the number of temporaries left behind by kills.
int check_directory(const std::string& dir) {
  const std::set<std::string> known = {"config.json",       "src_vocab.txt",
                                       "tgt_vocab.txt",     "model.safetensors",
                                       "trainer_state.safetensors", "trainer_clock.json",
                                       "metrics.csv",       "curves.svg"};
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (known.count(name)) continue;
    ++temporaries;
    EXPECT_EQ(name[0], '.') << "unexpected file in the run directory: " << name;
    EXPECT_NE(name.find(".tmp."), std::string::npos) << "unexpected file in the run directory: " << name;
    EXPECT_FALSE(name.size() >= 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0)
        << "a temporary file is named like a checkpoint: " << name;
  }
  return temporaries;
}

TEST(KillResume, SigkillAtRandomMomentsLeavesALoadableCheckpoint) {
  const std::string d = temp_dir("kill9");
  const std::string run = d + "/run", log = d + "/log";

  // A run killed before its first checkpoint has nothing to resume: a clear error, not a crash.
  {
    std::vector<std::string> args = {"train", "--out", d + "/early", "--max-steps", "1000000"};
    args.insert(args.end(), kTrainArgs.begin(), kTrainArgs.end());
    const pid_t pid = spawn_cli(args, log);
    sleep_ms(20);  // startup: the task data is still being generated, no step taken yet
    kill9(pid);
    std::string out;
    if (!fs::exists(d + "/early/trainer_state.safetensors")) {
      EXPECT_EQ(run_command(kCli + " train --resume " + d + "/early --max-steps 4 --threads 1", &out), 1) << out;
      EXPECT_FALSE(out.empty());
    }
  }

  // First run: wait for its first checkpoint, then kill it after a short random delay.
  tfm::testing::Rng rng(20261122);  // fixed: the same kill schedule on every run of the test
  int kills = 0, temporaries = 0;
  int64_t last_step = 0;
  const int kIterations = 10;
  for (int it = 0; it < kIterations; ++it) {
    std::vector<std::string> args;
    if (it == 0) {
      args = {"train", "--out", run, "--max-steps", "1000000"};
      args.insert(args.end(), kTrainArgs.begin(), kTrainArgs.end());
    } else {
      args = {"train", "--resume", run, "--max-steps", "1000000", "--threads", "1"};
    }
    const pid_t pid = spawn_cli(args, log);
    if (it == 0) {
      for (int i = 0; i < 300 && !fs::exists(run + "/trainer_state.safetensors"); ++i) sleep_ms(10);
      ASSERT_TRUE(fs::exists(run + "/trainer_state.safetensors")) << "no checkpoint within 3 s";
    }
    const int ms = rng.uniform_int(0, 600);
    sleep_ms(ms);
    const bool killed = kill9(pid);
    EXPECT_TRUE(killed) << "iteration " << it << ": the run ended before the kill";
    kills += killed ? 1 : 0;

    // The commit file reads completely, and its step never goes back: each resume continued from
    // the previous one's last checkpoint (or from the same one, if killed before writing another).
    int64_t step = -1;
    ASSERT_NO_THROW(step = checkpoint_step(run)) << "iteration " << it << " (killed after " << ms << " ms)";
    EXPECT_GE(step, last_step) << "iteration " << it;
    last_step = step;
    ASSERT_NO_THROW(tfm::io::load_safetensors(run + "/model.safetensors")) << "iteration " << it;
    temporaries = check_directory(run);

    // The checkpoint is usable as a model directory.
    std::string out;
    ASSERT_EQ(run_command(kCli + " eval --model " + run + " --task reverse --count 10 --threads 1", &out), 0)
        << "iteration " << it << " (killed after " << ms << " ms at checkpoint step " << step << "):\n"
        << out;
  }
  std::printf("%d kills, checkpoint step %lld, %d temporary file(s) left by kills mid-write\n", kills,
              static_cast<long long>(last_step), temporaries);

  // A final resume removes the temporaries the kills left, runs a few more steps and finishes normally.
  std::string out;
  ASSERT_EQ(run_command(kCli + " train --resume " + run + " --max-steps " + std::to_string(last_step + 3) +
                            " --threads 1",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("resuming " + run + " at step " + std::to_string(last_step)), std::string::npos) << out;
  EXPECT_EQ(checkpoint_step(run), last_step + 3);
  check_directory(run);
  for (const auto& e : fs::directory_iterator(run))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << "stale temporary left after resume: " << e.path();
  fs::remove_all(d);
}

// A checkpoint whose trainer state holds a count that cannot be one (a corrupt or hand-edited file) is
// refused in one line naming the file and the key, before any step: a negative batch index used to
// index the epoch's plan (a crash).
TEST(CheckpointState, ImpossibleCountsAreRefusedByName) {
  const std::string d = temp_dir("tfm_bad_state"), run = d + "/run";
  std::vector<std::string> args = kTrainArgs;
  std::string cmd = kCli + " train";
  for (const std::string& a : args) cmd += " " + a;
  std::string out;
  ASSERT_EQ(run_command(cmd + " --max-steps 2 --out " + run, &out), 0) << out;
  const std::string state = run + "/trainer_state.safetensors";
  const tfm::io::SafeTensorsFile good = tfm::io::load_safetensors(state);
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expected;
  };
  const Case cases[] = {
      {"batch", -7, "'batch' must be a non-negative integer, got -7"},
      {"step", "two", "'step' must be a non-negative integer, got \"two\""},
      {"rng_offset", -1, "'rng_offset' must be a non-negative integer, got -1"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = nlohmann::json::parse(good.metadata.at("tfm_trainer_state"));
    j[c.key] = c.value;
    std::map<std::string, std::string> meta = good.metadata;
    meta["tfm_trainer_state"] = j.dump();
    tfm::io::save_safetensors(state, good.tensors, meta);
    out.clear();
    EXPECT_EQ(run_command(kCli + " train --resume " + run + " --max-steps 4 --threads 1", &out), 1) << out;
    EXPECT_NE(out.find(state + ": " + c.expected), std::string::npos) << c.key << ": " << out;
  }
  fs::remove_all(d);
}

}  // namespace
