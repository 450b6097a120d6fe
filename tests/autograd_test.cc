// tests/autograd_test.cc — the tape (src/tensor.cc) and the backward of the ops that are linear or
// quadratic in their differentiated input: dropout, embedding, add, mul_scalar, add_positional,
// reshape, narrow0, sum, mse_loss; and the callback backward makes when a leaf's gradient is final.
//
// For a function that is linear (or quadratic) in x, the central difference
// (ℓ(x + h·e_i) − ℓ(x − h·e_i)) / 2h is exact for any h; with h = 1 the only error is float rounding
// of the forward values, ≈ a few ε·|ℓ| ≈ 1e-6 relative here, so a relative bound of 1e-4 is loose for
// rounding yet fails on any wrong gradient term (errors of order 1). The nonlinear ops' rules have
// double-precision checks in tests/kernels/gradcheck_test.cc and attention_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/embedding.h"
#include "tfm/ops/linear.h"
#include "tfm/ops/loss.h"

namespace tfm {
namespace {

using testing::random_tensor;

// ℓ(x) = Σ f(x) ⊙ w for a fixed random w; checks x.grad against central differences (h = 1).
void check_linear_op(Tensor x, const std::function<Tensor(const Tensor&)>& f, const char* what) {
  x.requires_grad_(true);
  Tensor y = f(x);
  Tensor w = random_tensor(y.shape(), 99);
  // ℓ(x) evaluated without the tape, for the differences.
  auto value = [&](const Tensor& in) {
    NoGradGuard ng;
    Tensor out = f(in);
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data()[i]) * w.data()[i];
    return s;
  };
  y.backward(w);  // dℓ/dx through the tape
  Tensor g = x.grad();
  ASSERT_TRUE(g.defined()) << what;
  Tensor probe = x.detach().clone();
  std::vector<double> numeric(static_cast<size_t>(probe.numel()));
  for (int64_t i = 0; i < probe.numel(); ++i) {
    const float keep = probe.data()[i];
    probe.data()[i] = keep + 1.0f;
    const double up = value(probe);
    probe.data()[i] = keep - 1.0f;
    const double down = value(probe);
    probe.data()[i] = keep;
    numeric[static_cast<size_t>(i)] = (up - down) / 2.0;
  }
  // max|tape − numeric| / max|numeric| ≤ 1e-4.
  EXPECT_TRUE(testing::close_rel(testing::values(g), numeric, 1e-4, what, testing::kTinyMagnitude, g.shape()));
}

TEST(Autograd, DropoutBackwardIsTheSameMask) {
  Generator gen{7, 0};
  // The mask is a function of (seed, offset): replaying the generator replays the mask.
  check_linear_op(random_tensor({5, 13}, 1), [&](const Tensor& x) {
    Generator g = gen;
    return ops::dropout(x, 0.3f, true, g);
  }, "dropout");
}

TEST(Autograd, EmbeddingScatterAddsRepeatedIdsAndSkipsPadding) {
  std::vector<int32_t> ids = {3, 1, 3, 0, 2, 3};
  check_linear_op(random_tensor({5, 4}, 2), [&](const Tensor& w) { return ops::embedding(w, ids, {2, 3}); },
                  "embedding");
  Tensor w = random_tensor({5, 4}, 3);
  w.requires_grad_(true);
  ops::embedding(w, ids, {6}, /*padding_idx=*/3).backward(Tensor::full({6, 4}, 1.0f));
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(w.grad().data()[3 * 4 + d], 0.0f);  // padding row: no gradient
    EXPECT_EQ(w.grad().data()[1 * 4 + d], 1.0f);  // id 1 used once
  }
}

TEST(Autograd, ElementwiseAndViews) {
  Tensor c = random_tensor({3, 4}, 4);
  check_linear_op(random_tensor({3, 4}, 5), [&](const Tensor& x) { return ops::add(x, c); }, "add");
  check_linear_op(random_tensor({3, 4}, 6), [&](const Tensor& x) { return ops::mul_scalar(x, -2.5f); }, "mul_scalar");
  Tensor table = random_tensor({10, 4}, 7);
  check_linear_op(random_tensor({2, 3, 4}, 8), [&](const Tensor& x) { return ops::add_positional(x, table, true); },
                  "add_positional batch_first");
  check_linear_op(random_tensor({3, 2, 4}, 9), [&](const Tensor& x) { return ops::add_positional(x, table, false); },
                  "add_positional seq_first");
  check_linear_op(random_tensor({3, 4}, 10), [&](const Tensor& x) { return x.reshape({4, 3}); }, "reshape");
  check_linear_op(random_tensor({5, 3}, 11), [&](const Tensor& x) { return x.narrow0(1, 3); }, "narrow0");
  check_linear_op(random_tensor({5, 3}, 12), [&](const Tensor& x) { return ops::sum(x); }, "sum");
}

TEST(Autograd, MseLossIsQuadraticSoCentralDifferencesAreExact) {
  Tensor target = random_tensor({4, 5}, 13);
  check_linear_op(random_tensor({4, 5}, 14), [&](const Tensor& x) { return ops::mse_loss(x, target); }, "mse_loss");
}

// Fan-out: y = x + x·3 sends two contributions into x's slot; dℓ/dx = 4 for ℓ = Σ y.
TEST(Autograd, FanOutAccumulatesAndLeafGradsAccumulateAcrossCalls) {
  Tensor x = random_tensor({2, 3}, 15);
  x.requires_grad_(true);
  ops::sum(ops::add(x, ops::mul_scalar(x, 3.0f))).backward();
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x.grad().data()[i], 4.0f);
  ops::sum(x).backward();  // a second backward adds, as PyTorch does until zero_grad
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x.grad().data()[i], 5.0f);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = random_tensor({2, 3}, 16);
  x.requires_grad_(true);
  {
    NoGradGuard ng;
    Tensor y = ops::mul_scalar(x, 2.0f);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor y = ops::mul_scalar(x, 2.0f);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_NE(y.grad_fn(), nullptr);
}

// on_grad_final: a two-layer graph with a leaf T used at both ends, so that its gradient gets one
// contribution early in the backward (through z = y + 2·T) and its last one late (through h + T):
//   h = x·W1ᵀ + b1, h2 = h + T, y = h2·W2ᵀ + b2, z = y + 2·T, ℓ = Σ z        x: no grad
// The backward runs sum, then z's add, L2 (and 2·T's node, in either order), h2's add, L1: W2 and b2
// are final after L2, T after h2's add, W1 and b1 after L1. The callback must come once per leaf
// requiring grad, in that order, each grad at that moment already equal to its final value, and the
// grads must be bitwise those of the plain backward.
std::vector<float> copy_of(const Tensor& t) {
  const auto v = testing::values(t);
  return {v.begin(), v.end()};
}

struct TwoLayerGraph {
  Tensor x = random_tensor({3, 4}, 21), W1 = random_tensor({5, 4}, 22), b1 = random_tensor({5}, 23),
         W2 = random_tensor({5, 5}, 24), b2 = random_tensor({5}, 25), T = random_tensor({3, 5}, 26);
  TwoLayerGraph() {
    for (Tensor* p : {&W1, &b1, &W2, &b2, &T}) p->requires_grad_(true);
  }
  Tensor loss() const {
    const Tensor h2 = ops::add(ops::linear(x, W1, b1), T);
    return ops::sum(ops::add(ops::linear(h2, W2, b2), ops::mul_scalar(T, 2.0f)));
  }
  std::vector<Tensor> leaves() const { return {W1, b1, W2, b2, T}; }
};

TEST(Autograd, OnGradFinalComesOncePerLeafAfterItsLastAccumulationInGraphOrder) {
  TwoLayerGraph plain;
  plain.loss().backward();
  for (int run = 0; run < 2; ++run) {  // twice: the order is a function of the graph
    TwoLayerGraph g;
    std::vector<const TensorImpl*> seen;
    std::vector<std::vector<float>> at_callback;
    g.loss().backward(Tensor(), [&](const Tensor& leaf) {
      seen.push_back(leaf.impl());
      ASSERT_TRUE(leaf.grad().defined());
      at_callback.push_back(copy_of(leaf.grad()));
    });
    const std::vector<const TensorImpl*> expected = {g.W2.impl(), g.b2.impl(), g.T.impl(), g.W1.impl(), g.b1.impl()};
    ASSERT_EQ(seen, expected) << "run " << run;
    const std::vector<Tensor> leaves = g.leaves(), plain_leaves = plain.leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
      const size_t k = static_cast<size_t>(std::find(seen.begin(), seen.end(), leaves[i].impl()) - seen.begin());
      EXPECT_EQ(at_callback[k], copy_of(leaves[i].grad())) << "leaf " << i << " changed after its callback";
      EXPECT_EQ(copy_of(leaves[i].grad()), copy_of(plain_leaves[i].grad())) << "leaf " << i;
    }
    EXPECT_FALSE(g.x.grad().defined());
  }
}

// A leaf that is its own root is final once its grad_output is accumulated.
TEST(Autograd, OnGradFinalForALeafRoot) {
  Tensor x = random_tensor({2, 3}, 27);
  x.requires_grad_(true);
  int calls = 0;
  x.backward(Tensor::full({2, 3}, 2.0f), [&](const Tensor& leaf) {
    ++calls;
    EXPECT_TRUE(leaf.same(x));
    EXPECT_EQ(leaf.grad().data()[0], 2.0f);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tfm
