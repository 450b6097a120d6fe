// tests/modules/basic_test.cc — the modules of src/modules/basic.cc beyond what the parity suite
// checks against PyTorch: RMSNorm (no torch.nn twin in PyTorch 1.13) — its state_dict key, its
// initial weight, and that its forward is ops::rms_norm with its eps (the op itself is tested in
// tests/ops/rms_norm_test.cc); Norm, the layers' norm, which must be LayerNorm's or RMSNorm's own
// ops (bitwise) with their keys; Module::load_state_dict's copy and assign.
// To add a case: a TEST per module property that parity cannot see.
#include "tfm/modules/basic.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "test_util.h"
#include "tfm/named_tensors.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/layer_norm.h"
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

// load_state_dict copies into the parameters, or with assign makes each view the state's tensor (no
// copy: the module's handles see the state's storage, and a write to one is seen by the other); both
// refuse a shape that does not fit and leave nothing unchecked.
TEST(ModuleLoadStateDict, CopiesOrAssigns) {
  NamedTensors state;
  state.insert("weight", random_tensor({3, 5}, 1));
  state.insert("bias", random_tensor({3}, 2));
  Linear copied(5, 3), assigned(5, 3);
  copied.load_state_dict(state);
  assigned.load_state_dict(state, "state", /*assign=*/true);
  for (const char* key : {"weight", "bias"}) {
    const Tensor& s = state.at(key);
    const Tensor c = copied.state_dict().at(key);
    const Tensor a = assigned.state_dict().at(key);
    EXPECT_TRUE(bitwise_equal(c, s, key));
    EXPECT_TRUE(bitwise_equal(a, s, key));
    EXPECT_NE(c.data(), s.data()) << key;
    EXPECT_EQ(a.data(), s.data()) << key;
  }
  EXPECT_TRUE(assigned.weight.requires_grad());  // still the module's parameter
  state.at("weight").data()[0] = 42.0f;
  EXPECT_EQ(assigned.weight.data()[0], 42.0f);
  EXPECT_NE(copied.weight.data()[0], 42.0f);
  NamedTensors wrong;
  wrong.insert("weight", random_tensor({5, 3}, 3));
  wrong.insert("bias", random_tensor({3}, 4));
  EXPECT_THROW(assigned.load_state_dict(wrong, "w", true), std::invalid_argument);
  EXPECT_THROW(Tensor(random_tensor({2}, 5)).set_(random_tensor({3}, 6)), std::invalid_argument);
}

TEST(NormModule, KeysPerTypeAndBias) {
  EXPECT_EQ(Norm(NormType::LAYER_NORM, 5).state_dict().names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(Norm(NormType::LAYER_NORM, 5, 1e-5f, false).state_dict().names(), std::vector<std::string>{"weight"});
  EXPECT_EQ(Norm(NormType::RMS_NORM, 5, 1e-5f, false).state_dict().names(), std::vector<std::string>{"weight"});
  EXPECT_THROW(Norm(NormType::RMS_NORM, 5, 1e-5f, true), std::invalid_argument);
  EXPECT_EQ(enum_from_name<NormType>("rms_norm"), NormType::RMS_NORM);
  EXPECT_EQ(enum_name(NormType::LAYER_NORM), "layer_norm");
}

// forward, forward_add and the dropout-fused forward_add are LayerNorm's fused ops and, for
// RMS_NORM, rms_norm of the composed residual (training mode, so the dropout draws).
TEST(NormModule, ForwardsAreTheOps) {
  const Tensor w = random_tensor({8}, 10), b = random_tensor({8}, 11);
  const Tensor x = random_tensor({3, 4, 8}, 12), r = random_tensor({3, 4, 8}, 13);
  for (NormType type : {NormType::LAYER_NORM, NormType::RMS_NORM}) {
    const bool bias = type == NormType::LAYER_NORM;
    Norm norm(type, 8, 1e-4f, bias);
    NamedTensors state;
    state.insert("weight", w);
    if (bias) state.insert("bias", b);
    norm.load_state_dict(state);
    Generator gn{5, 0}, gr{5, 0};
    Dropout drop(0.3f, gn);
    const std::string what(enum_name(type));
    if (bias) {
      EXPECT_TRUE(bitwise_equal(norm.forward(x), ops::layer_norm(x, w, b, 1e-4f), what));
      EXPECT_TRUE(bitwise_equal(norm.forward_add(x, r), ops::add_layer_norm(x, r, w, b, 1e-4f), what));
      EXPECT_TRUE(bitwise_equal(norm.forward_add(x, r, drop),
                                ops::add_dropout_layer_norm(x, r, 0.3f, true, gr, w, b, 1e-4f), what));
    } else {
      EXPECT_TRUE(bitwise_equal(norm.forward(x), ops::rms_norm(x, w, 1e-4f), what));
      EXPECT_TRUE(bitwise_equal(norm.forward_add(x, r), ops::rms_norm(ops::add(x, r), w, 1e-4f), what));
      EXPECT_TRUE(bitwise_equal(norm.forward_add(x, r, drop),
                                ops::rms_norm(ops::add(x, ops::dropout(r, 0.3f, true, gr)), w, 1e-4f), what));
    }
    EXPECT_EQ(gn.offset, gr.offset);
    EXPECT_GT(gn.offset, 0u);
  }
}

TEST(DropPathModule, IdentityInEvalTheOpInTraining) {
  Generator g{4, 0}, gr{4, 0};
  DropPath dp(0.5f, 1, g);
  const Tensor x = random_tensor({3, 8, 2}, 20);
  EXPECT_TRUE(dp.active());
  EXPECT_TRUE(bitwise_equal(dp.forward(x), ops::drop_path(x, 0.5f, 1, true, gr), "training"));
  EXPECT_EQ(g.offset, 8u);
  dp.eval();
  EXPECT_FALSE(dp.active());
  EXPECT_EQ(dp.forward(x).data(), x.data());
  EXPECT_EQ(g.offset, 8u);
}

}  // namespace
}  // namespace tfm
