// tests/mpi/buckets_test.cc — the gradient exchange cut into buckets (src/train/buckets.h, tfm train
// --bucket-mb) under mpirun against one process with the same --grad-shards, bit for bit. Tiny
// buckets make many of them: with --bucket-mb 0.02 (5242 floats) the model below (92057 parameters)
// has at least five, since each of its four feed-forward matrices (32 × 600 = 19200 floats, two norm
// blocks) closes one, and these buckets are cut at the block start 16384, and under -np 3 the buckets of small parameters have empty chunks; with
// --bucket-mb 0.0001 (26 floats) nearly every parameter is a bucket. Skipped, saying why, without
// MPI or mpirun (as tests/mpi/data_parallel_test.cc).
#include <gtest/gtest.h>

#include <fstream>

#include "mpi/mpi_test_util.h"
#include "test_util.h"
#include "tfm/train/comm.h"

namespace tfm {
namespace {

using testing::run_command;
using testing::temp_dir;
using testing::read_file;
using testing::same_run;
using testing::write_pairs;

const std::string kCli = TFM_CLI_PATH;

using MpirunBuckets = testing::MpirunTest;

// Dropout on and clipping on (the norm's block partials come from the chunks' owners).
TEST_F(MpirunBuckets, ManyBucketsUnderTwoAndThreeProcessesEqualOneProcess) {
  const std::string d = temp_dir("mpi_buckets");
  write_pairs(d + "/train.tsv", 40, 21);
  write_pairs(d + "/valid.tsv", 6, 22);
  const std::string args = " train --train " + d + "/train.tsv --valid " + d + "/valid.tsv" +
                           " --arch seq2seq --d-model 32 --nhead 2 --layers 1 --dim-feedforward 600 --dropout 0.2"
                           " --batch-size 7 --threads 1 --eval-every 4 --clip-norm 0.5 --max-steps 6";
  std::string out;
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 2 --out " + d + "/one2", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --bucket-mb 0.02 --out " + d + "/two", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one2", d + "/two"));
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 3 --out " + d + "/one3", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(3) + kCli + args + " --bucket-mb 0.02 --out " + d + "/three", &out), 0) << out;
  EXPECT_TRUE(same_run(d + "/one3", d + "/three"));
  // Two parts per process: the first part's gradients are staged after its backward, the second's
  // during it; and one bucket of a few floats per parameter.
  ASSERT_EQ(run_command(kCli + args + " --grad-shards 4 --out " + d + "/one4", &out), 0) << out;
  ASSERT_EQ(run_command(mpirun(2) + kCli + args + " --grad-shards 4 --bucket-mb 0.0001 --out " + d + "/two4", &out), 0)
      << out;
  EXPECT_TRUE(same_run(d + "/one4", d + "/two4"));
}

TEST(BucketMb, OutOfRangeIsAnError) {
  const std::string d = temp_dir("bucket_mb_bad");
  std::string out;
  EXPECT_NE(run_command(kCli + " train --task reverse --max-steps 1 --bucket-mb 0 --out " + d + "/run", &out), 0);
  EXPECT_NE(out.find("--bucket-mb must be in (0, 1024] MiB"), std::string::npos) << out;
}

}  // namespace
}  // namespace tfm
