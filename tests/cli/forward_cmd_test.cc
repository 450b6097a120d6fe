// tests/cli/forward_cmd_test.cc — every bad input to `tfm forward` (issue 2, and docs/errors.md)
// exits non-zero with ONE line on stderr naming the file and the key, never by a signal, and
// leaves no output file behind.
//
// Each case starts from a valid run (tests/fixtures/parity/enc_layer_defaults: a
// TransformerEncoderLayer d_model 8, nhead 2, src (S 3, B 2, D 8)) copied into a fresh directory,
// breaks exactly one thing, and checks the message against the row of docs/errors.md it documents.
// To add a case: a TEST_F that breaks one file with the helpers below and calls expect_error() with
// the substrings the one line must contain (always the offending file, and the key when there is one).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"
#include "tfm/io/safetensors.h"

namespace fs = std::filesystem;
using tfm::Tensor;

namespace {

const std::string kFixture = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/parity/enc_layer_defaults";

using tfm::testing::slurp;
using tfm::testing::spit;

// u64 little-endian header length, header text, data bytes: a hand-made safetensors file.
std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

struct Result {
  bool signaled = false;
  int code = 0;             // exit code when not signaled
  std::string out, err;     // stdout, stderr
};

// Runs the CLI with stdout and stderr captured separately (stderr through a file).
Result run_cli(const std::string& args, const std::string& dir) {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd = std::string(TFM_CLI_PATH) + " " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.signaled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) >= 128);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_path);
  return r;
}

class ForwardErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tfm::testing::temp_dir("forward_errors");
    for (const char* f : {"config.json", "weights.safetensors", "inputs.safetensors"})
      fs::copy_file(kFixture + "/" + f, dir_ + "/" + f);
    config_ = dir_ + "/config.json";
    weights_ = dir_ + "/weights.safetensors";
    inputs_ = dir_ + "/inputs.safetensors";
    output_ = dir_ + "/out.safetensors";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string args() const {
    return "forward --config " + config_ + " --weights " + weights_ + " --inputs " + inputs_ + " --output " + output_ +
           extra_;
  }

  // Loads a safetensors file, lets `edit` change the tensor list, writes it back.
  void rewrite(const std::string& path, const std::function<void(tfm::NamedTensors&)>& edit) {
    tfm::NamedTensors list = tfm::io::load_safetensors(path).tensors;
    edit(list);
    tfm::io::save_safetensors(path, list);
  }

  // The one-line contract: non-zero exit (not a signal), nothing on stdout, exactly one line on
  // stderr starting "tfm: error: " and holding every one of `parts`, and no output file.
  void expect_error(const std::vector<std::string>& parts) {
    const Result r = run_cli(args(), dir_);
    EXPECT_FALSE(r.signaled) << "killed by a signal / crashed; stderr:\n" << r.err;
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.back(), '\n') << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line:\n" << r.err;
    EXPECT_EQ(r.err.rfind("tfm: error: ", 0), 0u) << r.err;
    for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' not in: " << r.err;
    EXPECT_FALSE(fs::exists(output_)) << "an output file was written despite the error";
  }

  std::string dir_, config_, weights_, inputs_, output_, extra_;
};

// The unbroken case runs, so every failure below is caused by its one change.
TEST_F(ForwardErrors, ValidRunSucceeds) {
  const Result r = run_cli(args(), dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(tfm::io::load_safetensors(output_).contains("output"));
}
// --dtype bf16 runs too, and its output is the f32 output up to bfloat16 rounding (docs/bf16.md).
TEST_F(ForwardErrors, Bf16RunSucceeds) {
  ASSERT_EQ(run_cli(args(), dir_).code, 0);
  const Tensor f32 = tfm::io::load_safetensors(output_).at("output");
  extra_ = " --dtype bf16";
  const Result r = run_cli(args(), dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const Tensor bf16 = tfm::io::load_safetensors(output_).at("output");
  const double rel = tfm::testing::rel_error(bf16, f32);
  EXPECT_GT(rel, 0.0);
  EXPECT_LE(rel, 8.0 / 256.0);
}

// ---- files that do not exist ------------------------------------------------------------------
TEST_F(ForwardErrors, MissingConfigFile) {
  config_ = dir_ + "/nope.json";
  expect_error({config_, "No such file or directory"});
}
TEST_F(ForwardErrors, MissingWeightsFile) {
  weights_ = dir_ + "/nope.safetensors";
  expect_error({weights_, "No such file or directory"});
}
TEST_F(ForwardErrors, MissingInputsFile) {
  inputs_ = dir_ + "/nope.safetensors";
  expect_error({inputs_, "No such file or directory"});
}
TEST_F(ForwardErrors, WeightsPathIsADirectory) {
  weights_ = dir_;
  expect_error({dir_});
}

// ---- the config -------------------------------------------------------------------------------
TEST_F(ForwardErrors, BadJson) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8,)");
  expect_error({config_, "invalid JSON"});
}
// fuzz/regressions/config_number_overflow.json: a number beyond double's range is a JSON error
// with the config's name, not an escaped library exception.
TEST_F(ForwardErrors, ConfigNumberOverflow) {
  spit(config_, R"({"module": "MultiheadAttention", "embed_dim": 1e400})");
  expect_error({config_, "invalid JSON"});
}
TEST_F(ForwardErrors, ConfigNotAnObject) {
  spit(config_, "[1, 2]");
  expect_error({config_, "object"});
}
// The output replaces its file: the weights (or the config, or the inputs) given as --output are refused, kept.
TEST_F(ForwardErrors, OutputThatIsAnInputIsRefused) {
  const std::string weights = tfm::testing::slurp(weights_);
  output_ = weights_;
  const Result r = run_cli(args(), dir_);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "tfm: error: --output " + weights_ +
                       " is the --weights file: writing the output would replace it (choose another --output)\n");
  EXPECT_EQ(tfm::testing::slurp(weights_), weights);
}
// A path with a newline (or any control byte) stays on the error's one line, escaped as the library quotes names.
TEST_F(ForwardErrors, ControlBytesInAPathStayOnOneLine) {
  config_ = "'" + dir_ + "/bad\nname.json'";  // a literal newline inside the shell's quotes
  expect_error({dir_ + "/bad\\x0aname.json: open failed"});
}

TEST_F(ForwardErrors, MissingModuleKey) {
  spit(config_, R"({"d_model": 8, "nhead": 2})");
  expect_error({config_, ": config: missing required key 'module'"});
}
TEST_F(ForwardErrors, UnknownModule) {
  spit(config_, R"({"module": "TransformerEncoderLayre", "d_model": 8, "nhead": 2})");
  expect_error({config_, "unknown module 'TransformerEncoderLayre'"});
}
// fuzz/regressions/config_newline_in_module_name.json (found by fuzz_config): a name with a control
// character (JSON "\n") is escaped, so the message stays on one line.
TEST_F(ForwardErrors, ControlCharacterInModuleName) {
  spit(config_, R"({"module": "Trans\nformerEncoderLayer", "d_model": 8, "nhead": 2})");
  expect_error({config_, "unknown module 'Trans\\x0aformerEncoderLayer'"});
}
TEST_F(ForwardErrors, ControlCharacterInUnknownKey) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "d\u001bmodel": 8})");
  expect_error({config_, "unknown key 'd\\x1bmodel'"});
}
TEST_F(ForwardErrors, UnknownDtype) {
  extra_ = " --dtype f16";
  expect_error({"unknown precision 'f16' (expected f32, bf16 or int8)"});
}
// int8 is inference only: gradients asked for with --dtype int8 are refused, not silently computed in f32.
TEST_F(ForwardErrors, Int8WithGradOutput) {
  extra_ = " --dtype int8";
  rewrite(inputs_, [](auto& list) { list.insert("grad_output", Tensor::zeros({3, 2, 7})); });
  expect_error({inputs_, "'grad_output' asks for gradients, which int8 (inference only) does not compute; use f32 or bf16"});
}
TEST_F(ForwardErrors, UnknownActivation) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "activation": "tanh"})");
  expect_error({config_, "tanh"});
}
TEST_F(ForwardErrors, DModelNotDivisibleByNhead) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 3})");
  expect_error({config_, "d_model 8 is not divisible by nhead 3"});
}
TEST_F(ForwardErrors, EmbedDimNotDivisibleByNumHeads) {
  spit(config_, R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 3})");
  expect_error({config_, "embed_dim 8 is not divisible by num_heads 3"});
}
TEST_F(ForwardErrors, UnknownConfigKey) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "n_head": 2})");
  expect_error({config_, "unknown key 'n_head'"});
}
TEST_F(ForwardErrors, WrongTypeForKey) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": "8", "nhead": 2})");
  expect_error({config_, "'d_model'", "integer"});
}
TEST_F(ForwardErrors, MissingRequiredKey) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "nhead": 2})");
  expect_error({config_, "'d_model'"});
}
TEST_F(ForwardErrors, NonPositiveSize) {
  spit(config_, R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 0})");
  expect_error({config_, "dim_feedforward"});
}

// ---- the weights file as a file ---------------------------------------------------------------
TEST_F(ForwardErrors, TruncatedWeights) {
  const std::string bytes = slurp(weights_);
  spit(weights_, bytes.substr(0, bytes.size() - 7));
  expect_error({weights_});
}
TEST_F(ForwardErrors, TruncatedInsideHeader) {
  const std::string bytes = slurp(weights_);
  spit(weights_, bytes.substr(0, 40));
  expect_error({weights_, "header length"});
}
TEST_F(ForwardErrors, ShorterThanLengthPrefix) {
  spit(weights_, "abc");
  expect_error({weights_, "8-byte"});
}
TEST_F(ForwardErrors, EmptyWeightsFile) {
  spit(weights_, "");
  expect_error({weights_});
}
TEST_F(ForwardErrors, CorruptHeaderJson) {
  spit(weights_, raw_safetensors(R"({"w": {"dtype": "F32", "shape": [1], )", std::string(4, '\0')));
  expect_error({weights_, "not valid JSON"});
}
TEST_F(ForwardErrors, GarbageBytes) {
  std::string junk(256, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 131 + 7) & 0xff);
  spit(weights_, junk);
  expect_error({weights_});
}
TEST_F(ForwardErrors, HugeHeaderLength) {
  spit(weights_, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  expect_error({weights_, "header length"});
}
TEST_F(ForwardErrors, OffsetsOutOfRange) {
  spit(weights_, raw_safetensors(R"({"norm1.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 320]}})",
                                 std::string(32, '\0')));
  expect_error({weights_, "'norm1.weight'", "data_offsets [0, 320]"});
}
TEST_F(ForwardErrors, OffsetsOverlap) {
  spit(weights_, raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                 R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                 std::string(12, '\0')));
  expect_error({weights_, "overlap"});
}
TEST_F(ForwardErrors, ShapeOverflow) {
  spit(weights_, raw_safetensors(
                     R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", ""));
  expect_error({weights_, "'a'", "overflow"});
}
TEST_F(ForwardErrors, DuplicateTensorName) {
  spit(weights_, raw_safetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                 R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                 std::string(8, '\0')));
  expect_error({weights_, "duplicate", "'a'"});
}
TEST_F(ForwardErrors, UnsupportedDtypeInFile) {
  spit(weights_, raw_safetensors(R"({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})",
                                 std::string(1, '\0')));
  expect_error({weights_, "'a'", "unsupported dtype"});
}

// ---- the weights' content ---------------------------------------------------------------------
TEST_F(ForwardErrors, MissingWeightKey) {
  rewrite(weights_, [](auto& list) { list.erase("linear2.bias"); });
  expect_error({weights_, "missing key 'linear2.bias'"});
}
TEST_F(ForwardErrors, UnexpectedWeightKey) {
  rewrite(weights_, [](auto& list) { list.insert("decoder.norm.weight", Tensor::zeros({8})); });
  expect_error({weights_, "unexpected key 'decoder.norm.weight'"});
}
TEST_F(ForwardErrors, MisshapenWeight) {
  rewrite(weights_, [](auto& list) {
    for (auto& [k, t] : list)
      if (k == "linear1.weight") t = Tensor::zeros({2048, 4});
  });
  expect_error({weights_, "'linear1.weight'", "(2048, 4)", "(2048, 8)"});
}
TEST_F(ForwardErrors, WeightWrongDtype) {
  rewrite(weights_, [](auto& list) {
    for (auto& [k, t] : list)
      if (k == "norm1.bias") t = Tensor::from_bool({8}, std::vector<uint8_t>(8, 0));
  });
  expect_error({weights_, "'norm1.bias'", "BOOL"});
}
TEST_F(ForwardErrors, WeightIntegerBeyondFloat) {
  // I64 is readable (converted exactly) but 2^24 + 1 has no Float32: the reader refuses it.
  const std::string data = std::string("\x01\x00\x00\x01\x00\x00\x00\x00", 8);
  spit(weights_, raw_safetensors(R"({"norm1.bias": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", data));
  expect_error({weights_, "'norm1.bias'", "2^24"});
}

// ---- the inputs -------------------------------------------------------------------------------
TEST_F(ForwardErrors, MissingInput) {
  rewrite(inputs_, [](auto& list) { list.clear(); list.insert("src_mask", Tensor::zeros({3, 3})); });
  expect_error({inputs_, "missing tensor 'src'"});
}
TEST_F(ForwardErrors, UnexpectedInput) {
  rewrite(inputs_, [](auto& list) { list.insert("tgt", Tensor::zeros({3, 2, 8})); });
  expect_error({inputs_, "unexpected tensor 'tgt'"});
}
// A tensor the module does not take is refused by its name whatever its dtype: PyTorch's own need_weights flag,
// stored as BOOL, is not an input of the wrong dtype (F32 would not make it one tfm takes).
TEST_F(ForwardErrors, UnexpectedBoolInput) {
  rewrite(inputs_, [](auto& list) { list.insert("need_weights", Tensor::from_bool({}, {0})); });
  expect_error({inputs_,
                "unexpected tensor 'need_weights' (expected some of: src, src_mask, src_key_padding_mask, "
                "is_causal)"});
}
TEST_F(ForwardErrors, InputWrongDtype) {
  rewrite(inputs_, [](auto& list) {
    list.clear();
    list.insert("src", Tensor::from_bool({3, 2, 8}, std::vector<uint8_t>(48, 1)));
  });
  expect_error({inputs_, "'src'", "F32", "BOOL"});
}
TEST_F(ForwardErrors, CausalFlagNotBool) {
  rewrite(inputs_, [](auto& list) { list.insert("is_causal", Tensor::zeros({})); });
  expect_error({inputs_, "'is_causal'", "BOOL"});
}
TEST_F(ForwardErrors, CausalFlagNotScalar) {
  rewrite(inputs_, [](auto& list) { list.insert("is_causal", Tensor::from_bool({2}, {1, 1})); });
  expect_error({inputs_, "'is_causal'", "0-dimensional"});
}
TEST_F(ForwardErrors, InputWrongWidth) {
  rewrite(inputs_, [](auto& list) {
    list.clear();
    list.insert("src", Tensor::zeros({3, 2, 5}));
  });
  expect_error({inputs_, "'src'", "(3, 2, 5)"});
}
TEST_F(ForwardErrors, InputWrongRank) {
  rewrite(inputs_, [](auto& list) {
    list.clear();
    list.insert("src", Tensor::zeros({6, 8}));
  });
  expect_error({inputs_, "'src'", "(6, 8)"});
}
TEST_F(ForwardErrors, MaskWrongShape) {
  rewrite(inputs_, [](auto& list) { list.insert("src_mask", Tensor::zeros({3, 4})); });
  expect_error({inputs_, "'src_mask'", "(3, 4)"});
}
TEST_F(ForwardErrors, KeyPaddingMaskWrongShape) {
  rewrite(inputs_, [](auto& list) {
    list.insert("src_key_padding_mask", Tensor::from_bool({3, 2}, std::vector<uint8_t>(6, 0)));
  });
  expect_error({inputs_, "'src_key_padding_mask'", "(3, 2)"});
}
TEST_F(ForwardErrors, GradOutputWrongShape) {
  rewrite(inputs_, [](auto& list) { list.insert("grad_output", Tensor::zeros({3, 2, 7})); });
  expect_error({inputs_, "'grad_output'", "(3, 2, 7)"});
}

// ---- the command line -------------------------------------------------------------------------
TEST_F(ForwardErrors, MissingRequiredOption) {
  const Result r = run_cli("forward --config " + config_, dir_);
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.code, 0);
  EXPECT_NE((r.out + r.err).find("--weights"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.err, "tfm: error: --weights is required (tfm --help, tfm <command> --help)\n");  // one line
}
TEST_F(ForwardErrors, OutputDirectoryMissing) {
  output_ = dir_ + "/no/such/dir/out.safetensors";
  expect_error({output_});
}

}  // namespace

// ---- the CLI's own surface: --version, and an example in every command's --help ----
// (Kept beside the forward error cases: both check what a user sees from the `tfm` binary, through
// the same run_cli helper.)
namespace {

TEST(CliSurface, Version) {
  const std::string dir = tfm::testing::temp_dir("cli_version");
  const Result r = run_cli("--version", dir);
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("tfm ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find('.'), std::string::npos) << "no version number: " << r.out;
}

TEST(CliSurface, EveryCommandHelpShowsAnExample) {
  const std::string dir = tfm::testing::temp_dir("cli_help");
  const Result top = run_cli("--help", dir);
  EXPECT_EQ(top.code, 0) << top.err;
  for (const char* cmd : {"forward", "bench", "train", "eval", "translate"}) {
    if (top.out.find(std::string("  ") + cmd) == std::string::npos) {
      ADD_FAILURE() << "`tfm --help` does not list '" << cmd << "':\n" << top.out;
      continue;
    }
    const Result r = run_cli(std::string(cmd) + " --help", dir);
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.err;
    EXPECT_NE(r.out.find("Example"), std::string::npos) << "`tfm " << cmd << " --help` has no example:\n" << r.out;
    EXPECT_NE(r.out.find(std::string("tfm ") + cmd + " "), std::string::npos)
        << "`tfm " << cmd << " --help` example does not show the command:\n" << r.out;
  }
  fs::remove_all(dir);
}

}  // namespace

namespace {
// Regression (found by fuzz_safetensors): a number beyond double in the header made nlohmann throw
// out_of_range, which escaped the reader's parse_error handler without the file name.
TEST_F(ForwardErrors, NumberOverflowInHeader) {
  spit(weights_, raw_safetensors(R"({"a": {"dtype": "F32", "shape": 1e400, "data_offsets": [0, 4]}})",
                                 std::string(4, '\0')));
  expect_error({weights_, "1e400"});
}
}  // namespace
