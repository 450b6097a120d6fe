// tests/ops/dropout_test.cc — the dropout ops of src/ops/dropout.cc fused into their neighbour:
// ops::add_dropout (pre-norm's residual, x + dropout(r)). Its kernel applies the same per-element
// float operations in the same order as the composition it replaces (the mask is the same pure
// function of seed and counter), so the output, every gradient and the generator's position
// afterwards must be bitwise equal to ops::add(x, ops::dropout(r)). The plain dropout's backward is
// checked against finite differences in tests/autograd_test.cc; the other fused dropouts with their
// ops (layer_norm_test.cc, linear_activation_test.cc), the kernels' SIMD bodies in tests/kernels/.
// To add a case: another shape or p in the loops below.
#include "tfm/ops/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

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

}  // namespace
}  // namespace tfm::ops
