// tests/ops/embedding_test.cc — ops::embedding (src/ops/embedding.cc), torch.nn.functional.embedding:
// its argument checks (an out-of-range id is named with the valid range; a weight or id count that
// does not fit names the tensor and the sizes), the forward's shape and rows, the backward's
// scatter-add (repeated ids accumulate, rows of padding_idx get no gradient, rows never looked up
// get zeros), accumulation across backward calls, and a hand-checked case.
// tests/autograd_test.cc checks the backward once against central differences; this file checks
// the op's contract element by element.
//
// Tolerance: the forward copies rows, so it must equal the weight's rows bit for bit. Row r of the
// weight's gradient is the float sum, in id order, of the c_r output-gradient rows whose id is r:
// c_r − 1 roundings (the first addition, into zeros, is exact), so |dW − Σ| ≤ γ_{c_r − 1}·Σ|dy|
// against the sum taken in double (γ_n = n·u/(1 − n·u), u = 2⁻²⁴): derived from the gradients'
// norm, element by element. A single use is exact (tolerance 0), and the padding row and unused
// rows must be exactly zero.
// To add a case: another ids/padding_idx pattern in the loops below.
#include "tfm/ops/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/attention_reference.h"
#include "test_util.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::close_abs;
using tfm::testing::expect_invalid;
using tfm::testing::gamma_n;
using tfm::testing::random_tensor;

// dW (V, D) for ids, dy (n, D), padding_idx: the double sum per row and its γ_{c − 1} tolerance (c
// rows added into a zero row: the first addition is exact), `times` backward calls accumulated.
void expect_grad(const Tensor& got, const std::vector<int32_t>& ids, const Tensor& dy, int64_t V, int64_t padding_idx,
                 int times, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), (Shape{V, dy.size(-1)})) << what;
  const int64_t D = dy.size(-1);
  std::vector<double> sum(static_cast<size_t>(V * D), 0.0), abs(static_cast<size_t>(V * D), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(V), 0);
  for (size_t n = 0; n < ids.size(); ++n) {
    if (ids[n] == padding_idx) continue;
    ++count[static_cast<size_t>(ids[n])];
    for (int64_t d = 0; d < D; ++d) {
      const double g = dy.data()[static_cast<int64_t>(n) * D + d];
      sum[static_cast<size_t>(ids[n] * D + d)] += times * g;
      abs[static_cast<size_t>(ids[n] * D + d)] += times * std::fabs(g);
    }
  }
  std::vector<double> tol(sum.size());
  for (int64_t r = 0; r < V; ++r)
    for (int64_t d = 0; d < D; ++d)
      tol[static_cast<size_t>(r * D + d)] =
          gamma_n(std::max<int64_t>(times * count[static_cast<size_t>(r)] - 1, 0)) * abs[static_cast<size_t>(r * D + d)];
  EXPECT_TRUE(close_abs(tfm::testing::values(got), sum, tol, what, got.shape()));
}

// weight (3, 2) = [[1, 2], [3, 4], [5, 6]], ids [[2, 0], [2, 1]] (shape (2, 2)), padding_idx 1:
//   y = [[[5, 6], [1, 2]], [[5, 6], [3, 4]]]  — the padding row is still looked up (as PyTorch);
//   dy = [[[1, 10], [100, 1000]], [[2, 20], [3, 30]]]:
//   dW[0] = [100, 1000];  dW[2] = [1 + 2, 10 + 20] = [3, 30] (id 2 twice);  dW[1] = 0 (padding).
TEST(Embedding, HandChecked) {
  Tensor w = Tensor::from_vector({3, 2}, {1, 2, 3, 4, 5, 6}).requires_grad_(true);
  Tensor y = embedding(w, {2, 0, 2, 1}, {2, 2}, /*padding_idx=*/1);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(std::vector<float>(y.data(), y.data() + 8), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  y.backward(Tensor::from_vector({2, 2, 2}, {1, 10, 100, 1000, 2, 20, 3, 30}));
  EXPECT_EQ(std::vector<float>(w.grad().data(), w.grad().data() + 6), (std::vector<float>{100, 1000, 0, 0, 3, 30}));
}

// The output is (shape..., D) and row n is weight row ids[n], bit for bit, for a scalar shape, one
// and two leading dims, and no ids at all.
TEST(Embedding, ForwardCopiesTheRowsIntoTheGivenShape) {
  const int64_t V = 11, D = 19;
  const Tensor w = random_tensor({V, D}, 1);
  const std::vector<std::pair<std::vector<int32_t>, Shape>> cases = {
      {{7}, {}}, {{0, 10, 3, 3}, {4}}, {{5, 1, 10, 0, 2, 5}, {2, 3}}, {{}, {0}}, {{}, {2, 0}}};
  for (const auto& [ids, shape] : cases) {
    const Tensor y = embedding(w, ids, shape);
    Shape expected = shape;
    expected.push_back(D);
    ASSERT_EQ(y.shape(), expected) << shape_str(shape);
    std::vector<float> rows;
    for (int32_t id : ids) rows.insert(rows.end(), w.data() + id * D, w.data() + (id + 1) * D);
    EXPECT_TRUE(bitwise_equal(tfm::testing::values(y), rows, "rows of " + shape_str(shape)));
  }
}

// Repeated ids sum their gradient rows; the padding row (when set) gets none though it is looked up,
// unused rows get exact zeros; with padding_idx −1 (none) every id counts, id 0 included.
TEST(Embedding, BackwardScatterAddsRepeatedIdsAndSkipsPadding) {
  const int64_t V = 9, D = 17;
  const std::vector<int32_t> ids = {4, 0, 4, 8, 4, 2, 0, 4, 2, 6, 4, 4};  // 4 six times, 3 and 5 and 7 never
  for (int64_t padding_idx : {int64_t{-1}, int64_t{0}, int64_t{4}, int64_t{3}}) {
    Tensor w = random_tensor({V, D}, 10).requires_grad_(true);
    Tensor y = embedding(w, ids, {3, 4}, padding_idx);
    const Tensor dy = random_tensor(y.shape(), 11);
    y.backward(dy);
    const std::string what = "dW padding_idx " + std::to_string(padding_idx);
    expect_grad(w.grad(), ids, dy, V, padding_idx, 1, what);
    if (padding_idx >= 0) {
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(w.grad().data()[padding_idx * D + d], 0.0f) << what;
    }
    for (int64_t unused : {3, 5, 7}) {
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(w.grad().data()[unused * D + d], 0.0f) << what << " row " << unused;
    }
  }
}

// A second backward adds into the defined gradient (the slot is not zeroed again); zero_grad drops it.
TEST(Embedding, GradientsAccumulateAcrossBackwardCalls) {
  const int64_t V = 6, D = 5;
  const std::vector<int32_t> ids = {1, 5, 1, 2, 5, 5};
  Tensor w = random_tensor({V, D}, 20).requires_grad_(true);
  const Tensor dy = random_tensor({6, D}, 21);
  embedding(w, ids, {6}, 2).backward(dy);
  embedding(w, ids, {6}, 2).backward(dy);
  expect_grad(w.grad(), ids, dy, V, 2, 2, "dW twice");
  w.zero_grad();
  embedding(w, ids, {6}, 2).backward(dy);
  expect_grad(w.grad(), ids, dy, V, 2, 1, "dW after zero_grad");
}

TEST(Embedding, NoTapeWithoutGrad) {
  Tensor w = random_tensor({4, 3}, 30).requires_grad_(true);
  EXPECT_NE(embedding(w, {1, 2}, {2}).grad_fn(), nullptr);
  NoGradGuard ng;
  EXPECT_EQ(embedding(w, {1, 2}, {2}).grad_fn(), nullptr);
  const Tensor plain = random_tensor({4, 3}, 31);
  EXPECT_FALSE(embedding(plain, {1}, {1}).requires_grad());
}

TEST(Embedding, ErrorsNameTheIdAndTheTensor) {
  const Tensor w = random_tensor({5, 3}, 40);
  expect_invalid([&] { embedding(w, {0, 5, 1}, {3}); }, {"embedding: id 5 out of range [0, 5)"});
  expect_invalid([&] { embedding(w, {-1}, {1}); }, {"embedding: id -1 out of range [0, 5)"});
  expect_invalid([&] { embedding(w, {4, 2, 1000000}, {3}); }, {"embedding: id 1000000 out of range [0, 5)"});
  // padding_idx does not make an out-of-range id valid.
  expect_invalid([&] { embedding(w, {7}, {1}, 7); }, {"embedding: id 7 out of range [0, 5)"});
  expect_invalid([&] { embedding(w, {0, 1, 2, 3, 4}, {2, 3}); }, {"embedding: 5 ids for shape (2, 3)"});
  expect_invalid([&] { embedding(random_tensor({15}, 41), {0}, {1}); }, {"embedding: weight must be (V, D), got Float32(15,)"});
  expect_invalid([&] { embedding(Tensor::zeros({5, 3}, DType::BOOL), {0}, {1}); },
                 {"embedding: weight must be Float32, got Bool(5, 3)"});
  expect_invalid([&] { embedding(Tensor(), {0}, {1}); }, {"embedding: weight is undefined"});
}

}  // namespace
}  // namespace tfm::ops
