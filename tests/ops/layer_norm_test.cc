// tests/ops/layer_norm_test.cc — the LayerNorm ops of src/ops/layer_norm.cc beyond what the parity
// suite checks against PyTorch: ops::add_dropout_layer_norm (post-norm: LayerNorm(x + dropout(r))).
// Its kernels apply the same per-element float operations in the same order as the composition it
// replaces (the mask is the same pure function of seed and counter), so the output, every gradient
// and the generator's position afterwards must be bitwise equal to
// ops::add_layer_norm(x, ops::dropout(r)). Likewise ops::add_dropout_and_layer_norm (pre-norm: the
// sum z and LayerNorm(z) from one pass) against z = ops::add_dropout(x, r), y = ops::layer_norm(z),
// with a gradient flowing into z from elsewhere too (the residual stream's other use). LayerNorm's
// kernels are tested in tests/kernels/layer_norm_test.cc.
// To add a case: another shape or p in the loops below.
#include "tfm/ops/layer_norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
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

void expect_same_grads(const Leaves& a, const Leaves& b) {
  EXPECT_TRUE(bitwise_equal(a.x.grad(), b.x.grad(), "dx"));
  EXPECT_TRUE(bitwise_equal(a.r.grad(), b.r.grad(), "dr"));
  EXPECT_TRUE(bitwise_equal(a.w.grad(), b.w.grad(), "dw"));
  EXPECT_TRUE(bitwise_equal(a.b.grad(), b.b.grad(), "db"));
}

TEST(LayerNorm, AddDropoutLayerNormEqualsComposition) {
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
        expect_same_grads(f, c);
      }
    }
  }
}

// Outside training the composition's path: no draw, and LayerNorm(x + r).
TEST(LayerNorm, AddDropoutLayerNormEvalIsAddLayerNorm) {
  Leaves l = make_leaves({4, 16}, 16, 60);
  Generator g{3, 0};
  Tensor y_eval = add_dropout_layer_norm(l.x, l.r, 0.5f, false, g, l.w, l.b, 1e-5f);
  EXPECT_TRUE(bitwise_equal(y_eval, add_layer_norm(l.x, l.r, l.w, l.b, 1e-5f), "eval"));
  EXPECT_EQ(g.offset, 0u);
}

// Pre-norm: {z, y} from one pass against the composition, in training with and without an active
// dropout and in eval; the loss uses both outputs (y and z feed the rest of a layer), so z's gradient
// has two parts, as a residual stream's does.
TEST(LayerNorm, AddDropoutAndLayerNormEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Shape shape : {Shape{3, 5, 7}, Shape{130, 515}, Shape{2, 64, 128}})
      for (float p : {0.0f, 0.1f})
        for (bool training : {true, false}) {
          const int64_t D = shape.back();
          Leaves f = make_leaves(shape, D, 70), c = make_leaves(shape, D, 70);
          Tensor gy = random_tensor(shape, 74);
          Generator gf{9, 55}, gc{9, 55};
          const auto [zf, yf] = add_dropout_and_layer_norm(f.x, f.r, p, training, gf, f.w, f.b, 1e-5f);
          Tensor zc = add_dropout(c.x, c.r, p, training, gc);
          Tensor yc = layer_norm(zc, c.w, c.b, 1e-5f);
          SCOPED_TRACE("p " + std::to_string(p) + (training ? " training" : " eval") + ", threads " +
                       std::to_string(threads));
          ASSERT_TRUE(bitwise_equal(zf, zc, "z"));
          ASSERT_TRUE(bitwise_equal(yf, yc, "y"));
          EXPECT_EQ(gf.offset, gc.offset);
          // d(y + 0.75·z) = gy: z's gradient is 0.75·gy plus what flows back through the LayerNorm.
          add(yf, mul_scalar(zf, 0.75f)).backward(gy);
          add(yc, mul_scalar(zc, 0.75f)).backward(gy);
          expect_same_grads(f, c);
        }
  }
}

}  // namespace
}  // namespace tfm::ops
