// tests/ops/dropout_test.cc — the dropout ops of src/ops/dropout.cc fused into their neighbour:
// ops::add_dropout (pre-norm's residual, x + dropout(r)). Its kernel applies the same per-element
// float operations in the same order as the composition it replaces (the mask is the same pure
// function of seed and counter), so the output, every gradient and the generator's position
// afterwards must be bitwise equal to ops::add(x, ops::dropout(r)). The plain dropout's backward is
// checked against finite differences in tests/autograd_test.cc; the other fused dropouts with their
// ops (layer_norm_test.cc, linear_activation_test.cc), the kernels' SIMD bodies in tests/kernels/.
// ops::drop_path (stochastic depth) is checked against its definition with the mask injected: the
// keep decision of sample s is kernels::dropout_keep(seed, offset + s, p), so the expected output
// x·m_s/(1 − p) and gradient dy·m_s/(1 − p) are computed here element by element (one float multiply
// each, the op's own arithmetic: bitwise equal).
// To add a case: another shape or p in the loops below.
#include "tfm/ops/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "kernels/kernels.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/elementwise.h"
#include "tfm/random.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::random_tensor;

struct Leaves {
  Tensor x, r;
};

Leaves make_leaves(const Shape& shape, uint64_t seed) {
  Leaves l;
  l.x = random_tensor(shape, seed).requires_grad_(true);
  l.r = random_tensor(shape, seed + 1).requires_grad_(true);
  return l;
}

TEST(Dropout, AddDropoutEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Shape shape : {Shape{3, 5, 7}, Shape{300, 515}}) {
      Leaves f = make_leaves(shape, 50), c = make_leaves(shape, 50);
      Tensor gy = random_tensor(shape, 54);
      Generator gf{9, 5}, gc{9, 5};
      Tensor yf = add_dropout(f.x, f.r, 0.2f, true, gf);
      Tensor yc = add(c.x, dropout(c.r, 0.2f, true, gc));
      ASSERT_TRUE(bitwise_equal(yf, yc, "y")) << "threads " << threads;
      EXPECT_EQ(gf.offset, gc.offset);
      yf.backward(gy);
      yc.backward(gy);
      EXPECT_TRUE(bitwise_equal(f.x.grad(), c.x.grad(), "dx"));
      EXPECT_TRUE(bitwise_equal(f.r.grad(), c.r.grad(), "dr"));
    }
  }
}

// Outside training, p = 0 and p = 1 take the composition's path: no draw where dropout makes none,
// and p = 1 drops the whole branch.
TEST(Dropout, AddDropoutEdgeCasesFollowDropout) {
  Leaves l = make_leaves({4, 16}, 60);
  Generator g{3, 0};
  Tensor y_all = add_dropout(l.x, l.r, 1.0f, true, g);
  EXPECT_TRUE(bitwise_equal(y_all, add(l.x, Tensor::zeros({4, 16})), "p = 1"));
  Tensor y_none = add_dropout(l.x, l.r, 0.0f, true, g);
  EXPECT_TRUE(bitwise_equal(y_none, add(l.x, l.r), "p = 0"));
}

// x·m/(1 − p) with m_s = dropout_keep(seed, offset + s, p), s the index along sample_dim.
Tensor with_sample_mask(const Tensor& x, int64_t sample_dim, float p, uint64_t seed, uint64_t offset) {
  int64_t inner = 1;
  for (int64_t d = sample_dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(sample_dim);
  const float scale = 1.0f / (1.0f - p);
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t s = (i / inner) % n;
    const bool keep = kernels::dropout_keep(seed, offset + static_cast<uint64_t>(s), p);
    y.data()[i] = x.data()[i] * (keep ? scale : 0.0f);
  }
  return y;
}

TEST(DropPath, EqualsInjectedMaskForwardAndBackward) {
  // (B, T, D) batch_first → sample dim 0; (T, B, D) → 1; a rank-2 (B, D) input → 0.
  for (auto [shape, dim] : {std::pair{Shape{6, 5, 7}, int64_t{0}}, std::pair{Shape{5, 6, 7}, int64_t{1}},
                            std::pair{Shape{40, 3}, int64_t{0}}})
    for (float p : {0.25f, 0.5f}) {
      Tensor x = random_tensor(shape, 70).requires_grad_(true);
      Tensor gy = random_tensor(shape, 71);
      Generator g{11, 40};
      Tensor y = drop_path(x, p, dim, true, g);
      EXPECT_EQ(g.offset, 40u + static_cast<uint64_t>(shape[static_cast<size_t>(dim)]));  // one draw per sample
      ASSERT_TRUE(bitwise_equal(y, with_sample_mask(x, dim, p, 11, 40), "y")) << "p " << p << " dim " << dim;
      y.backward(gy);
      EXPECT_TRUE(bitwise_equal(x.grad(), with_sample_mask(gy, dim, p, 11, 40), "dx"));
      // Both decisions occur among the samples (else the test could not tell a mask from none).
      int kept = 0;
      const int64_t n = shape[static_cast<size_t>(dim)];
      for (int64_t s = 0; s < n; ++s) kept += kernels::dropout_keep(11, 40 + static_cast<uint64_t>(s), p);
      if (n >= 6) {
        EXPECT_GT(kept, 0);
        EXPECT_LT(kept, n);
      }
    }
}

// Eval mode and p = 0 return x itself with no draw; p outside [0, 1) and a bad sample dim throw.
TEST(DropPath, IdentityOutsideTrainingAndErrors) {
  Tensor x = random_tensor({4, 3, 2}, 80);
  Generator g{3, 7};
  EXPECT_EQ(drop_path(x, 0.5f, 0, false, g).data(), x.data());
  EXPECT_EQ(drop_path(x, 0.0f, 0, true, g).data(), x.data());
  EXPECT_EQ(g.offset, 7u);
  EXPECT_THROW(drop_path(x, 1.0f, 0, true, g), std::invalid_argument);
  EXPECT_THROW(drop_path(x, -0.1f, 0, false, g), std::invalid_argument);
  EXPECT_THROW(drop_path(x, 0.5f, 3, true, g), std::invalid_argument);
}

}  // namespace
}  // namespace tfm::ops
