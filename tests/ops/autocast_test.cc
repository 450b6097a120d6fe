// tests/ops/autocast_test.cc — tfm::Autocast's bfloat16 weight copies kept in a Bf16WeightCache across scopes
// (include/tfm/autocast.h): a scope rounds a weight unless its copy is current, a copy stops being current when
// its scope ends, refresh() makes it current again and Adam's step refreshes it with the weight's new rounding
// (detail::OptimizerShards::step_scaled with the cache), so training with the cache gives the bits of training
// without it.
#include "tfm/autocast.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/gemm_packed.h"
#include "ops/bf16_linear.h"
#include "optim_shards.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/linear.h"
#include "tfm/ops/loss.h"
#include "tfm/optim.h"

namespace tfm {
namespace {

using testing::bitwise_equal;
using testing::random_tensor;

// x·wᵀ in bfloat16 under a scope of its own (no cache): the reference.
Tensor bf16_product(const Tensor& x, const Tensor& w) {
  Autocast scope(Precision::BFLOAT16);
  return ops::linear(x, w, Tensor());
}

TEST(Bf16WeightCache, ACurrentCopyIsUsedAsItIsAndAStaleOneIsRoundedAgain) {
  const Tensor x = random_tensor({3, 8}, 1), w = random_tensor({4, 8}, 2);
  Tensor w2 = w.clone(), w3 = w.clone();
  for (int64_t i = 0; i < w.numel(); ++i) {
    w2.data()[i] = 2.0f * w.data()[i];  // bf16(2w) = 2·bf16(w): x·bf16(2w)ᵀ is the product with 2w
    w3.data()[i] = 3.0f * w.data()[i];
  }
  Bf16WeightCache cache;
  {
    Autocast scope(Precision::BFLOAT16, cache);
    EXPECT_TRUE(bitwise_equal(ops::linear(x, w, Tensor()), bf16_product(x, w), "first scope"));
    EXPECT_EQ(Autocast::cached_weights(), 1u);
  }
  EXPECT_EQ(cache.size(), 1u) << "the copy outlives its scope";
  EXPECT_EQ(cache.refresh(w.data(), w.numel() - 1), nullptr) << "not the weight's whole data";
  EXPECT_EQ(cache.refresh(x.data(), x.numel()), nullptr) << "a tensor no scope rounded";

  // A refreshed copy is taken as its writer left it: here 2w's rounding, while w is unchanged.
  uint16_t* copy = cache.refresh(w.data(), w.numel());
  ASSERT_NE(copy, nullptr);
  kernels::convert_rows_to_bf16_scalar(w2.data(), w.numel(), 1, w.numel(), copy);
  {
    Autocast scope(Precision::BFLOAT16, cache);
    EXPECT_TRUE(bitwise_equal(ops::linear(x, w, Tensor()), bf16_product(x, w2), "refreshed copy"));
  }
  // Not refreshed since: the next scope rounds w again.
  {
    Autocast scope(Precision::BFLOAT16, cache);
    EXPECT_TRUE(bitwise_equal(ops::linear(x, w, Tensor()), bf16_product(x, w), "stale copy rounded again"));
  }
  // A weight changed in place without a refresh: its new values are rounded.
  std::copy(w3.data(), w3.data() + w3.numel(), const_cast<float*>(w.data()));
  {
    Autocast scope(Precision::BFLOAT16, cache);
    EXPECT_TRUE(bitwise_equal(ops::linear(x, w, Tensor()), bf16_product(x, w3), "changed weight"));
  }
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(Bf16WeightCache, AnInnerScopeUsesTheOutermostScopesCopies) {
  const Tensor x = random_tensor({2, 8}, 3), w = random_tensor({5, 8}, 4);
  Bf16WeightCache outer_cache, other;
  Autocast outer(Precision::BFLOAT16, outer_cache);
  {
    Autocast inner(Precision::BFLOAT16);  // no cache of its own: the outermost scope's
    ops::linear(x, w, Tensor());
  }
  EXPECT_EQ(outer_cache.size(), 1u);
  { Autocast same(Precision::BFLOAT16, outer_cache); }
  EXPECT_THROW(Autocast(Precision::BFLOAT16, other), std::invalid_argument);
  EXPECT_EQ(Autocast::current_precision(), Precision::BFLOAT16) << "a refused scope changes nothing";
}

// Three Adam steps of a bf16 Linear with the cache (copies refreshed by the step) and without it: the same
// parameters bit for bit. Before each step the cached copy is poisoned and marked current: the next scope then
// multiplies by what the step wrote there, which must be the new weight's rounding.
TEST(Bf16WeightCache, AdamRefreshesTheCopiesWithTheNewWeightsRounding) {
  const Tensor x = random_tensor({16, 24}, 5), target = random_tensor({16, 20}, 6);
  NamedTensors with, without;
  with.insert("weight", random_tensor({20, 24}, 7).requires_grad_(true));
  with.insert("bias", random_tensor({20}, 8).requires_grad_(true));
  for (const auto& [key, t] : with) without.insert(key, t.detach().clone().requires_grad_(true));
  Adam a(with, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, true), b(without, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, true);
  Bf16WeightCache cache;
  for (int step = 0; step < 3; ++step) {
    {
      Autocast scope(Precision::BFLOAT16, cache);
      ops::mse_loss(ops::linear(x, with.at("weight"), with.at("bias")), target).backward();
    }
    {
      Autocast scope(Precision::BFLOAT16);
      ops::mse_loss(ops::linear(x, without.at("weight"), without.at("bias")), target).backward();
    }
    ASSERT_TRUE(bitwise_equal(with.at("weight").grad(), without.at("weight").grad(), "dW"));
    const Tensor& w = with.at("weight");
    uint16_t* poison = cache.refresh(w.data(), w.numel());
    ASSERT_NE(poison, nullptr);
    std::fill(poison, poison + w.numel(), uint16_t{0x7FC1});
    EXPECT_EQ(cache.refresh(with.at("bias").data(), 20), nullptr) << "a bias is not multiplied in bf16";
    a.step(cache);
    b.step();
    a.zero_grad();
    b.zero_grad();
    for (const char* key : {"weight", "bias"})
      ASSERT_TRUE(bitwise_equal(with.at(key), without.at(key), key)) << "step " << step;
    Autocast scope(Precision::BFLOAT16, cache);
    const ops::Bf16Weight w16 = ops::autocast_weight(w);
    std::vector<uint16_t> want(static_cast<size_t>(w.numel()));
    kernels::convert_rows_to_bf16_scalar(w.data(), w.numel(), 1, w.numel(), want.data());
    ASSERT_EQ(*w16, want) << "step " << step;
  }
}

}  // namespace
}  // namespace tfm
