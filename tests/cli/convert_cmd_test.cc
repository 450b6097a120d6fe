// tests/cli/convert_cmd_test.cc — `tfm import gpt2` and `tfm export gpt2` through the executable: the
// report lines, the way back, and the one-line errors with a non-zero exit (the conversions themselves
// are tests/models/gpt2_test.cc's).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "test_util.h"
#include "tfm/data/bpe.h"
#include "tfm/io/safetensors.h"

namespace {

using tfm::testing::run_command;
using tfm::testing::slurp;
using tfm::testing::spit;
using tfm::testing::with_file_size_limit;
namespace fs = std::filesystem;

const std::string kCli = TFM_CLI_PATH;

// A GPT-2 folder of one layer, d 8, 2 heads, 16 positions, the 256 byte symbols and <|endoftext|>, and
// a vocabulary padded to 260 rows (as nanoGPT pads).
std::string tiny_gpt2() {
  const std::string dir = tfm::testing::temp_dir("cli_gpt2");
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[tfm::data::ByteLevelBpe::byte_symbol(static_cast<uint8_t>(b))] = b;
  v["<|endoftext|>"] = 256;
  spit(dir + "/encoder.json", v.dump());
  spit(dir + "/vocab.bpe", "#version: 0.2\n");
  spit(dir + "/config.json", R"({"n_embd": 8, "n_head": 2, "n_layer": 1, "n_positions": 16, "vocab_size": 260})");
  tfm::NamedTensors s;
  uint64_t seed = 1;
  const auto add = [&](const std::string& k, const tfm::Shape& shape) {
    s.insert(k, tfm::testing::random_tensor(shape, seed++, -0.1f, 0.1f));
  };
  add("wte.weight", {260, 8});
  add("wpe.weight", {16, 8});
  for (const char* ln : {"h.0.ln_1", "h.0.ln_2", "ln_f"}) add(std::string(ln) + ".weight", {8}), add(std::string(ln) + ".bias", {8});
  add("h.0.attn.c_attn.weight", {8, 24}), add("h.0.attn.c_attn.bias", {24});
  add("h.0.attn.c_proj.weight", {8, 8}), add("h.0.attn.c_proj.bias", {8});
  add("h.0.mlp.c_fc.weight", {8, 32}), add("h.0.mlp.c_fc.bias", {32});
  add("h.0.mlp.c_proj.weight", {32, 8}), add("h.0.mlp.c_proj.bias", {8});
  tfm::io::save_safetensors(dir + "/model.safetensors", s, {{"format", "pt"}});
  return dir;
}

TEST(ConvertCli, ImportReportsGenerateRunsExportComesBack) {
  const std::string hf = tiny_gpt2(), root = tfm::testing::temp_dir("cli_gpt2_out");
  std::string out;
  ASSERT_EQ(run_command(kCli + " import gpt2 " + hf + " --out " + root + "/m", &out), 0) << out;
  EXPECT_NE(out.find("GPT-2 imported from " + hf + ": 16 tensors mapped, 0 buffers ignored (unprefixed keys, tied head)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("260 rows for 257 tokens: the 3 padded rows are never generated"), std::string::npos) << out;
  ASSERT_EQ(run_command(kCli + " generate --model " + root + "/m --prompt hi --max-new-tokens 5 --seed 2 --ignore-eos", &out), 0)
      << out;
  EXPECT_EQ(out.rfind("hi", 0), 0u) << out;
  ASSERT_EQ(run_command(kCli + " export gpt2 " + root + "/m --out " + root + "/back", &out), 0) << out;
  for (const char* f : {"model.safetensors", "config.json", "encoder.json", "vocab.bpe"})
    EXPECT_EQ(slurp(root + "/back/" + f), slurp(hf + "/" + f)) << f;
  // An existing output: refused by name, exit 1, untouched; --force replaces it.
  const std::string before = slurp(root + "/back/config.json");
  EXPECT_NE(run_command(kCli + " export gpt2 " + root + "/m --out " + root + "/back 2>&1", &out), 0);
  EXPECT_NE(out.find(root + "/back: exists"), std::string::npos) << out;
  EXPECT_EQ(slurp(root + "/back/config.json"), before);
  EXPECT_EQ(run_command(kCli + " export gpt2 " + root + "/m --out " + root + "/back --force", &out), 0) << out;
}

TEST(ConvertCli, BadInputIsOneLineAndNonZero) {
  const std::string hf = tiny_gpt2(), root = tfm::testing::temp_dir("cli_gpt2_bad");
  std::string out;
  EXPECT_NE(run_command(kCli + " import gpt2 " + root + "/nowhere --out " + root + "/m 2>&1", &out), 0);
  EXPECT_NE(out.find(root + "/nowhere: not a directory"), std::string::npos) << out;
  spit(hf + "/config.json", R"({"n_embd": 8, "n_head": 3, "n_layer": 1, "n_positions": 16, "vocab_size": 260})");
  EXPECT_NE(run_command(kCli + " import gpt2 " + hf + " --out " + root + "/m 2>&1", &out), 0);
  EXPECT_NE(out.find(hf + "/config.json: n_embd 8 is not divisible by n_head 3"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(root + "/m"));
  EXPECT_NE(run_command(kCli + " import gpt2 " + hf + " 2>&1", &out), 0);  // --out is required
  EXPECT_NE(out.find("--out"), std::string::npos) << out;
  EXPECT_NE(run_command(kCli + " export gpt2 " + hf + " --out " + root + "/x 2>&1", &out), 0);  // not a tfm directory
  EXPECT_NE(out.find(hf), std::string::npos) << out;
}

// A write that fails inside the output (a full disk; here a file-size limit the weights exceed) is said of --out,
// the directory asked for, not of the hidden staging directory the files were written in (deleted by then); nothing
// is left beside --out.
TEST(ConvertCli, WriteErrorsNameTheOutNotItsStagingDirectory) {
  const std::string hf = tiny_gpt2(), root = tfm::testing::temp_dir("cli_gpt2_efbig");
  std::string out;
  ASSERT_EQ(run_command(kCli + " import gpt2 " + hf + " --out " + root + "/m", &out), 0) << out;
  fs::create_directories(root + "/full");
  for (const auto& [cmd, dest] : std::vector<std::pair<std::string, std::string>>{
           {" import gpt2 " + hf, root + "/full/x"}, {" export gpt2 " + root + "/m", root + "/full/y"}}) {
    int rc = 0;
    const std::string command = kCli + cmd + " --out " + dest;  // (clang 14 captures no structured binding)
    with_file_size_limit(1024, [&] { rc = run_command(command, &out); });
    EXPECT_EQ(rc, 1) << out;
    EXPECT_EQ(out.rfind("tfm: error: " + dest + "/", 0), 0u) << out;
    EXPECT_NE(out.find(": write failed: File too large\n"), std::string::npos) << out;
    EXPECT_EQ(out.find(".tmp."), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
  EXPECT_TRUE(fs::is_empty(root + "/full"));
  fs::remove_all(root);
  fs::remove_all(hf);
}

// --force never replaces a directory a running `tfm train` holds the lock of (its checkpoints would land beside the
// new files, or the imported model's config beside the run's weights), nor one another `tfm quantize`, `import` or
// `export` is replacing (which holds it too): refused as tfm quantize refuses it, the directory untouched; once the
// lock is released it goes ahead.
TEST(ConvertCli, ForceRefusesADirectoryARunOrAnotherWriterHolds) {
  const std::string hf = tiny_gpt2(), root = tfm::testing::temp_dir("cli_gpt2_locked");
  std::string out;
  ASSERT_EQ(run_command(kCli + " import gpt2 " + hf + " --out " + root + "/m", &out), 0) << out;
  ASSERT_EQ(run_command(kCli + " export gpt2 " + root + "/m --out " + root + "/back", &out), 0) << out;
  for (const auto& [cmd, dest] : std::vector<std::pair<std::string, std::string>>{
           {" import gpt2 " + hf, root + "/m"}, {" export gpt2 " + root + "/m", root + "/back"}}) {
    const std::string config = tfm::testing::slurp(dest + "/config.json");
    {
      tfm::io::DirectoryLock run(dest, "held by the test, as a running tfm train holds it");
      EXPECT_EQ(run_command(kCli + cmd + " --out " + dest + " --force", &out), 1) << out;
      EXPECT_EQ(out, "tfm: error: " + dest +
                         ": a tfm train is running in this directory, or a tfm quantize, import or export is replacing "
                         "it (it holds the directory's lock): wait for it to end, or write into another --out\n");
      EXPECT_EQ(tfm::testing::slurp(dest + "/config.json"), config);
    }
    EXPECT_EQ(run_command(kCli + cmd + " --out " + dest + " --force", &out), 0) << out;
  }
  fs::remove_all(root);
  fs::remove_all(hf);
}

}  // namespace
