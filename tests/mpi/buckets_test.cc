// tests/mpi/buckets_test.cc — the gradient exchange cut into buckets (src/train/buckets.h, tfm train
// --bucket-mb) under mpirun against one process with the same --grad-shards, bit for bit. Tiny
// buckets make many of them: with --bucket-mb 0.02 (5242 floats) the model below (92057 parameters)
// has at least five, since each of its four feed-forward matrices (32 × 600 = 19200 floats, two norm
// blocks) closes one, and these buckets are cut at the block start 16384, and under -np 3 the buckets of small parameters have empty chunks; with
// --bucket-mb 0.0001 (26 floats) nearly every parameter is a bucket. Skipped, saying why, without
// MPI or mpirun (as tests/mpi/data_parallel_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "tfm/train/comm.h"

namespace tfm {
namespace {

using testing::run_command;
using testing::temp_dir;

const std::string kCli = TFM_CLI_PATH;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// trainer_state.safetensors as (tensor bytes, header without the wall-clock fields).
std::pair<std::string, nlohmann::json> state_without_clock(const std::string& path) {
  const std::string b = read_file(path);
  if (b.size() < 8) return {"", nlohmann::json()};
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  nlohmann::json h = nlohmann::json::parse(b.substr(8, n));
  nlohmann::json st = nlohmann::json::parse(h["__metadata__"]["tfm_trainer_state"].get<std::string>());
  st.erase("elapsed");
  for (auto& row : st["history"]) {
    row.erase("tokens_per_sec");
    row.erase("elapsed_seconds");
  }
  h["__metadata__"]["tfm_trainer_state"] = st;
  return {b.substr(8 + n), h};
}

::testing::AssertionResult same_run(const std::string& a, const std::string& b) {
  if (read_file(a + "/model.safetensors").empty()) return ::testing::AssertionFailure() << a << ": no model";
  if (read_file(a + "/model.safetensors") != read_file(b + "/model.safetensors"))
    return ::testing::AssertionFailure() << a << "/model.safetensors and " << b << "/model.safetensors differ";
  const auto [ta, ha] = state_without_clock(a + "/trainer_state.safetensors");
  const auto [tb, hb] = state_without_clock(b + "/trainer_state.safetensors");
  if (ta != tb) return ::testing::AssertionFailure() << "the tensors of the trainer states of " << a << " and " << b << " differ";
  if (ha != hb) return ::testing::AssertionFailure() << "trainer states differ:\n" << ha.dump() << "\n" << hb.dump();
  return ::testing::AssertionSuccess();
}

class MpirunBuckets : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!train::Comm::available()) GTEST_SKIP() << "tfm was built without MPI (TFM_MPI=OFF): nothing to launch";
    if (run_command("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not on the PATH (openmpi-bin)";
  }
  static std::string mpirun(int np) {
    return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np " +
           std::to_string(np) + " ";
  }
};

void write_pairs(const std::string& path, int n, uint64_t seed) {
  testing::Rng g(seed);
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    std::string w;
    for (int k = 0, len = g.uniform_int(2, 6); k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
    f << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
  }
}

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
