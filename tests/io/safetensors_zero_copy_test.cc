// tests/io/safetensors_zero_copy_test.cc — zero-copy safetensors loading (LoadOptions::zero_copy), a
// second test file for src/io/safetensors.cc (the Tensor::from_external storage it is built on is
// tested in tests/tensor_test.cc).
//
// "No copy happened" is checked from outside the library: a zero-copy tensor's data pointer must
// lie inside the address range /proc/self/maps lists for the file itself. Values are compared
// bitwise with the copying loader (the same bytes reinterpreted, so there is no tolerance).
// The malformed-file cases of safetensors_test.cc run in both modes there (expect_load_error).
// To add a case: build the file with save_safetensors or write_raw, load it with kZeroCopy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <vector>

#include "tensor_impl.h"
#include "test_util.h"
#include "tfm/io/safetensors.h"

namespace fs = std::filesystem;
using tfm::DType;
using tfm::Shape;
using tfm::Tensor;
using namespace tfm::io;
using tfm::testing::bitwise_equal;
using tfm::testing::slurp;
using tfm::testing::spit;

namespace {

const LoadOptions kZeroCopy{.zero_copy = true};

std::string fixture(const std::string& name) {
  return std::string(TFM_SOURCE_DIR) + "/tests/fixtures/safetensors/" + name;
}

// Address ranges the kernel maps from `path` into this process, from /proc/self/maps
// ("start-end perms offset dev inode pathname").
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(const std::string& path) {
  const std::string want = fs::canonical(path).string();
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, name;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, name);
    if (name != want) continue;
    const size_t dash = range.find('-');
    out.push_back({std::stoull(range.substr(0, dash), nullptr, 16),
                   std::stoull(range.substr(dash + 1), nullptr, 16)});
  }
  return out;
}

bool inside_mapping_of(const void* p, const std::string& path) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& [lo, hi] : mappings_of(path))
    if (a >= lo && a < hi) return true;
  return false;
}

// u64 little-endian header length, the header, then the data bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  spit(path, out + header + data);
}

class ZeroCopy : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tfm::testing::temp_dir("zero_copy"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return dir_ + "/" + name; }

  // Three F32 tensors as the writer lays them out: header padded to 8 bytes, F32 first, so every
  // F32 range starts 4-aligned in the mapping (which itself starts on a page).
  std::string write_model() const {
    const std::string path = tmp("model.safetensors");
    save_safetensors(path, {{"w", tfm::testing::random_tensor({16, 8}, 1)},
                            {"b", tfm::testing::random_tensor({8}, 2)},
                            {"s", Tensor::full({}, -1.25f)},
                            {"mask", Tensor::from_bool({3}, {1, 0, 1})}});
    return path;
  }
  std::string dir_;
};

}  // namespace

TEST_F(ZeroCopy, AlignedF32PointsIntoTheMapping) {
  const std::string path = write_model();
  const SafeTensorsFile zc = load_safetensors(path, kZeroCopy);
  const SafeTensorsFile copy = load_safetensors(path);
  ASSERT_EQ(zc.tensors.names(), copy.tensors.names());
  ASSERT_FALSE(mappings_of(path).empty()) << "the zero-copy load dropped the mapping";
  for (const char* name : {"w", "b", "s"}) {
    const Tensor& t = zc.at(name);
    EXPECT_TRUE(zc.mapped.count(name)) << name;
    EXPECT_TRUE(inside_mapping_of(t.data(), path)) << name << " was copied";
    EXPECT_FALSE(copy.mapped.count(name)) << name;
    EXPECT_FALSE(inside_mapping_of(copy.at(name).data(), path)) << name;
    EXPECT_TRUE(bitwise_equal(t, copy.at(name), name));
  }
  // BOOL is converted (0/1 checked) into owned storage.
  EXPECT_FALSE(zc.mapped.count("mask"));
  EXPECT_FALSE(inside_mapping_of(zc.at("mask").data_bool(), path));
  EXPECT_EQ(zc.at("mask").data_bool()[2], 1);
  EXPECT_EQ(zc.metadata, copy.metadata);
}

TEST_F(ZeroCopy, CopyingLoaderKeepsNoMapping) {
  const std::string path = write_model();
  const SafeTensorsFile copy = load_safetensors(path);
  EXPECT_TRUE(mappings_of(path).empty());
  EXPECT_EQ(copy.at("s").item(), -1.25f);
}

TEST_F(ZeroCopy, MisalignedAndOtherDtypesAreConverted) {
  // dtypes.safetensors: every readable dtype, the F32 tensor at an odd offset. Zero-copy mode must
  // give exactly what the copying loader gives, wrapping only 4-aligned F32 data.
  const std::string path = fixture("dtypes.safetensors");
  const SafeTensorsFile zc = load_safetensors(path, kZeroCopy);
  const SafeTensorsFile copy = load_safetensors(path);
  ASSERT_EQ(zc.tensors.names(), copy.tensors.names());
  EXPECT_EQ(zc.dtypes, copy.dtypes);
  for (const std::string& name : zc.tensors.names()) {
    const Tensor& t = zc.at(name);
    EXPECT_TRUE(bitwise_equal(t, copy.at(name), name));
    if (zc.dtypes.at(name) != "F32" || t.numel() == 0) {
      EXPECT_FALSE(zc.mapped.count(name)) << name;
    }
  }
  EXPECT_FALSE(zc.mapped.count("f32")) << "odd offset: must be copied";
  EXPECT_FALSE(inside_mapping_of(zc.at("f32").data(), path));
  EXPECT_FALSE(zc.mapped.count("empty"));

  // Hand-made: an F16 tensor first shifts the F32 data to buffer offset 2 (header length 64, so the
  // data buffer starts at 72, 4-aligned; the F32 begins at 74).
  const std::string p = tmp("shifted.safetensors");
  std::string header =
      R"({"h": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]},)"
      R"( "x": {"dtype": "F32", "shape": [2], "data_offsets": [2, 10]}})";
  header.resize(((header.size() + 7) / 8) * 8, ' ');
  write_raw(p, header, std::string("\x00\x3c", 2) + std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
  const SafeTensorsFile s = load_safetensors(p, kZeroCopy);
  EXPECT_FALSE(s.mapped.count("x"));
  EXPECT_FALSE(inside_mapping_of(s.at("x").data(), p));
  EXPECT_EQ(s.at("x").data()[0], 1.0f);
  EXPECT_EQ(s.at("x").data()[1], -2.0f);
  EXPECT_EQ(s.at("h").data()[0], 1.0f);  // F16 0x3c00
}

TEST_F(ZeroCopy, WritesNeverReachTheFile) {
  const std::string path = write_model();
  const std::string before = slurp(path);
  const SafeTensorsFile zc = load_safetensors(path, kZeroCopy);
  Tensor w = zc.at("w");
  ASSERT_TRUE(zc.mapped.count("w"));
  const float old = w.data()[5];
  w.fill_(42.0f);  // as an optimizer step would: in place
  w.data()[5] = 7.0f;
  EXPECT_TRUE(inside_mapping_of(w.data(), path)) << "the write moved the tensor";
  EXPECT_EQ(w.data()[0], 42.0f);
  EXPECT_EQ(slurp(path), before) << "a write to a zero-copy tensor reached the file";
  // A second mapping of the same file, in this process, still sees the file's bytes.
  const SafeTensorsFile again = load_safetensors(path, kZeroCopy);
  EXPECT_EQ(again.at("w").data()[5], old);
  EXPECT_NE(again.at("w").data(), w.data());
}

TEST_F(ZeroCopy, TensorsOutliveTheFileObjectAndKeepTheMapping) {
  const std::string path = write_model();
  const Tensor ref = load_safetensors(path).at("w");  // copying loader
  const std::vector<float> want(ref.data(), ref.data() + ref.numel());
  Tensor w, view, narrow, detached, cloned;
  {
    const SafeTensorsFile zc = load_safetensors(path, kZeroCopy);
    w = zc.at("w");
  }  // the SafeTensorsFile and its map entries are gone; `w` holds the mapping
  ASSERT_FALSE(mappings_of(path).empty());
  view = w.reshape({8, 16});
  narrow = w.narrow0(3, 2);     // rows 3..4 of (16, 8)
  detached = w.detach();
  cloned = w.clone();
  using tfm::testing::close_abs;
  using tfm::testing::values;
  ASSERT_TRUE(close_abs(values(w), want, 0.0, "w"));  // equal values, each of these
  ASSERT_TRUE(close_abs(values(view), want, 0.0, "view"));
  ASSERT_TRUE(close_abs(values(detached), want, 0.0, "detached"));
  ASSERT_TRUE(close_abs(values(cloned), want, 0.0, "cloned"));
  ASSERT_TRUE(close_abs(values(narrow), std::span(want).subspan(3 * 8, 2 * 8), 0.0, "narrow"));
  EXPECT_TRUE(inside_mapping_of(narrow.data(), path));
  EXPECT_FALSE(inside_mapping_of(cloned.data(), path));

  // Views keep the mapping after the original handle is gone; the last one unmaps it. Dropping
  // them must not feed mapped memory into the allocator's cache.
  w = Tensor();
  view = Tensor();
  detached = Tensor();
  ASSERT_FALSE(mappings_of(path).empty()) << "narrow0 view lost its mapping";
  EXPECT_EQ(narrow.data()[0], want[24]);
  const size_t cached = tfm::allocator_stats().cached_bytes;
  narrow = Tensor();
  EXPECT_EQ(tfm::allocator_stats().cached_bytes, cached) << "mapped memory went to the block cache";
  EXPECT_TRUE(mappings_of(path).empty()) << "mapping outlived every tensor";
  EXPECT_EQ(cloned.data()[24], want[24]);
}

TEST_F(ZeroCopy, GradientsNeverAliasTheMapping) {
  // A mapped tensor handed to backward as grad_output must be copied into the leaf's gradient
  // (accumulate_grad adopts only unshared owned storage), so accumulating into the gradient later
  // leaves the mapped values alone.
  const std::string path = write_model();
  const SafeTensorsFile zc = load_safetensors(path, kZeroCopy);
  const Tensor g = zc.at("b");
  const float g0 = g.data()[0];
  Tensor leaf = Tensor::zeros({8});
  leaf.requires_grad_(true);
  leaf.backward(g);
  leaf.backward(g);  // accumulates in place into leaf.grad()
  ASSERT_TRUE(leaf.grad().defined());
  EXPECT_FALSE(inside_mapping_of(leaf.grad().data(), path));
  EXPECT_EQ(leaf.grad().data()[0], 2.0f * g0);  // g0 + g0, exact (doubling)
  EXPECT_EQ(g.data()[0], g0);

  // A mapped tensor can itself be a trainable leaf.
  Tensor p = zc.at("w");
  p.requires_grad_(true);
  p.reshape({128}).backward(Tensor::full({128}, 1.0f));
  EXPECT_EQ(p.grad().shape(), (Shape{16, 8}));
  EXPECT_EQ(p.grad().data()[127], 1.0f);
  EXPECT_FALSE(inside_mapping_of(p.grad().data(), path));
}

TEST_F(ZeroCopy, ValidationRunsBeforeAnyTensorIsHandedOut) {
  // The first tensor is fine and aligned; the second holds a BOOL byte 2. The load must throw, and
  // no tensor may survive holding the mapping.
  const std::string p = tmp("bad.safetensors");
  std::string header =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
      R"( "m": {"dtype": "BOOL", "shape": [2], "data_offsets": [8, 10]}})";
  header.resize(((header.size() + 7) / 8) * 8, ' ');
  write_raw(p, header, std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x01\x02", 10));
  try {
    load_safetensors(p, kZeroCopy);
    ADD_FAILURE() << "no exception";
  } catch (const SafeTensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'm': element 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(mappings_of(p).empty()) << "a failed load left the file mapped";
}
