// tests/modules/basic_test.cc — the modules of src/modules/basic.cc beyond what the parity suite
// checks against PyTorch: RMSNorm (no torch.nn twin in PyTorch 1.13) — its state_dict key, its
// initial weight, and that its forward is ops::rms_norm with its eps (the op itself is tested in
// tests/ops/rms_norm_test.cc).
// To add a case: a TEST per module property that parity cannot see.
#include "tfm/modules/basic.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "test_util.h"
#include "tfm/named_tensors.h"
#include "tfm/ops/rms_norm.h"

namespace tfm {
namespace {

using testing::bitwise_equal;
using testing::random_tensor;

TEST(RMSNormModule, WeightOnlyInitialisedToOnes) {
  RMSNorm norm(6, 1e-6f);
  NamedTensors sd = norm.state_dict();
  ASSERT_EQ(sd.names(), std::vector<std::string>{"weight"});
  EXPECT_EQ(sd.at("weight").shape(), (Shape{6}));
  for (float v : testing::values(sd.at("weight"))) EXPECT_EQ(v, 1.0f);
  EXPECT_TRUE(norm.weight.requires_grad());
  EXPECT_EQ(norm.eps, 1e-6f);
}

TEST(RMSNormModule, ForwardIsTheOpWithItsEps) {
  RMSNorm norm(9, 1e-3f);
  NamedTensors state;
  state.insert("weight", random_tensor({9}, 1));
  norm.load_state_dict(state);
  Tensor x = random_tensor({2, 3, 9}, 2);
  EXPECT_TRUE(bitwise_equal(norm.forward(x), ops::rms_norm(x, state.at("weight"), 1e-3f), "y"));
}

// A LayerNorm's state_dict (weight and bias) does not load into an RMSNorm: the bias is unexpected.
TEST(RMSNormModule, RefusesABias) {
  RMSNorm norm(4);
  NamedTensors state;
  state.insert("weight", random_tensor({4}, 1));
  state.insert("bias", random_tensor({4}, 2));
  try {
    norm.load_state_dict(state, "norm.safetensors");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tfm
