// tests/mpi/data_parallel_test.cc — data parallelism (TrainConfig::grad_shards, mpirun -np P): the
// sharded step against the unsharded one in one process, and runs under mpirun against one process
// with the same --grad-shards, bit for bit: model.safetensors and trainer_state.safetensors byte for
// byte (same_run, tests/mpi/mpi_test_util.h, which also skips the mpirun tests, saying why, without
// MPI or mpirun).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mpi/mpi_test_util.h"
#include "test_util.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model.h"
#include "tfm/optim.h"
#include "tfm/train/comm.h"
#include "train/step.h"

namespace tfm {
namespace {

using testing::run_command;
using testing::temp_dir;
using testing::read_file;
using testing::same_run;
using testing::write_pairs;

const std::string kCli = TFM_CLI_PATH;

// ---- the sharded step in one process ----

// A seq2seq batch of 5 rows of different lengths (pads in src, tgt_in and tgt_out).
data::TokenBatch ragged_batch() {
  data::TokenBatch b;
  b.B = 5, b.S = 4, b.T = 5;
  const int32_t pad = 0, bos = 1, eos = 2;
  const std::vector<std::vector<int32_t>> src = {{3, 4, 5, 6}, {7, 3}, {4, 4, 8}, {9}, {5, 6, 7, 8}};
  const std::vector<std::vector<int32_t>> tgt = {{6, 5, 4, 3}, {3, 7}, {8, 4, 4}, {9}, {8, 7}};
  for (int64_t r = 0; r < b.B; ++r) {
    for (int64_t s = 0; s < b.S; ++s) b.src.push_back(s < static_cast<int64_t>(src[r].size()) ? src[r][s] : pad);
    const auto& t = tgt[r];
    for (int64_t i = 0; i < b.T; ++i) {
      const int64_t n = static_cast<int64_t>(t.size());
      b.tgt_in.push_back(i == 0 ? bos : i <= n ? t[i - 1] : pad);
      b.tgt_out.push_back(i < n ? t[i] : i == n ? eos : pad);
    }
  }
  return b;
}

ModelConfig tiny_seq2seq(float dropout) {
  ModelConfig c;
  c.arch = Arch::SEQ2SEQ;
  c.d_model = 16, c.nhead = 2, c.num_encoder_layers = c.num_decoder_layers = 1, c.dim_feedforward = 32;
  c.src_vocab_size = c.tgt_vocab_size = 10, c.pad_id = 0, c.bos_id = 1, c.eos_id = 2, c.max_len = 8;
  c.dropout = dropout;
  return c;
}

// The gradient one step takes: SGD with lr 1 and no clipping moves every weight by −grad.
std::vector<std::vector<float>> step_gradient(int64_t shards, float dropout, uint64_t offset = 0) {
  Generator gen{7, 0};
  Model model(tiny_seq2seq(dropout), gen);
  model.train();
  gen.offset = offset;
  const NamedTensors named = model.named_parameters();
  SGD opt(named, 1.0f, 0.0f, 0.0f);
  std::vector<Tensor> params = model.parameters();
  std::vector<std::vector<float>> before;
  for (const auto& p : params) before.emplace_back(p.data(), p.data() + p.numel());
  train::Comm single;
  train::ShardedStep step(params, shards, single);
  train::ShardedStep::Agreement agreement;
  const train::StepOutcome s = step.run(model, opt, gen, ragged_batch(), 0.1f, 0.0f, agreement);
  EXPECT_TRUE(s.finite);
  // Several parts: the run generator advances by one counter a step (one part draws from it directly).
  if (shards > 1) {
    EXPECT_EQ(gen.offset, offset + 1);
  }
  std::vector<std::vector<float>> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> g(before[i].size());
    for (size_t k = 0; k < g.size(); ++k) g[k] = before[i][k] - params[i].data()[k];
    grads.push_back(std::move(g));
  }
  return grads;
}

using Rows = std::pair<int64_t, int64_t>;

TEST(ShardRows, EvenSplitEarlierPartsTakeTheExtraRows) {
  EXPECT_EQ(train::shard_rows(5, 2, 0), Rows(0, 3));
  EXPECT_EQ(train::shard_rows(5, 2, 1), Rows(3, 5));
  EXPECT_EQ(train::shard_rows(5, 3, 2), Rows(4, 5));
  EXPECT_EQ(train::shard_rows(2, 4, 2), Rows(2, 2));  // empty
}

// Without dropout the parts' gradients add up to the whole batch's (a mathematical identity; the two
// differ by float32 rounding of the reordered sums and of the n/N scaling, a few ulps of the largest
// gradient: bound 1e-5 normwise). G = 7 > 5 rows has two empty parts.
TEST(ShardedStep, GradientIsTheWholeBatchsWithinFloatError) {
  const auto whole = step_gradient(1, 0.0f);
  for (int64_t G : {2, 3, 7}) {
    const auto sharded = step_gradient(G, 0.0f);
    ASSERT_EQ(sharded.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i)
      EXPECT_TRUE(testing::close_rel(sharded[i], whole[i], 1e-5)) << "G " << G << ", parameter " << i;
  }
}

// With dropout each part draws its own masks from (the step's generator state, part): a repeated step
// gives the same bits, another generator state other masks.
TEST(ShardedStep, DropoutDrawsArePureFunctionsOfTheGeneratorStateAndPart) {
  const auto a = step_gradient(2, 0.3f), b = step_gradient(2, 0.3f), c = step_gradient(2, 0.3f, 5);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (const auto& g : a)
    for (float v : g) ASSERT_TRUE(std::isfinite(v));
}

TEST(ShardedStep, ShardsMustBeAMultipleOfTheProcesses) {
  train::Comm single;
  EXPECT_THROW(train::ShardedStep({}, 0, single), std::invalid_argument);
}

// Chunk boundaries sit at norm-block starts (offsets[i] + k·16384), the nearest to an even cut, and
// never go backwards; a bucket of small parameters cuts only between parameters.
TEST(ChunkBounds, SnapToTheNearestNormBlockStart) {
  using V = std::vector<int64_t>;
  // Parameters of 40000 (blocks at 0, 16384, 32768) and 100 elements: N = 40100.
  const V offsets{0, 40000, 40100};
  EXPECT_EQ(train::chunk_bounds(offsets, 0, 40100, 1), V({0, 40100}));
  EXPECT_EQ(train::chunk_bounds(offsets, 0, 40100, 2), V({0, 16384, 40100}));          // 20050: 16384 is nearer than 32768
  EXPECT_EQ(train::chunk_bounds(offsets, 0, 40100, 3), V({0, 16384, 32768, 40100}));   // 13366, 26733
  EXPECT_EQ(train::chunk_bounds(offsets, 0, 40100, 4), V({0, 16384, 16384, 32768, 40100}));  // 10025 → 16384; empty chunk
  // Small parameters: whole parameters per chunk; a bucket [b0, b1) in the middle.
  const V small{0, 10, 20, 30, 40, 50};
  EXPECT_EQ(train::chunk_bounds(small, 0, 50, 2), V({0, 20, 50}));  // 25: 20 and 30 tie, the lower
  EXPECT_EQ(train::chunk_bounds(small, 10, 40, 3), V({10, 20, 30, 40}));
  EXPECT_EQ(train::chunk_bounds(small, 0, 50, 8), V({0, 10, 10, 20, 20, 30, 40, 40, 50}));
}

// ---- mpirun against one process ----

using Mpirun = testing::MpirunTest;

const std::string kTinySeq2seq =
    " --arch seq2seq --d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --dropout 0.2 --batch-size 7 --threads 1"
    " --eval-every 4";

TEST_F(Mpirun, Seq2seqTsvWithDropoutTwoProcessesEqualOneWithTwoShards) {
  const std::string d = temp_dir("mpi_tsv");
  write_pairs(d + "/train.tsv", 40, 1);
  write_pairs(d + "/valid.tsv", 6, 2);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq + " --max-steps 8";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --out " + d + "/two", &out), 0) << out;
  EXPECT_NE(out.find("trained 8 steps"), std::string::npos) << out;  // rank 0 reports, once
  EXPECT_EQ(out.find("trained 8 steps"), out.rfind("trained 8 steps")) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  // The saved shard count is the resolved one: P.
  EXPECT_NE(read_file(d + "/two/config.json").find("\"grad_shards\": 2"), std::string::npos);
  // Four shards: one process of four parts, two of two, four of one.
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 4 --out " + d + "/one4", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --grad-shards 4 --out " + d + "/two4", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one4", d + "/two4"));
  ASSERT_EQ(run_command(mpirun(4) + kCli + args + " --grad-shards 4 --out " + d + "/four4", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one4", d + "/four4"));
}

// bf16 training (--dtype bf16) under mpirun: the same bits as one process with as many shards.
TEST_F(Mpirun, Bf16TwoProcessesEqualOneWithTwoShards) {
  const std::string d = temp_dir("mpi_bf16");
  write_pairs(d + "/train.tsv", 40, 21);
  write_pairs(d + "/valid.tsv", 6, 22);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                           " --max-steps 6 --dtype bf16";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  EXPECT_NE(read_file(d + "/two/config.json").find("\"dtype\": \"bf16\""), std::string::npos);
}

// A validation set of three evaluation batches (256 pairs each, the last of 88): under -np 2 rank 0
// forwards batches 0 and 2, rank 1 batch 1, and the history saved in the run's state is still bitwise
// the single process's (tests/train/evaluate_split_test.cc checks the split itself).
TEST_F(Mpirun, ValidationSplitOverTwoProcessesEqualsOneProcess) {
  const std::string d = temp_dir("mpi_valid");
  write_pairs(d + "/train.tsv", 40, 11);
  write_pairs(d + "/valid.tsv", 600, 12);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                           " --max-steps 8";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  ASSERT_EQ(run_command(mpirun(3) + kCli + args + " --grad-shards 3 --out " + d + "/three", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 3 --out " + d + "/one3", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one3", d + "/three"));
}

TEST_F(Mpirun, DecoderOnTextTwoProcessesEqualOneWithTwoShards) {
  const std::string d = temp_dir("mpi_text");
  {
    std::ofstream f(d + "/t.txt");
    for (int i = 0; i < 40; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  const std::string args = " train --text " + d + "/t.txt --arch decoder --d-model 16 --nhead 2 --layers 1 "
                           "--dim-feedforward 32 --dropout 0.1 --block-size 16 --batch-size 5 --max-steps 6 "
                           "--eval-every 3 --threads 1";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
}

// A SentencePiece language model: rank 0 alone trains the model and sends it to rank 1 (a broken
// broadcast leaves rank 1 nothing to load, and the run fails); the run equals one process's, the
// saved spm.model included.
TEST_F(Mpirun, SentencePieceModelTrainedOnceAndSharedEqualsOneProcess) {
  const std::string d = temp_dir("mpi_spm");
  const std::string args = " train --text /usr/share/common-licenses/GPL-3 --tokens spm --vocab-size 400 "
                           "--d-model 16 --nhead 2 --layers 1 --dim-feedforward 32 --block-size 16 --batch-size 5 "
                           "--max-steps 4 --eval-every 2 --valid-fraction 0.05 --threads 1";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  EXPECT_FALSE(read_file(d + "/one/spm.model").empty());
  EXPECT_EQ(read_file(d + "/one/spm.model"), read_file(d + "/two/spm.model"));
  // Rank 0 failing to train ends the job, the rank waiting for its model included.
  std::string args_bad = args;
  args_bad.replace(args_bad.find("--vocab-size 400"), 16, "--vocab-size 300");
  EXPECT_NE(run_command(mpirun(2) + kCli + args_bad + " --out " + d + "/bad 2>&1", &out), 0);
  EXPECT_NE(out.find("tfm: error (rank 0 of 2): /usr/share/common-licenses/GPL-3: a vocabulary of 300 pieces is too small"),
            std::string::npos)
      << out;
}

// The sharded optimizer step (each rank clips and steps only its chunk, then the parameters are
// gathered) with clipping active: a model whose FFN matrices (32 × 600 = 19,200 elements) are two norm
// blocks each, so chunk boundaries fall inside a parameter, at a block start. A --clip-norm of 0.01
// clips every step (the run differs from one whose bound is never reached); -np 2 and -np 3 equal one
// process with the same --grad-shards.
TEST_F(Mpirun, ClippingActiveEqualsOneProcess) {
  const std::string d = temp_dir("mpi_clip");
  write_pairs(d + "/train.tsv", 40, 21);
  write_pairs(d + "/valid.tsv", 6, 22);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" +
                           " --arch seq2seq --d-model 32 --nhead 2 --layers 1 --dim-feedforward 600 --dropout 0.1"
                           " --batch-size 7 --threads 1 --eval-every 3 --max-steps 6";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 6 --clip-norm 0.01 --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 6 --clip-norm 1000 --out " + d + "/unclipped", &out), 0) << out;
  EXPECT_FALSE(same_run(d + "/one", d + "/unclipped")) << "a clip norm of 0.01 should change the run";
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --grad-shards 6 --clip-norm 0.01 --out " + d + "/two", &out), 0)
      << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  ASSERT_EQ(run_command(mpirun(3) + kCli + args + " --grad-shards 6 --clip-norm 0.01 --out " + d + "/three", &out), 0)
      << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/three"));
}

// AdamW with weight decay on the matrices only (two parameter groups, decoupled decay): -np 2 equals
// one process, and so does an Adam (L2) run with clipping resumed in one process after 4 steps.
TEST_F(Mpirun, AdamwWithDecayOnMatricesEqualsOneProcess) {
  const std::string d = temp_dir("mpi_adamw");
  write_pairs(d + "/train.tsv", 40, 23);
  write_pairs(d + "/valid.tsv", 6, 24);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                           " --schedule constant --grad-shards 2";
  const std::string adamw = " --optimizer adamw --weight-decay 0.1 --decay-params matrices --max-steps 8";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + adamw + " --out " + d + "/one", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + adamw + " --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  const std::string adam = " --optimizer adam --weight-decay 0.01 --clip-norm 0.05";
  ASSERT_EQ(run_command(kCli + args + adam + " --max-steps 8 --out " + d + "/whole", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + adam + " --max-steps 4 --out " + d + "/split", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/split --max-steps 8 --threads 1", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/whole", d + "/split"));
}

// A learning rate of 1e30 makes the weights non-finite after the first step, and every later batch's
// loss: with --skip-nonfinite every rank skips the same batches (decided from the gathered losses)
// and gives up at the same step as one process, with clipping and without.
TEST_F(Mpirun, NonFiniteBatchesAreSkippedAlikeOnEveryRank) {
  const std::string d = temp_dir("mpi_nonfinite");
  write_pairs(d + "/train.tsv", 40, 25);
  write_pairs(d + "/valid.tsv", 6, 26);
  for (const char* clip : {"0", "1"}) {
    const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                             " --max-steps 12 --grad-shards 2 --lr 1e30 --warmup 0 --skip-nonfinite --clip-norm " + clip;
    std::string one, two;
    EXPECT_NE(run_command(kCli + args + " --out " + d + "/one" + clip, &one), 0) << one;
    EXPECT_NE(run_command(mpirun(2) + kCli + args + " --out " + d + "/two" + clip, &two), 0) << two;
    const std::string what = "consecutive batches had a non-finite loss or gradient (at step ";
    const auto a = one.find(what), b = two.find(what);
    ASSERT_NE(a, std::string::npos) << one;
    ASSERT_NE(b, std::string::npos) << two;
    EXPECT_EQ(one.substr(a, what.size() + 3), two.substr(b, what.size() + 3)) << "clip " << clip;
  }
}

// A run stopped after 4 steps under two processes and resumed in one equals the run of 8 steps in
// one process (constant schedule: the length does not shape the learning rate).
TEST_F(Mpirun, InterruptedUnderTwoProcessesResumedInOneEqualsTheUninterruptedRun) {
  const std::string d = temp_dir("mpi_resume");
  write_pairs(d + "/train.tsv", 40, 3);
  write_pairs(d + "/valid.tsv", 6, 4);
  const std::string args =
      " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq + " --schedule constant";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --max-steps 8 --out " + d + "/whole", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --max-steps 4 --out " + d + "/split", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/split --max-steps 8 --threads 1", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/whole", d + "/split"));
}

// Ctrl-C to mpirun: Open MPI sends SIGTERM to both ranks, they stop at the same step and rank 0
// writes one checkpoint there, which one process resumes (with the saved --grad-shards 2).
TEST_F(Mpirun, SigintToMpirunStopsEveryRankAtOneStepWithOneCheckpoint) {
  const std::string d = temp_dir("mpi_sigint");
  write_pairs(d + "/train.tsv", 40, 7);
  write_pairs(d + "/valid.tsv", 6, 8);
  const std::string script =
      mpirun(2) + kCli + " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
      " --max-steps 1000000 --out " + d + "/run 2>" + d + "/err & pid=$!; " +
      "for i in $(seq 600); do grep -q '^eval' " + d + "/err 2>/dev/null && break; sleep 0.1; done; " +
      "kill -INT $pid; wait $pid; echo rc=$?";
  std::string out;
  run_command(script, &out);
  const std::string err = read_file(d + "/err");
  const auto at = err.find("terminated (SIGTERM) at step ");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(at, err.rfind("terminated (SIGTERM) at step ")) << err;  // rank 0 alone reports
  const int64_t step = std::stoll(err.substr(at + 29));
  const io::SafeTensorsFile state = io::load_safetensors(d + "/run/trainer_state.safetensors");
  EXPECT_EQ(nlohmann::json::parse(state.metadata.at("tfm_trainer_state")).at("step"), step)
      << "the checkpoint is not at the reported step";
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/run --max-steps " + std::to_string(step + 2) + " --threads 1", &out), 0)
      << out;
  EXPECT_NE(out.find("trained " + std::to_string(step + 2) + " steps"), std::string::npos) << out;
}

// A stopped rank: the other gives up after --comm-timeout 2 with one clear line, and the job ends
// non-zero well before the run would have. Runs `train_args` under mpirun -np 2 in directory d,
// waits for rank 0's first evaluation line (both ranks are past their first step) and `pause` seconds
// more, then SIGSTOPs rank 1 (the child of mpirun whose environment says OMPI_COMM_WORLD_RANK=1); the
// job gets 60 s before the script kills it.
void expect_stopped_rank_detected(const std::string& d, const std::string& train_args, const char* pause) {
  const std::string script =
      Mpirun::mpirun(2) + kCli + " train" + train_args + " --max-steps 1000000 --comm-timeout 2 --out " + d +
      "/run 2>" + d + "/err & pid=$!; " +
      "for i in $(seq 600); do grep -q '^eval' " + d + "/err 2>/dev/null && break; sleep 0.1; done; sleep " + pause + "; " +
      "for p in $(pgrep -P $pid); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && rank=$p; done; " +
      "kill -STOP $rank; start=$(date +%s); " +
      "( sleep 60; kill -KILL $(pgrep -P $pid) $pid ) >/dev/null 2>&1 & guard=$!; " +
      "wait $pid; rc=$?; echo rc=$rc seconds=$(( $(date +%s) - start )); " +
      "kill -KILL $rank $guard 2>/dev/null; true";
  std::string out;
  run_command(script, &out);
  EXPECT_EQ(out.find("rc=0 "), std::string::npos) << out;
  EXPECT_NE(out.find("rc="), std::string::npos) << out;
  const auto s = out.find("seconds=");
  ASSERT_NE(s, std::string::npos) << out;
  EXPECT_LE(std::stoi(out.substr(s + 8)), 30) << out;
  const std::string err = read_file(d + "/err");
  EXPECT_NE(err.find("within --comm-timeout"), std::string::npos) << err;
}

// The budget schedule and the weights' average across processes: rank 0 fixes the step count and every
// rank adopts it; each rank averages the elements it steps, the average gathered before evaluations
// and checkpoints. The runs' clock ticks 0.125 s per step (TFM_TEST_SECONDS_PER_STEP, the CLI's test
// hook), so the count is the same for both: window 10–60 (warmup 5), 12.5 − 7.5 = 5 s left, 100 steps.
TEST_F(Mpirun, BudgetScheduleAndEmaTwoProcessesEqualOneWithTwoShards) {
  const std::string d = temp_dir("mpi_budget");
  write_pairs(d + "/train.tsv", 60, 1);
  write_pairs(d + "/valid.tsv", 10, 2);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                           " --warmup 5 --time-budget 12.5 --min-lr 1e-4 --ema 0.99";
  const std::string tick = "TFM_TEST_SECONDS_PER_STEP=0.125 ";
  std::string out;
  ASSERT_EQ(run_command(tick + kCli + args + " --grad-shards 2 --out " + d + "/one 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("100 steps fitted"), std::string::npos) << out;
  ASSERT_EQ(run_command(tick + mpirun(2) + "-x TFM_TEST_SECONDS_PER_STEP " + kCli + args + " --out " + d + "/two 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("100 steps fitted"), std::string::npos) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
  const auto state = [&](const std::string& dir) {
    const io::SafeTensorsFile f = io::load_safetensors(dir + "/trainer_state.safetensors");
    return nlohmann::json::parse(f.metadata.at("tfm_trainer_state"));
  };
  EXPECT_EQ(state(d + "/two").at("budget_steps"), 100);
  EXPECT_EQ(state(d + "/two").at("ema_updates"), 100);
}

// A budget that ends the run before any count is fixed (a constant schedule): rank 0's clock, read before each
// step and exchanged with it, stops every rank after the same step as one process's clock read at the same point.
TEST_F(Mpirun, TimeBudgetWithoutAFittedCountStopsAtTheSameStepAsOneProcess) {
  const std::string d = temp_dir("mpi_budget_constant");
  write_pairs(d + "/train.tsv", 60, 1);
  write_pairs(d + "/valid.tsv", 10, 2);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq +
                           " --warmup 5 --schedule constant --time-budget 3";
  const std::string tick = "TFM_TEST_SECONDS_PER_STEP=0.125 ";
  std::string out;
  ASSERT_EQ(run_command(tick + kCli + args + " --grad-shards 2 --out " + d + "/one 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("trained 25 steps"), std::string::npos) << out;
  ASSERT_EQ(
      run_command(tick + mpirun(2) + "-x TFM_TEST_SECONDS_PER_STEP " + kCli + args + " --out " + d + "/two 2>&1", &out),
      0)
      << out;
  EXPECT_NE(out.find("trained 25 steps"), std::string::npos) << out;
  EXPECT_TRUE(same_run(d + "/one", d + "/two"));
}

// Ranks that would not run the same steps are refused before the first, each naming what differs: another model
// size (its exchanges would pair buffers of other sizes), another --lr, another --bucket-mb, another training file,
// a stale copy of the run directory on --resume. Launched as one job of two programs (mpirun's "A : B").
TEST_F(Mpirun, RanksThatDisagreeAreRefusedNamingWhat) {
  const std::string d = temp_dir("mpi_disagree");
  write_pairs(d + "/train.tsv", 40, 1);
  write_pairs(d + "/other.tsv", 40, 9);
  write_pairs(d + "/valid.tsv", 6, 2);
  const std::string model = " --arch seq2seq --nhead 2 --layers 1 --dim-feedforward 32 --batch-size 7 --threads 1";
  const std::string args = " --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + model;
  const auto both = [&](const std::string& a, const std::string& b, const std::string& out_dir) {
    std::string out;
    const int rc = run_command(mpirun(1) + kCli + " train" + a + " --out " + out_dir + " : -np 1 " + kCli + " train" +
                                   b + " --out " + out_dir + " 2>&1",
                               &out);
    EXPECT_NE(rc, 0) << out;
    return out;
  };
  const std::string config = "does not agree with process 0 on the configuration";
  const std::string run = args + " --d-model 16 --max-steps 4";
  EXPECT_NE(both(run, args + " --d-model 32 --max-steps 4", d + "/a").find(config), std::string::npos);
  EXPECT_NE(both(run, run + " --lr 0.5", d + "/b").find(config), std::string::npos);
  EXPECT_NE(both(run, run + " --bucket-mb 1", d + "/c").find(config), std::string::npos);
  const std::string other =
      " --train " + d + "/other.tsv --valid " + d + "/valid.tsv" + model + " --d-model 16 --max-steps 4";
  EXPECT_NE(both(run, other, d + "/e").find("does not agree with process 0 on the data"), std::string::npos);
  // A run of 4 steps and its copy taken at step 2: both resumed, one from each.
  std::string out;
  ASSERT_EQ(run_command(kCli + " train" + args + " --d-model 16 --max-steps 2 --grad-shards 2 --out " + d + "/run 2>&1",
                        &out),
            0)
      << out;
  std::filesystem::copy(d + "/run", d + "/stale", std::filesystem::copy_options::recursive);
  ASSERT_EQ(run_command(kCli + " train --resume " + d + "/run --max-steps 4 2>&1", &out), 0) << out;
  const std::string weights = read_file(d + "/run/model.safetensors");
  EXPECT_NE(run_command(mpirun(1) + kCli + " train --resume " + d + "/run --max-steps 6 : -np 1 " + kCli +
                            " train --resume " + d + "/stale --max-steps 6 2>&1",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("does not agree with process 0 on the starting point"), std::string::npos) << out;
  EXPECT_EQ(read_file(d + "/run/model.safetensors"), weights) << "the run is left as it was";
}

TEST_F(Mpirun, StoppedRankMakesTheJobFailWithinTheCommTimeout) {
  const std::string d = temp_dir("mpi_stop");
  write_pairs(d + "/train.tsv", 40, 5);
  write_pairs(d + "/valid.tsv", 6, 6);
  expect_stopped_rank_detected(d, " --train " + d + "/train.tsv --valid " + d + "/valid.tsv" + kTinySeq2seq, "0");
  EXPECT_NE(read_file(d + "/err").find("within --comm-timeout 2 s"), std::string::npos);
}

// The same while the ranks evaluate: with a validation set far larger than a step's batch and an
// evaluation after every step, rank 1 is stopped (most likely) inside its share of an evaluation,
// and rank 0 must not wait for its records forever.
TEST_F(Mpirun, StoppedRankDuringAnEvaluationIsDetected) {
  const std::string d = temp_dir("mpi_stop_eval");
  write_pairs(d + "/train.tsv", 40, 5);
  write_pairs(d + "/valid.tsv", 60000, 6);
  expect_stopped_rank_detected(d,
                               " --train " + d + "/train.tsv --valid " + d + "/valid.tsv" +
                                   kTinySeq2seq.substr(0, kTinySeq2seq.find(" --eval-every")) + " --eval-every 1",
                               "0.2");
}

TEST_F(Mpirun, ShardsNotAMultipleOfTheProcessesIsAnError) {
  const std::string d = temp_dir("mpi_bad");
  std::string out;
  EXPECT_NE(run_command(mpirun(2) + kCli + " train --task reverse --arch encoder --d-model 16 --nhead 2 --layers 1 "
                                            "--max-steps 1 --threads 1 --grad-shards 3 --out " + d + "/run",
                        &out),
            0);
  EXPECT_NE(out.find("grad_shards 3 is not a multiple of the 2 processes"), std::string::npos) << out;
}

// A usage error, which every copy finds alike, is said once (by rank 0), not once per process; every copy
// still fails. So is an error in resolving the options that every process found alike, here a run directory
// missing on every node (one that differs by process is said by each that found it, with its rank:
// tests/mpi/launch_test.cc).
TEST_F(Mpirun, UsageErrorIsPrintedOnce) {
  const std::string d = temp_dir("mpi_once");
  const auto errors = [](const std::string& out) {
    size_t n = 0;
    for (size_t at = out.find("tfm: error:"); at != std::string::npos; at = out.find("tfm: error:", at + 1)) ++n;
    return n;
  };
  std::string out;
  EXPECT_NE(run_command(mpirun(2) + kCli + " train --bogus-option 1", &out), 0);
  EXPECT_EQ(errors(out), 1u) << out;
  EXPECT_NE(out.find("--bogus-option"), std::string::npos) << out;
  EXPECT_NE(run_command(mpirun(2) + kCli + " train --resume " + d + "/none", &out), 0);
  EXPECT_EQ(errors(out), 1u) << out;
  EXPECT_NE(out.find(d + "/none/config.json"), std::string::npos) << out;
}

// A build without MPI refuses to be one of several copies a launcher started.
TEST(NoMpi, LaunchedAsSeveralProcessesIsAnError) {
  if (train::Comm::available()) GTEST_SKIP() << "built with MPI: the refusal is for builds without it";
  const std::string d = temp_dir("nompi");
  std::string out;
  EXPECT_NE(run_command("OMPI_COMM_WORLD_SIZE=2 " + kCli + " train --task reverse --max-steps 1 --out " + d + "/run", &out), 0);
  EXPECT_NE(out.find("built without MPI"), std::string::npos) << out;
}

}  // namespace
}  // namespace tfm
