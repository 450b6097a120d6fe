// tests/io/safetensors_test.cc — safetensors reader/writer (the checked file wrapper under it:
// file_util_test.cc).
//
// Fixtures come from tests/gen/gen_safetensors.py (torch 1.13 + numpy, format written by hand):
// dtypes.safetensors holds one tensor per readable dtype and dtypes_expected.safetensors the values
// torch/numpy convert them to; reference_layout.safetensors is laid out by the reference rules.
// Conversions are exact operations (widening, or one IEEE round-to-nearest for F64, the same one
// torch does), so every comparison here is bitwise: there is no tolerance to derive.
// Error cases are written byte by byte in this file, one per check in the reader; each must raise
// SafeTensorsError whose message starts with the file path and names the key, in the copying and
// in the zero-copy mode alike (zero-copy itself: safetensors_zero_copy_test.cc).
// To add a case: write the raw file with write_raw() and call expect_load_error().
#include "test_util.h"
#include "tfm/io/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace fs = std::filesystem;
using tfm::DType;
using tfm::NamedTensors;
using tfm::Shape;
using tfm::Tensor;
using namespace tfm::io;

namespace {

std::string fixture(const std::string& name) {
  return std::string(TFM_SOURCE_DIR) + "/tests/fixtures/safetensors/" + name;
}

// A fresh directory per test, removed afterwards.
class SafeTensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tfm_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using tfm::testing::bitwise_equal;
using tfm::testing::slurp;
using tfm::testing::spit;

// u64 little-endian header length, the header text as given, then the data bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  spit(path, out + header + data);
}

template <class T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

// Runs f and returns the SafeTensorsError message; any other outcome fails the test.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SafeTensorsError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected SafeTensorsError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected SafeTensorsError, nothing was thrown";
  return "";
}

void expect_message(const std::string& msg, const std::string& path,
                    const std::vector<std::string>& parts) {
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the path: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
}

// Checks both loaders: zero-copy mode must validate exactly as the copying mode does (same message).
void expect_load_error(const std::string& path, const std::vector<std::string>& parts) {
  const std::string msg = error_of([&] { load_safetensors(path); });
  expect_message(msg, path, parts);
  const std::string zc = error_of([&] { load_safetensors(path, LoadOptions{.zero_copy = true}); });
  EXPECT_EQ(zc, msg) << "zero-copy mode reports a different error";
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const char* kOneTensorData = "\x00\x00\x80\x3f\x00\x00\x00\x40";  // F32 1.0, 2.0

}  // namespace

// ---- reading Python-made fixtures -----------------------------------------------------------------

TEST_F(SafeTensors, HandCheckedF32) {
  const SafeTensorsFile f = load_safetensors(fixture("dtypes.safetensors"));
  const Tensor& t = f.at("f32");
  EXPECT_EQ(f.dtypes.at("f32"), "F32");
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  // Written as float32 [[1.5, -2, 0.25], [3, -0.0, 1e-3]] at an odd offset (unaligned read).
  const std::vector<float> want = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-3f};
  EXPECT_TRUE(bitwise_equal(tfm::testing::values(t), want, "f32"));
}

TEST_F(SafeTensors, HeaderOrderAndMetadata) {
  const SafeTensorsFile f = load_safetensors(fixture("dtypes.safetensors"));
  const std::vector<std::string> order = {"mask", "f32", "u8",  "bf16", "i64", "empty",
                                          "f16",  "scalar", "f64", "i8", "i16", "i32",
                                          "u16",  "u32", "u64", "i64_matrix"};
  EXPECT_EQ(f.tensors.names(), order);
  EXPECT_EQ(f.dtypes.size(), order.size());
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{
                            {"format", "pt"}, {"source", "tests/gen/gen_safetensors.py"}}));
  EXPECT_EQ(f.path, fixture("dtypes.safetensors"));
  EXPECT_TRUE(f.contains("f16"));
  EXPECT_FALSE(f.contains("__metadata__"));
  EXPECT_FALSE(f.contains("F16"));
}

TEST_F(SafeTensors, EveryDtypeMatchesTorchConversion) {
  const SafeTensorsFile got = load_safetensors(fixture("dtypes.safetensors"));
  const SafeTensorsFile want = load_safetensors(fixture("dtypes_expected.safetensors"));
  ASSERT_EQ(got.tensors.names(), want.tensors.names());
  const std::map<std::string, std::string> dtype_of = {
      {"f32", "F32"},  {"f16", "F16"},   {"bf16", "BF16"}, {"f64", "F64"},   {"i8", "I8"},
      {"i16", "I16"},  {"i32", "I32"},   {"i64", "I64"},   {"u8", "U8"},     {"u16", "U16"},
      {"u32", "U32"},  {"u64", "U64"},   {"mask", "BOOL"}, {"scalar", "F32"}, {"empty", "F32"},
      {"i64_matrix", "I64"}};
  for (const std::string& name : got.tensors.names()) {
    EXPECT_EQ(got.dtypes.at(name), dtype_of.at(name)) << name;
    EXPECT_TRUE(bitwise_equal(got.at(name), want.at(name), name));
  }
  // Spot checks that need no oracle: F16 specials, BF16, integer extremes.
  const float* h = got.at("f16").data();
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_EQ(h[4], std::ldexp(1.0f, -24));  // smallest F16 subnormal
  EXPECT_EQ(bits(h[1]), 0x80000000u);       // -0 kept
  EXPECT_TRUE(std::isinf(h[6]) && h[6] > 0);
  EXPECT_TRUE(std::isnan(h[8]));
  EXPECT_EQ(got.at("bf16").data()[1], -3.140625f);  // exactly representable in BF16
  EXPECT_EQ(got.at("i64").data()[1], 16777216.0f);
  EXPECT_EQ(got.at("i8").data()[0], -128.0f);
  EXPECT_EQ(got.at("u8").data()[1], 255.0f);
  EXPECT_EQ(got.at("f64").data()[3], 3.4028234663852886e38f);
  EXPECT_EQ(got.at("mask").dtype(), DType::BOOL);
}

TEST_F(SafeTensors, ScalarAndEmptyTensors) {
  const SafeTensorsFile f = load_safetensors(fixture("dtypes.safetensors"));
  const Tensor& s = f.at("scalar");
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 2.75f);
  const Tensor& e = f.at("empty");
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_EQ(e.numel(), 0);
}

TEST_F(SafeTensors, MissingKeyNamesFileAndKey) {
  const SafeTensorsFile f = load_safetensors(fixture("dtypes.safetensors"));
  const std::string msg = error_of([&] { f.at("decoder.weight"); });
  expect_message(msg, fixture("dtypes.safetensors"), {"'decoder.weight'", "16 tensors", "mask"});
}

// ---- writing --------------------------------------------------------------------------------------

TEST_F(SafeTensors, RoundTripIsBitwise) {
  std::vector<float> w = tfm::testing::random_values(5 * 7, 7, -3.0f, 3.0f);
  w[0] = NAN;
  w[1] = -INFINITY;
  w[2] = -0.0f;
  w[3] = std::numeric_limits<float>::denorm_min();
  const NamedTensors tensors = {
      {"z.weight", Tensor::from_vector({5, 7}, w)},
      {"mask", Tensor::from_bool({3, 2}, {1, 0, 0, 1, 1, 1})},
      {"a.scalar", Tensor::full({}, -3.5f)},
      {"empty", Tensor::empty({4, 0, 2})},
      {"empty_mask", Tensor::empty({0}, DType::BOOL)},
      {"unicode.ß", Tensor::from_vector({1}, {42.0f})},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"epoch", "3"}};
  const std::string path = tmp("round.safetensors");
  save_safetensors(path, tensors, meta);

  const SafeTensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, meta);
  // Reference order: F32 tensors by name, then BOOL tensors by name.
  EXPECT_EQ(f.tensors.names(), (std::vector<std::string>{"a.scalar", "empty", "unicode.ß", "z.weight",
                                               "empty_mask", "mask"}));
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(f.dtypes.at(name), t.dtype() == DType::FLOAT32 ? "F32" : "BOOL");
    EXPECT_TRUE(bitwise_equal(f.at(name), t, name));
  }
  // Header padded with spaces to a multiple of 8, so the data buffer starts 8-aligned.
  const std::string raw = slurp(path);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 4 * (1 + 0 + 1 + 35) + 6);
}

// I8 kept as int8 on request (the int8 model directories' weights), written after F32 with BOOL by
// name; without keep_int8 the same file reads as Float32, as every integer dtype.
TEST_F(SafeTensors, Int8KeptOnRequestAndWrittenBack) {
  const std::string path = tmp("int8.safetensors");
  NamedTensors f32;
  f32.insert("w.scale", Tensor::from_vector({2}, {0.5f, 2.0f}));
  f32.insert("mask", Tensor::full({2}, 1.0f));
  Int8Tensor q{{2, 3}, {-128, -1, 0, 1, 2, 127}, nullptr, nullptr};
  save_safetensors(path, f32, {{"k", "v"}}, {{"w", q}});
  const SafeTensorsFile kept = load_safetensors(path, LoadOptions{.keep_int8 = true});
  ASSERT_TRUE(kept.int8.contains("w"));
  EXPECT_FALSE(kept.contains("w"));
  EXPECT_EQ(kept.int8.at("w").shape, (Shape{2, 3}));
  EXPECT_EQ(kept.int8.at("w").data, q.data);
  EXPECT_EQ(kept.dtypes.at("w"), "I8");
  EXPECT_EQ(kept.metadata.at("k"), "v");
  const SafeTensorsFile plain = load_safetensors(path);
  EXPECT_TRUE(plain.int8.empty());
  EXPECT_TRUE(bitwise_equal(tfm::testing::values(plain.at("w")), std::vector<float>{-128, -1, 0, 1, 2, 127}, "w"));
  // Names are unique across both maps, and the values must fill the shape.
  expect_message(error_of([&] { save_safetensors(tmp("x.safetensors"), f32, {}, {{"mask", q}}); }),
                 tmp("x.safetensors"), {"'mask'", "both"});
  expect_message(error_of([&] {
                   save_safetensors(tmp("x.safetensors"), f32, {}, {{"v", Int8Tensor{{4}, {1}, nullptr, nullptr}}});
                 }),
                 tmp("x.safetensors"), {"'v'", "1 int8 values for shape (4,)"});
}

TEST_F(SafeTensors, WriterMatchesReferenceLayoutBytes) {
  const SafeTensorsFile ref = load_safetensors(fixture("reference_layout.safetensors"));
  // Feed the tensors in reverse header order: the writer must sort them itself.
  NamedTensors tensors;
  const std::vector<std::string> names = ref.tensors.names();
  for (auto it = names.rbegin(); it != names.rend(); ++it) tensors.insert(*it, ref.at(*it));
  const std::string path = tmp("layout.safetensors");
  save_safetensors(path, tensors, ref.metadata);
  EXPECT_TRUE(slurp(path) == slurp(fixture("reference_layout.safetensors")))
      << "writer output differs from the reference layout";
}

TEST_F(SafeTensors, SaveOverwritesExistingFile) {
  const std::string path = tmp("w.safetensors");
  save_safetensors(path, {{"a", Tensor::full({2}, 1.0f)}});
  save_safetensors(path, {{"b", Tensor::full({3}, 2.0f)}});
  const SafeTensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.tensors.names(), std::vector<std::string>{"b"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafeTensors, FailedSaveLeavesPreviousFileWhole) {
  const std::string path = tmp("w.safetensors");
  save_safetensors(path, {{"keep", Tensor::full({4}, 7.0f)}});
  const std::string before = slurp(path);
  auto count_files = [&] {
    return std::distance(fs::directory_iterator(dir_), fs::directory_iterator());
  };

  // Undefined tensor, duplicate name, reserved name: all rejected, nothing written. A duplicate
  // name cannot reach the writer: NamedTensors refuses it when the list is built.
  std::string msg = error_of(
      [&] { save_safetensors(path, {{"ok", Tensor::full({2}, 1.0f)}, {"bad", Tensor()}}); });
  expect_message(msg, path, {"'bad'", "undefined"});
  try {
    save_safetensors(path, {{"x", Tensor::full({2}, 1.0f)}, {"x", Tensor::full({2}, 1.0f)}});
    ADD_FAILURE() << "a tensor list with a duplicate name was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate tensor name 'x'"), std::string::npos) << e.what();
  }
  msg = error_of([&] { save_safetensors(path, {{"__metadata__", Tensor::full({1}, 1.0f)}}); });
  expect_message(msg, path, {"'__metadata__'", "reserved"});
  msg = error_of([&] { save_safetensors(path, {{"bad\xff", Tensor::full({1}, 1.0f)}}); });
  expect_message(msg, path, {"cannot encode header"});
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(count_files(), 1) << "a temporary file was left behind";

  // A write that fails half way (file size limit -> EFBIG) must also leave the old file whole and
  // remove the temporary file. SIGXFSZ is ignored so write() reports the error instead of killing.
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  msg = error_of([&] { save_safetensors(path, {{"big", Tensor::zeros({100000})}}); });
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  expect_message(msg, path, {"write failed", std::strerror(EFBIG)});
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(count_files(), 1) << "a temporary file was left behind";
  EXPECT_EQ(load_safetensors(path).at("keep").data()[3], 7.0f);
}

TEST_F(SafeTensors, SaveIntoMissingDirectoryNamesPath) {
  const std::string path = tmp("no/such/dir/w.safetensors");
  const std::string msg = error_of([&] { save_safetensors(path, {{"a", Tensor::zeros({1})}}); });
  expect_message(msg, path, {"temporary file", std::strerror(ENOENT)});
}

// ---- malformed files: every check in the reader ---------------------------------------------------

TEST_F(SafeTensors, MissingFileAndDirectory) {
  expect_load_error(tmp("absent.safetensors"), {"open failed", std::strerror(ENOENT)});
  expect_load_error(dir_.string(), {"not a regular file"});
}

TEST_F(SafeTensors, ShorterThanLengthPrefix) {
  const std::string p = tmp("short.safetensors");
  spit(p, "");
  expect_load_error(p, {"file is 0 bytes", "8-byte"});
  spit(p, std::string("\x05\x00\x00\x00\x00", 5));
  expect_load_error(p, {"file is 5 bytes", "8-byte"});
}

TEST_F(SafeTensors, HeaderLengthChecks) {
  const std::string p = tmp("len.safetensors");
  // Claimed 200 MB header: over the 100 MB cap, rejected before looking at the file size.
  spit(p, bytes_of<uint64_t>({200'000'000}) + "{}");
  expect_load_error(p, {"header length 200000000", "limit of 100000000"});
  // Claimed 64 bytes but only 2 follow.
  spit(p, bytes_of<uint64_t>({64}) + "{}");
  expect_load_error(p, {"header length 64", "exceeds the 2 bytes", "truncated"});
}

TEST_F(SafeTensors, HeaderNotJsonOrNotObject) {
  const std::string p = tmp("json.safetensors");
  write_raw(p, "{\"a\": {\"dtype\": \"F32\",");
  expect_load_error(p, {"header is not valid JSON"});
  write_raw(p, "[1, 2]   ");
  expect_load_error(p, {"header must be a JSON object", "array"});
  write_raw(p, "");
  expect_load_error(p, {"header is not valid JSON"});
  write_raw(p, std::string(50, '[') + std::string(50, ']'));
  expect_load_error(p, {"nested deeper"});
  // A valid object, then a NUL and bytes the JSON parser would never read.
  write_raw(p, std::string("{}\0 {not json", 13));
  expect_load_error(p, {"header holds a NUL byte at offset 2 of its 13"});
  // A parser message echoing invalid UTF-8 keeps the message valid UTF-8 (\xHH escapes).
  write_raw(p, "{\"a\xff\": 1");
  expect_load_error(p, {"header is not valid JSON", "\\xff"});
  // A name holding U+2028 (a line break to Python and some terminals) is quoted on one line.
  write_raw(p, "{\"a\xe2\x80\xa8" "b\": {\"dtype\": \"Q9\", \"shape\": [1], \"data_offsets\": [0, 4]}}", std::string(4, '\0'));
  expect_load_error(p, {"tensor 'a\\xe2\\x80\\xa8b'"});
}

TEST_F(SafeTensors, EntryShapeOfHeader) {
  const std::string p = tmp("entry.safetensors");
  write_raw(p, R"({"w": [1, 2]})");
  expect_load_error(p, {"tensor 'w'", "entry must be an object", "array"});
  write_raw(p, R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", kOneTensorData);
  expect_load_error(p, {"tensor 'w'", "missing \"dtype\""});
  write_raw(p, R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", kOneTensorData);
  expect_load_error(p, {"tensor 'w'", "missing \"shape\""});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2]}})", kOneTensorData);
  expect_load_error(p, {"tensor 'w'", "missing \"data_offsets\""});
  write_raw(p, R"({"w": {"dtype": 3, "shape": [2], "data_offsets": [0, 8]}})", kOneTensorData);
  expect_load_error(p, {"tensor 'w'", "dtype must be a string"});
  // 65 dimensions of 1 and then 2: refused by its rank (its shape's text would make a message of any length).
  std::string dims;
  for (int d = 0; d < 65; ++d) dims += "1, ";
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [)" + dims + R"(2], "data_offsets": [0, 8]}})", kOneTensorData);
  expect_load_error(p, {"tensor 'w'", "shape has 66 dimensions, more than 64"});
}

TEST_F(SafeTensors, UnknownDtype) {
  const std::string p = tmp("dtype.safetensors");
  write_raw(p, R"({"w": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"tensor 'w'", "unsupported dtype 'F8_E4M3'", "supported: F32"});
  write_raw(p, R"({"w": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"tensor 'w'", "unsupported dtype 'f32'"});
}

TEST_F(SafeTensors, BadDims) {
  const std::string p = tmp("dims.safetensors");
  const std::string d(kOneTensorData, 8);
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", d);
  expect_load_error(p, {"tensor 'w'", "shape[0]", "non-negative", "-2"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1, 2.0], "data_offsets": [0, 8]}})", d);
  expect_load_error(p, {"tensor 'w'", "shape[1]", "non-integer number"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})", d);
  expect_load_error(p, {"tensor 'w'", "shape[0]", "string"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", d);
  expect_load_error(p, {"tensor 'w'", "shape must be an array"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8]}})",
            d);
  expect_load_error(p, {"tensor 'w'", "shape[0]", "exceeds 2^63 - 1"});
}

TEST_F(SafeTensors, ShapeProductOverflow) {
  const std::string p = tmp("overflow.safetensors");
  // 2^31 · 2^31 = 2^62 elements fits int64, but × 4 bytes does not.
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2147483648, 2147483648], "data_offsets": [0, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"tensor 'w'", "overflows"});
  // 2^40 · 2^40 overflows the element count itself.
  write_raw(p, R"({"w": {"dtype": "U8", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"tensor 'w'", "overflows"});
  // A 0 dim makes the huge product empty: fine.
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1099511627776, 0, 1099511627776], "data_offsets": [0, 0]}})");
  EXPECT_EQ(load_safetensors(p).at("w").numel(), 0);
}

TEST_F(SafeTensors, BadDataOffsets) {
  const std::string p = tmp("offsets.safetensors");
  const std::string d(kOneTensorData, 8);
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", d);
  expect_load_error(p, {"tensor 'w'", "[8, 0]", "begin > end"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", d);
  expect_load_error(p, {"tensor 'w'", "[0, 16]", "end past the data buffer", "holds 8 bytes"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", d);
  expect_load_error(p, {"tensor 'w'", "data_offsets must be [begin, end]"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-1, 7]}})", d);
  expect_load_error(p, {"tensor 'w'", "data_offsets[0]", "non-negative"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]}})", d);
  expect_load_error(p, {"tensor 'w'", "data_offsets[1]", "non-integer"});
  // The brief's example: 100 bytes where F32 × (8, 8) needs 256.
  write_raw(p,
            R"({"encoder.layers.0.linear1.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 100]}})",
            std::string(100, '\0'));
  expect_load_error(p, {"tensor 'encoder.layers.0.linear1.weight': data_offsets [0, 100] give 100 "
                        "bytes, expected 256 (F32 × (8, 8))"});
}

TEST_F(SafeTensors, RangesMustTileTheBuffer) {
  const std::string p = tmp("tile.safetensors");
  const std::string d16(16, '\0');
  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            d16);
  expect_load_error(p, {"tensor 'b'", "[4, 12]", "overlap tensor 'a' [0, 8]"});
  // Same range twice is an overlap too (two names aliasing one buffer).
  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
            std::string(8, '\0'));
  expect_load_error(p, {"overlap"});
  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
            d16);
  expect_load_error(p, {"bytes [8, 12) belong to no tensor", "tensor 'b'"});
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", d16);
  expect_load_error(p, {"holds 16 bytes", "cover 8", "8 trailing bytes"});
}

TEST_F(SafeTensors, DuplicateNamesAndKeys) {
  const std::string p = tmp("dup.safetensors");
  write_raw(p,
            R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"duplicate tensor name 'w'"});
  write_raw(p, R"({"w": {"dtype": "F32", "dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
            std::string(kOneTensorData, 8));
  expect_load_error(p, {"entry 'w'", "duplicate key 'dtype'"});
  write_raw(p, R"({"__metadata__": {"k": "a", "k": "b"}})");
  expect_load_error(p, {"entry '__metadata__'", "duplicate key 'k'"});
}

TEST_F(SafeTensors, MetadataMustBeStrings) {
  const std::string p = tmp("meta.safetensors");
  write_raw(p, R"({"__metadata__": {"format": "pt", "epoch": 3}})");
  expect_load_error(p, {"__metadata__ key 'epoch'", "must be a string", "integer 3"});
  write_raw(p, R"({"__metadata__": ["pt"]})");
  expect_load_error(p, {"__metadata__ must be an object", "array"});
  write_raw(p, R"({"__metadata__": {"format": "pt"}})");
  const SafeTensorsFile f = load_safetensors(p);
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST_F(SafeTensors, ValuesThatDoNotConvertExactly) {
  const std::string p = tmp("values.safetensors");
  write_raw(p, R"({"idx": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}})",
            bytes_of<int64_t>({5, -(int64_t{1} << 24), (int64_t{1} << 24) + 1}));
  expect_load_error(p, {"tensor 'idx'", "element 2", "16777217", "2^24"});
  write_raw(p, R"({"idx": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
            bytes_of<int32_t>({-(1 << 24) - 1}));
  expect_load_error(p, {"tensor 'idx'", "element 0", "-16777217"});
  write_raw(p, R"({"idx": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
            bytes_of<int64_t>({std::numeric_limits<int64_t>::min()}));
  expect_load_error(p, {"tensor 'idx'", "-9223372036854775808"});
  write_raw(p, R"({"idx": {"dtype": "U64", "shape": [1], "data_offsets": [0, 8]}})",
            bytes_of<uint64_t>({~uint64_t{0}}));
  expect_load_error(p, {"tensor 'idx'", "18446744073709551615"});
  write_raw(p, R"({"x": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})",
            bytes_of<double>({1.0, -1e39}));
  expect_load_error(p, {"tensor 'x'", "element 1", "beyond the Float32 range"});
  write_raw(p, R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})",
            std::string("\x01\x00\x02", 3));
  expect_load_error(p, {"tensor 'm'", "element 2", "byte 2, expected 0 or 1"});
  // F64 infinities and NaN are values, not overflow: they load as themselves.
  write_raw(p, R"({"x": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})",
            bytes_of<double>({INFINITY, NAN}));
  const Tensor x = load_safetensors(p).at("x");
  EXPECT_TRUE(std::isinf(x.data()[0]) && std::isnan(x.data()[1]));
}

TEST_F(SafeTensors, EveryTruncationOfAFixtureIsRejected) {
  // Every proper prefix of a valid file must fail cleanly (never crash, never load): short prefix,
  // header cut, or data buffer too small for the offsets.
  const std::string full = slurp(fixture("dtypes.safetensors"));
  ASSERT_GT(full.size(), 100u);
  const std::string p = tmp("cut.safetensors");
  for (size_t n = 0; n < full.size(); ++n) {
    spit(p, full.substr(0, n));
    const std::string msg = error_of([&] { load_safetensors(p); });
    ASSERT_EQ(msg.rfind(p + ": ", 0), 0u) << "prefix of " << n << " bytes: " << msg;
    const std::string zc = error_of([&] { load_safetensors(p, LoadOptions{.zero_copy = true}); });
    ASSERT_EQ(zc, msg) << "zero-copy mode, prefix of " << n << " bytes";
  }
  spit(p, full);
  EXPECT_EQ(load_safetensors(p).tensors.size(), 16u);
  EXPECT_EQ(load_safetensors(p, LoadOptions{.zero_copy = true}).tensors.size(), 16u);
}
