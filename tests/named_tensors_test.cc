// tests/named_tensors_test.cc — NamedTensors (include/tfm/named_tensors.h): insertion order,
// lookup by name with errors naming the key, duplicates refused, erase keeping order and index in
// step, and that the containers built on it (state_dict, a loaded file) keep their order.
// Everything here is exact (names, order, tensor identity): no tolerances.
#include "tfm/named_tensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "test_util.h"
#include "tfm/io/safetensors.h"
#include "tfm/modules/transformer.h"

namespace tfm {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument, nothing was thrown";
  return "";
}

TEST(NamedTensors, KeepsInsertionOrderAndFindsByName) {
  const Tensor a = Tensor::full({2}, 1.0f), b = Tensor::full({3}, 2.0f), c = Tensor::full({}, 3.0f);
  NamedTensors n{{"z", a}, {"b", b}};
  n.insert("m", c);
  EXPECT_EQ(n.names(), (std::vector<std::string>{"z", "b", "m"}));  // not sorted
  EXPECT_EQ(n.size(), 3u);
  EXPECT_TRUE(n.contains("b"));
  EXPECT_FALSE(n.contains("a"));
  EXPECT_TRUE(n.at("m").same(c));  // the handle itself, not a copy
  EXPECT_EQ(n.find("b")->first, "b");
  EXPECT_TRUE(n.find("b")->second.same(b));
  EXPECT_EQ(n.find("nope"), n.end());
  std::vector<std::string> seen;
  for (const auto& [name, t] : n) seen.push_back(name);
  EXPECT_EQ(seen, n.names());
}

TEST(NamedTensors, DuplicateNamesAreRefused) {
  NamedTensors n{{"w", Tensor::zeros({1})}};
  std::string msg = error_of([&] { n.insert("w", Tensor::zeros({2})); });
  EXPECT_NE(msg.find("duplicate tensor name 'w'"), std::string::npos) << msg;
  EXPECT_EQ(n.size(), 1u);
  EXPECT_EQ(n.at("w").shape(), Shape{1});  // unchanged
  msg = error_of([&] { NamedTensors bad{{"x", Tensor::zeros({1})}, {"x", Tensor::zeros({1})}}; });
  EXPECT_NE(msg.find("duplicate tensor name 'x'"), std::string::npos) << msg;
}

TEST(NamedTensors, MissingKeyNamesTheKeyAndWhatIsThere) {
  const NamedTensors n{{"encoder.weight", Tensor::zeros({1})}, {"encoder.bias", Tensor::zeros({1})}};
  const std::string msg = error_of([&] { n.at("decoder.weight"); });
  for (const char* part : {"no tensor 'decoder.weight'", "2 tensors", "'encoder.weight'", "'encoder.bias'"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
  EXPECT_NE(error_of([] { NamedTensors().at("x"); }).find("0 tensors"), std::string::npos);
  // A control character in a key stays escaped, so the message is one line.
  EXPECT_EQ(error_of([&] { n.at("a\nb"); }).find('\n'), std::string::npos);
}

TEST(NamedTensors, TensorsCanBeReplacedInPlaceNamesCannot) {
  NamedTensors n{{"a", Tensor::zeros({1})}, {"b", Tensor::zeros({1})}};
  const Tensor t = Tensor::full({4}, 5.0f);
  n.at("a") = t;
  for (auto& [name, v] : n)
    if (name == "b") v = t;
  EXPECT_TRUE(n.at("a").same(t));
  EXPECT_TRUE(n.at("b").same(t));
  EXPECT_EQ(n.names(), (std::vector<std::string>{"a", "b"}));
}

TEST(NamedTensors, EraseKeepsOrderAndLookup) {
  NamedTensors n{{"a", Tensor::full({1}, 0.0f)}, {"b", Tensor::full({1}, 1.0f)}, {"c", Tensor::full({1}, 2.0f)},
                 {"d", Tensor::full({1}, 3.0f)}};
  EXPECT_TRUE(n.erase("b"));
  EXPECT_FALSE(n.erase("b"));
  EXPECT_EQ(n.names(), (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(n.at("c").item(), 2.0f);  // positions after the erased entry still resolve
  EXPECT_EQ(n.at("d").item(), 3.0f);
  n.insert("b", Tensor::full({1}, 9.0f));  // the name is free again, appended at the end
  EXPECT_EQ(n.names(), (std::vector<std::string>{"a", "c", "d", "b"}));
  EXPECT_EQ(n.at("b").item(), 9.0f);
  n.clear();
  EXPECT_TRUE(n.empty());
  EXPECT_FALSE(n.contains("a"));
}

TEST(NamedTensors, CopiesAreIndependentContainers) {
  NamedTensors a{{"x", Tensor::zeros({1})}};
  NamedTensors b = a;
  b.insert("y", Tensor::zeros({2}));
  b.at("x") = Tensor::full({3}, 1.0f);
  EXPECT_EQ(a.names(), std::vector<std::string>{"x"});
  EXPECT_EQ(a.at("x").shape(), Shape{1});
  a = b;
  EXPECT_EQ(a.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(a.at("y").shape(), Shape{2});
  NamedTensors c = std::move(b);
  EXPECT_EQ(c.at("x").shape(), Shape{3});
}

// A state_dict lists parameters in PyTorch's registration order, and a file read back lists them in
// header order (which the writer sorts by name within a dtype, like the reference implementation).
TEST(NamedTensors, StateDictOrderAndFileOrder) {
  TransformerLayerOptions o;
  o.d_model = 4;
  o.nhead = 2;
  o.dim_feedforward = 8;
  TransformerEncoderLayer layer(o);
  const std::vector<std::string> keys = layer.state_dict().names();
  const std::vector<std::string> torch_order = {
      "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
      "linear1.weight",           "linear1.bias",           "linear2.weight",            "linear2.bias",
      "norm1.weight",             "norm1.bias",             "norm2.weight",              "norm2.bias"};
  EXPECT_EQ(keys, torch_order);

  const std::string dir = tfm::testing::temp_dir("named_tensors");
  io::save_safetensors(dir + "/w.safetensors", layer.state_dict());
  const io::SafeTensorsFile f = io::load_safetensors(dir + "/w.safetensors");
  std::vector<std::string> sorted = torch_order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(f.tensors.names(), sorted);
  for (const auto& [k, t] : layer.state_dict()) EXPECT_TRUE(tfm::testing::bitwise_equal(f.at(k), t, k));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfm
