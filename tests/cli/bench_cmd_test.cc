// tests/cli/bench_cmd_test.cc — `tfm bench` as bench/compare_torch.py uses it: --json prints one
// JSON object with the keys that script reads, the text mode four lines, and a bad option exits
// non-zero with one line naming it. Timings are not checked (one tiny iteration), only the surface.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace {

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tfm::testing::temp_dir("bench_cli");
    config_ = dir_ + "/enc.json";
    tfm::testing::spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2,
                                    "dim_feedforward": 16, "batch_first": true})");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  int run(const std::string& args, std::string* out) {
    return tfm::testing::run_command(std::string(TFM_CLI_PATH) + " bench --config " + config_ + " " + args, out);
  }
  std::string dir_, config_;
};

TEST_F(BenchCli, JsonHasTheKeysCompareTorchReads) {
  for (const char* mode : {"infer", "train"}) {
    std::string out;
    ASSERT_EQ(run(std::string("--batch 2 --seq 3 --iters 1 --warmup 0 --threads 1 --json --mode ") + mode, &out), 0)
        << out;
    const nlohmann::json j = nlohmann::json::parse(out);
    for (const char* key : {"ms_median", "tokens_per_s", "gflops", "peak_rss_mb", "ms_min", "ms_max",
                            "gflop_per_iter", "iters", "mode", "dtype", "module"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << out;
    EXPECT_EQ(j.at("mode"), mode);
    EXPECT_EQ(j.at("dtype"), "f32");
    EXPECT_EQ(j.at("module"), "TransformerEncoderLayer");
    EXPECT_EQ(j.at("iters"), 1);
  }
}

TEST_F(BenchCli, TextReport) {
  std::string out;
  ASSERT_EQ(run("--batch 2 --seq 3 --src-seq 4 --iters 1 --warmup 0 --threads 1 --dtype bf16", &out), 0) << out;
  EXPECT_EQ(out.rfind("TransformerEncoderLayer infer bf16  B=2 N=3 S=4  iters=1 (warmup 0)\n", 0), 0u) << out;
  for (const char* part : {"  median ", " ms  (min ", " tokens/s ", " GFLOP/s (", "  peak RSS "})
    EXPECT_NE(out.find(part), std::string::npos) << part << " not in:\n" << out;
}

TEST_F(BenchCli, BadOptionsFailWithOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"--batch 2 --seq 3 --mode fast", "unknown bench mode 'fast' (expected infer or train)"},
      {"--batch 0 --seq 3", "batch and seq must be positive"},
      {"--batch 2 --seq 3 --mode train --dtype int8", "int8 is for mode infer only"}};
  for (const auto& [args, part] : cases) {
    std::string out;
    EXPECT_NE(run(args, &out), 0) << args;
    EXPECT_EQ(out.rfind("tfm: error: ", 0), 0u) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "not one line: " << out;
    EXPECT_NE(out.find(part), std::string::npos) << out;
  }
}

}  // namespace
