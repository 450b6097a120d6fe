// tests/mpi/launch_test.cc — what a user of `mpirun -np 2 tfm ...` sees besides the numbers (those are
// tests/mpi/data_parallel_test.cc's): --comm-timeout spares an evaluation however long and a suspension
// of the whole job, and still names a fractional timeout as given; an option error every rank finds is
// said once, one a single rank finds is said by it with its rank; the commands other than train refuse
// to run as several copies. Timing: no test depends on how fast this machine is beyond wide margins; a
// job that should run on is stopped by SIGINT (to mpirun) once it has outlived twice its --comm-timeout,
// and every job gets 60 s before its script kills it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "mpi/mpi_test_util.h"
#include "test_util.h"

namespace tfm {
namespace {

using testing::read_file;
using testing::run_command;
using testing::temp_dir;
using testing::write_pairs;

const std::string kCli = TFM_CLI_PATH;
using Mpirun = testing::MpirunTest;

const std::string kTiny =
    " --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --batch-size 7 --threads 1 --eval-every 4";

// The lines of `out` that start a tfm error.
size_t errors(const std::string& out) {
  size_t n = 0;
  for (size_t at = out.find("tfm: error"); at != std::string::npos; at = out.find("tfm: error", at + 1)) ++n;
  return n;
}

// Runs `tfm train<train_args> --out d/run` under mpirun -np 2, its stderr in d/err; once rank 0 printed its
// first evaluation line (both ranks are past their first step, whose waits are untimed) runs the shell
// commands `then`, in which $pid is mpirun's and $r0 and $r1 the ranks' (the children of mpirun whose
// environment says OMPI_COMM_WORLD_RANK=0 and 1). Returns "rc=<mpirun's exit code>".
std::string run_and_signal(const std::string& d, const std::string& train_args, const std::string& then) {
  const std::string script =
      Mpirun::mpirun(2) + kCli + " train" + train_args + " --out " + d + "/run 2>" + d + "/err & pid=$!; " +
      "for i in $(seq 600); do grep -q '^eval' " + d + "/err 2>/dev/null && break; sleep 0.1; done; " +
      "for p in $(pgrep -P $pid); do e=$(tr '\\0' '\\n' < /proc/$p/environ); " +
      "echo \"$e\" | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$p; echo \"$e\" | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p; "
      "done; " +
      "( sleep 60; kill -KILL $(pgrep -P $pid) $pid ) >/dev/null 2>&1 & guard=$!; " + then + "; " +
      "wait $pid; echo rc=$?; kill -CONT $r0 $r1 2>/dev/null; kill -KILL $guard 2>/dev/null; true";
  std::string out;
  run_command(script, &out);
  return out;
}

// ---- --comm-timeout ----

// The whole job suspended for longer than --comm-timeout, then continued (Ctrl-Z and fg, a scheduler's
// suspend): it runs on. Rank 1 is stopped first and rank 0 half a second later, so that rank 0 is surely
// waiting for rank 1 in a timed collective when it stops (its steps take milliseconds); both stay stopped
// 5 s (--comm-timeout 2), are continued, and the run goes on until SIGINT 4 s later ends it with its
// checkpoint. A wait that counted the suspension would end the job at once on SIGCONT.
TEST_F(Mpirun, WholeJobSuspendedLongerThanTheCommTimeoutRunsOnWhenContinued) {
  const std::string d = temp_dir("mpi_suspend");
  write_pairs(d + "/train.tsv", 40, 5);
  write_pairs(d + "/valid.tsv", 6, 6);
  const std::string out = run_and_signal(
      d, " --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTiny + " --max-steps 1000000 --comm-timeout 2",
      "kill -STOP $r1; sleep 0.5; kill -STOP $r0; sleep 5; kill -CONT $r0 $r1; sleep 4; kill -INT $pid");
  const std::string err = read_file(d + "/err");
  EXPECT_EQ(errors(err), 0u) << err;
  EXPECT_NE(err.find("terminated (SIGTERM) at step "), std::string::npos) << out << err;
}

// A validation set of one evaluation batch (256 windows of 256 characters): rank 1 has no share of the
// evaluation and rank 0 the whole, which takes some seconds here (a width-640 model), far longer than
// --comm-timeout 2, while a step (2 windows) takes a fraction of it. The run ends normally; rank 1 does not
// give up on rank 0 while rank 0 evaluates.
TEST_F(Mpirun, EvaluationLongerThanTheCommTimeoutWithARankWithoutShareFinishes) {
  const std::string d = temp_dir("mpi_eval_long");
  testing::Rng g(3);
  const auto text = [&](const std::string& path, int chars) {
    std::ofstream f(path);
    for (int i = 0; i < chars; ++i) f << "abcdefgh \n"[g.uniform_int(0, 9)];
  };
  text(d + "/train.txt", 20000);
  text(d + "/valid.txt", 256 * 256);
  std::string out;
  const int rc = run_command(Mpirun::mpirun(2) + kCli + " train --text " + d + "/train.txt --valid-text " + d +
                                 "/valid.txt --tokens char --block-size 256 --d-model 640 --nhead 8 --layers 2 "
                                 "--dim-feedforward 1280 --batch-size 2 --threads 1 --max-steps 2 --eval-every 2 "
                                 "--comm-timeout 2 --out " +
                                 d + "/run 2>&1",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("trained 2 steps"), std::string::npos) << out;
}

// A rank stopped alone still ends the job, and the message gives a fractional --comm-timeout as given.
TEST_F(Mpirun, StoppedRankMessageGivesAFractionalTimeoutAsGiven) {
  const std::string d = temp_dir("mpi_stop_fraction");
  write_pairs(d + "/train.tsv", 40, 5);
  write_pairs(d + "/valid.tsv", 6, 6);
  const std::string out = run_and_signal(
      d, " --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTiny + " --max-steps 1000000 --comm-timeout 1.5",
      "kill -STOP $r1");
  EXPECT_EQ(out.find("rc=0"), std::string::npos) << out;
  const std::string err = read_file(d + "/err");
  EXPECT_NE(err.find("within --comm-timeout 1.5 s (a process is stopped, stuck or gone)"), std::string::npos) << err;
}

// ---- errors before the run ----

// An option's value every rank refuses alike is said once, as one process says it (no rank tag), and every
// rank exits non-zero; so is a run directory every rank finds missing alike.
TEST_F(Mpirun, OptionErrorEveryRankFindsIsPrintedOnce) {
  const std::string d = temp_dir("mpi_option_once");
  const std::string run = " train --task reverse --arch encoder --max-steps 1 --threads 1 --out " + d + "/run";
  std::string out;
  EXPECT_NE(run_command(mpirun(2) + kCli + run + " --bucket-mb 0 2>&1", &out), 0);
  EXPECT_EQ(errors(out), 1u) << out;
  EXPECT_NE(out.find("tfm: error: --bucket-mb must be in (0, 1024] MiB, got 0"), std::string::npos) << out;
  EXPECT_NE(run_command(mpirun(2) + kCli + run + " --comm-timeout 0 2>&1", &out), 0);
  EXPECT_EQ(errors(out), 1u) << out;
  EXPECT_NE(out.find("tfm: error: --comm-timeout must be a positive number of seconds"), std::string::npos) << out;
  EXPECT_FALSE(std::ifstream(d + "/run/config.json").good()) << "no rank started the run";
}

// An option error one rank finds and another does not (mpirun's "A : B" gives them different arguments, as
// different files on different machines would): the rank says it with its rank, the other says nothing
// more, and neither trains.
TEST_F(Mpirun, OptionErrorOfOneRankIsPrintedByItWithItsRank) {
  const std::string d = temp_dir("mpi_option_one");
  const std::string run = " train --task reverse --arch encoder --max-steps 1 --threads 1 --out " + d + "/run";
  std::string out;
  EXPECT_NE(run_command(mpirun(1) + kCli + run + " --bucket-mb 1 : -np 1 " + kCli + run + " --bucket-mb 0 2>&1", &out),
            0);
  EXPECT_EQ(errors(out), 1u) << out;
  EXPECT_NE(out.find("tfm: error (rank 1 of 2): --bucket-mb must be in (0, 1024] MiB, got 0"), std::string::npos)
      << out;
  EXPECT_FALSE(std::ifstream(d + "/run/config.json").good()) << "rank 0 did not start the run alone";
}

// ---- the commands that run in one process ----

// eval, generate, translate (and every command but train) under a launcher of 2 would each run whole in
// both copies: refused before they load anything, said once. Under mpirun -np 1 they run (here: fail on
// the missing model, which says they got that far).
TEST_F(Mpirun, CommandsOtherThanTrainRefuseToRunAsSeveralCopies) {
  const std::string d = temp_dir("mpi_one_process");
  for (const std::string cmd : {"eval --task reverse", "generate", "translate"}) {
    const std::string line = kCli + " " + cmd + " --model " + d + "/none 2>&1 < /dev/null";
    const std::string name = cmd.substr(0, cmd.find(' '));
    std::string out;
    EXPECT_NE(run_command(mpirun(2) + line, &out), 0) << cmd;
    EXPECT_EQ(errors(out), 1u) << out;
    EXPECT_NE(
        out.find("tfm: error: tfm " + name + " runs in one process, but a launcher (mpirun, srun) started 2 copies"),
        std::string::npos)
        << out;
    EXPECT_NE(run_command(mpirun(1) + line, &out), 0) << cmd;
    EXPECT_EQ(out.find("runs in one process"), std::string::npos) << out;
    EXPECT_NE(out.find(d + "/none"), std::string::npos) << out;
  }
}

// The same from the launcher's environment alone (no MPI needed): rank 0 says it, rank 1 exits non-zero quietly.
TEST(LaunchedCopies, CommandsOtherThanTrainRefuseWithoutMpirun) {
  const std::string d = temp_dir("copies_one_process");
  const std::string line = kCli + " eval --task reverse --model " + d + "/none 2>&1";
  std::string out;
  EXPECT_NE(run_command("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 " + line, &out), 0);
  EXPECT_NE(out.find("tfm: error: tfm eval runs in one process"), std::string::npos) << out;
  EXPECT_NE(run_command("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 " + line, &out), 0);
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace tfm
