// tests/ops/dropout_fusion_test.cc — the dropouts fused into their neighbour:
// ops::add_dropout_layer_norm (post-norm: LayerNorm(x + dropout(r))), ops::add_dropout (pre-norm:
// x + dropout(r)) and ops::linear_relu_dropout (the FFN's dropout(relu(linear1(x)))). The fused kernels apply the same per-element float operations in the same order
// as the composition they replace (the mask is the same pure function of seed and counter), so the
// output, every gradient and the generator's position afterwards must be bitwise equal to
// ops::add_layer_norm(x, ops::dropout(r)) and ops::add(x, ops::dropout(r)).
// To add a case: another shape or p in the loops below.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "ops/linear_activation.h"
#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/elementwise.h"
#include "tfm/ops/layer_norm.h"
#include "tfm/ops/linear.h"
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
    ASSERT_TRUE(tfm::testing::close_abs(fast, slow, 0.0, "n " + std::to_string(n)));  // equal values
    int dropped = 0;
    for (int64_t i = 0; i < n; ++i) dropped += fast[i] == a.data()[i];
    if (n == 40000) {
      EXPECT_NEAR(dropped / double(n), 0.3, 0.02);  // about p of the branch dropped
    }
  }
}

// The FFN's inner dropout joined to the bias + ReLU pass: output and generator draw bitwise the
// composition dropout(relu(linear(x))); every gradient too (the composition's relu backward
// multiplies by [z > 0] where the fused one selects, which differs only in the sign of zeros: the
// random data here has no zero products, and the GEMMs then see the same values).
TEST(DropoutFusion, LinearReluDropoutEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    struct Dims {
      int64_t N, in, out;
    };
    for (const Dims& dims : {Dims{3, 5, 7}, Dims{130, 64, 515}, Dims{256, 128, 512}}) {
      const int64_t N = dims.N, in = dims.in, out = dims.out;  // (clang 14: lambdas cannot capture bindings)
      for (bool with_bias : {true, false}) {
        for (float p : {0.1f, 0.5f}) {
          auto leaves = [&] {
            std::vector<Tensor> l{random_tensor({N, in}, 80).requires_grad_(true),
                                  random_tensor({out, in}, 81).requires_grad_(true),
                                  with_bias ? random_tensor({out}, 82).requires_grad_(true) : Tensor()};
            return l;
          };
          std::vector<Tensor> f = leaves(), c = leaves();
          Tensor gy = random_tensor({N, out}, 84);
          Generator gf{13, 77}, gc{13, 77};
          Tensor yf = linear_relu_dropout(f[0], f[1], f[2], p, true, gf);
          Tensor yc = dropout(activation(linear(c[0], c[1], c[2]), Activation::RELU), p, true, gc);
          SCOPED_TRACE("N " + std::to_string(N) + " out " + std::to_string(out) + " p " + std::to_string(p) +
                       " threads " + std::to_string(threads) + (with_bias ? " bias" : " no bias"));
          ASSERT_TRUE(bitwise_equal(yf, yc, "y"));
          EXPECT_EQ(gf.offset, gc.offset);
          yf.backward(gy);
          yc.backward(gy);
          EXPECT_TRUE(bitwise_equal(f[0].grad(), c[0].grad(), "dx"));
          EXPECT_TRUE(bitwise_equal(f[1].grad(), c[1].grad(), "dW"));
          if (with_bias) {
            EXPECT_TRUE(bitwise_equal(f[2].grad(), c[2].grad(), "db"));
          }
        }
      }
    }
  }
}

// Not training, p = 0 and p = 1: the composition itself (no draw where dropout makes none).
TEST(DropoutFusion, LinearReluDropoutEdgeCasesFollowDropout) {
  Tensor x = random_tensor({4, 8}, 90), w = random_tensor({6, 8}, 91), b = random_tensor({6}, 92);
  const Tensor relu_lin = activation(linear(x, w, b), Activation::RELU);
  Generator g{3, 0};
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 0.5f, false, g), relu_lin, "eval"));
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 0.0f, true, g), relu_lin, "p = 0"));
  EXPECT_EQ(g.offset, 0u);
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 1.0f, true, g), Tensor::zeros({4, 6}), "p = 1"));
}

// The kernels' AVX-512 bodies against their scalar twins, at widths around the vector width, with
// row offsets crossing 2³²; the backward selects: NaN or inf in dy where y = 0 gives +0.
TEST(DropoutFusion, ReluDropoutKernelsMatchScalarTwins) {
  for (int64_t F : {1, 15, 16, 17, 100, 515}) {
    for (uint64_t offset : {uint64_t{1000}, (uint64_t{1} << 32) - 700}) {
      const int64_t N = 9, n = N * F;
      Tensor x = random_tensor({n}, 100), bias = random_tensor({F}, 101), dy = random_tensor({n}, 102);
      std::vector<float> fast(n), slow(n), dfast(n), dslow(n);
      const kernels::DropoutSpec d{0.3f, 17, offset};
      kernels::bias_relu_dropout_forward(x.data(), bias.data(), fast.data(), N, F, d);
      kernels::bias_relu_dropout_forward_scalar(x.data(), bias.data(), slow.data(), N, F, d);
      ASSERT_TRUE(bitwise_equal(fast, slow, "forward F " + std::to_string(F)));
      // The composition's forward, bitwise.
      std::vector<float> comp(n);
      kernels::bias_activation_forward(Activation::RELU, x.data(), bias.data(), comp.data(), N, F);
      kernels::dropout_forward(comp.data(), comp.data(), n, d.p, d.seed, d.offset);
      ASSERT_TRUE(bitwise_equal(fast, comp, "composition F " + std::to_string(F)));
      float* g = dy.data();
      g[0] = std::numeric_limits<float>::quiet_NaN();
      if (n > 1) g[n - 1] = std::numeric_limits<float>::infinity();
      kernels::relu_dropout_backward(g, fast.data(), dfast.data(), n, d.p);
      kernels::relu_dropout_backward_scalar(g, fast.data(), dslow.data(), n, d.p);
      ASSERT_TRUE(bitwise_equal(dfast, dslow, "backward F " + std::to_string(F)));
      const float scale = 1.0f / (1.0f - d.p);
      for (int64_t i = 0; i < n; ++i) {
        const float want = fast[i] > 0.0f ? g[i] * scale : 0.0f;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(dfast[i]));
        } else {
          EXPECT_EQ(dfast[i], want) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tfm::ops
