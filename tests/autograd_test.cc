// tests/autograd_test.cc — the tape (src/tensor.cc) and the backward of the ops that are linear or
// quadratic in their differentiated input: dropout, embedding, add, mul_scalar, add_positional,
// reshape, narrow0, sum, mse_loss.
//
// For a function that is linear (or quadratic) in x, the central difference
// (ℓ(x + h·e_i) − ℓ(x − h·e_i)) / 2h is exact for any h; with h = 1 the only error is float rounding
// of the forward values, ≈ a few ε·|ℓ| ≈ 1e-6 relative here, so a relative bound of 1e-4 is loose for
// rounding yet fails on any wrong gradient term (errors of order 1). The nonlinear ops' rules have
// double-precision checks in tests/kernels/gradcheck_test.cc and attention_test.cc.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/embedding.h"
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

}  // namespace
}  // namespace tfm
