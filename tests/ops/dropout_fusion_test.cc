// tests/ops/dropout_fusion_test.cc — the residual dropouts fused into their neighbour:
// ops::add_dropout_layer_norm (post-norm: LayerNorm(x + dropout(r))) and ops::add_dropout (pre-norm:
// x + dropout(r)). The fused kernels apply the same per-element float operations in the same order
// as the composition they replace (the mask is the same pure function of seed and counter), so the
// output, every gradient and the generator's position afterwards must be bitwise equal to
// ops::add_layer_norm(x, ops::dropout(r)) and ops::add(x, ops::dropout(r)).
// To add a case: another shape or p in the loops below.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "kernels/kernels.h"
#include "kernels/rowwise.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/layer_norm.h"
#include "tfm/random.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::random_tensor;

struct Leaves {
  Tensor x, r, w, b;
};

Leaves make_leaves(const Shape& shape, int64_t D, uint64_t seed) {
  Leaves l;
  l.x = random_tensor(shape, seed).requires_grad_(true);
  l.r = random_tensor(shape, seed + 1).requires_grad_(true);
  l.w = random_tensor({D}, seed + 2).requires_grad_(true);
  l.b = random_tensor({D}, seed + 3).requires_grad_(true);
  return l;
}

void expect_same(const Leaves& a, const Leaves& b, bool with_norm) {
  EXPECT_TRUE(bitwise_equal(a.x.grad(), b.x.grad(), "dx"));
  EXPECT_TRUE(bitwise_equal(a.r.grad(), b.r.grad(), "dr"));
  if (with_norm) {
    EXPECT_TRUE(bitwise_equal(a.w.grad(), b.w.grad(), "dw"));
    EXPECT_TRUE(bitwise_equal(a.b.grad(), b.b.grad(), "db"));
  }
}

TEST(DropoutFusion, AddDropoutLayerNormEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Shape shape : {Shape{3, 5, 7}, Shape{130, 515}, Shape{2, 64, 512}}) {
      const int64_t D = shape.back();
      for (float p : {0.1f, 0.5f}) {
        Leaves f = make_leaves(shape, D, 40), c = make_leaves(shape, D, 40);
        Tensor gy = random_tensor(shape, 44);
        Generator gf{7, 123}, gc{7, 123};
        Tensor yf = add_dropout_layer_norm(f.x, f.r, p, true, gf, f.w, f.b, 1e-5f);
        Tensor yc = add_layer_norm(c.x, dropout(c.r, p, true, gc), c.w, c.b, 1e-5f);
        ASSERT_TRUE(bitwise_equal(yf, yc, "y")) << "p " << p << " threads " << threads;
        EXPECT_EQ(gf.offset, gc.offset);
        yf.backward(gy);
        yc.backward(gy);
        expect_same(f, c, true);
      }
    }
  }
}

TEST(DropoutFusion, AddDropoutEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Shape shape : {Shape{3, 5, 7}, Shape{300, 515}}) {
      Leaves f = make_leaves(shape, shape.back(), 50), c = make_leaves(shape, shape.back(), 50);
      Tensor gy = random_tensor(shape, 54);
      Generator gf{9, 5}, gc{9, 5};
      Tensor yf = add_dropout(f.x, f.r, 0.2f, true, gf);
      Tensor yc = add(c.x, dropout(c.r, 0.2f, true, gc));
      ASSERT_TRUE(bitwise_equal(yf, yc, "y")) << "threads " << threads;
      EXPECT_EQ(gf.offset, gc.offset);
      yf.backward(gy);
      yc.backward(gy);
      expect_same(f, c, false);
    }
  }
}

// Outside training, p = 0 and p = 1 take the composition's path: no draw where dropout makes none,
// and p = 1 drops the whole branch.
TEST(DropoutFusion, EdgeCasesFollowDropout) {
  Leaves l = make_leaves({4, 16}, 16, 60);
  Generator g{3, 0};
  Tensor y_eval = add_dropout_layer_norm(l.x, l.r, 0.5f, false, g, l.w, l.b, 1e-5f);
  EXPECT_TRUE(bitwise_equal(y_eval, add_layer_norm(l.x, l.r, l.w, l.b, 1e-5f), "eval"));
  EXPECT_EQ(g.offset, 0u);
  Tensor y_all = add_dropout(l.x, l.r, 1.0f, true, g);
  EXPECT_TRUE(bitwise_equal(y_all, add(l.x, Tensor::zeros({4, 16})), "p = 1"));
  Tensor y_none = add_dropout(l.x, l.r, 0.0f, true, g);
  EXPECT_TRUE(bitwise_equal(y_none, add(l.x, l.r), "p = 0"));
}

// The kernel's AVX-512 body against its scalar twin, at sizes around the vector width.
TEST(DropoutFusion, AddDropoutKernelMatchesScalarTwin) {
  for (int64_t n : {1, 15, 16, 17, 100, 40000}) {
    Tensor a = random_tensor({n}, 70), x = random_tensor({n}, 71);
    std::vector<float> fast(static_cast<size_t>(n)), slow(static_cast<size_t>(n));
    kernels::add_dropout_forward(a.data(), x.data(), fast.data(), n, 0.3f, 11, 1000);
    kernels::add_dropout_forward_scalar(a.data(), x.data(), slow.data(), n, 0.3f, 11, 1000);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fast[i], slow[i]) << "n " << n << " i " << i;
    int dropped = 0;
    for (int64_t i = 0; i < n; ++i) dropped += fast[i] == a.data()[i];
    if (n == 40000) {
      EXPECT_NEAR(dropped / double(n), 0.3, 0.02);  // about p of the branch dropped
    }
  }
}

}  // namespace
}  // namespace tfm::ops
