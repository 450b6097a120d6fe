// tests/ops/linear_activation_test.cc — the fused FFN input op (ops/linear_activation.h) against
// the composition it replaces, activation(linear(x, W, b)).
//
// Forward: the fused op computes x·Wᵀ with beta = 0 and adds b afterwards, the composition starts the
// GEMM from b; both are float evaluations of the same K+1-term sum, so each element differs from
// the double value by at most γ_{K+1}·(Σ_k |x_ik||w_jk| + |b_j|) and the two by twice that
// (relu is 1-Lipschitz). Backward (ReLU): dz = dy ⊙ [y > 0] in the fused op and dy ⊙ [z > 0] in the
// composition; where the two pre-activations have the same sign (checked) dz is bitwise the same
// and both then run the same GEMMs and bias sum, so dx, dW, db must be bitwise equal.
// ops::linear_relu_dropout, the FFN's dropout(relu(linear1(x))) in training, applies the same
// per-element float operations in the same order as dropout(activation(linear(x, W, b), RELU)) (the
// mask is the same pure function of seed and counter): output, gradients and the generator's
// position bitwise equal. ops::feed_forward, the whole feed-forward, is its composition bitwise, in
// float32 and in bfloat16 training, where one node keeps the hidden activation as bfloat16.
// To add a case: another activation or shape in the loops below.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/linear_activation.h"
#include "test_util.h"
#include "tfm/autocast.h"
#include "tfm/autograd.h"
#include "tfm/ops/dropout.h"
#include "tfm/ops/linear.h"
#include "tfm/random.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::random_tensor;

double gamma_f(int64_t n) {
  const double u = FLT_EPSILON / 2.0;
  return double(n) * u / (1.0 - double(n) * u);
}

// |fused − composed| ≤ 2·γ_{K+1}·(Σ|x||w| + |b|) per element, for y (N, F) of x (N, K), w (F, K).
void expect_forward_close(const Tensor& fused, const Tensor& composed, const Tensor& x, const Tensor& w,
                          const Tensor& b) {
  const int64_t K = w.size(1), F = fused.size(-1), N = fused.numel() / F;
  std::vector<double> tol;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      double s = b.defined() ? std::fabs(b.data()[j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(x.data()[i * K + k]) * std::fabs(w.data()[j * K + k]);
      tol.push_back(2.0 * gamma_f(K + 1) * s + FLT_MIN);
    }
  EXPECT_TRUE(tfm::testing::close_abs(fused, composed, tol, "fused vs composed"));
}

// The feed-forward's composition, as feed_forward documents it (no second bias).
Tensor composed(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, Activation act, Generator& g) {
  if (act == Activation::RELU) return linear(linear_relu_dropout(x, w1, b1, 0.1f, true, g), w2, Tensor());
  return linear(dropout(linear_activation(x, w1, b1, act), 0.1f, true, g), w2, Tensor());
}

TEST(LinearActivation, InferenceMatchesComposition) {
  for (Activation act : {Activation::RELU, Activation::GELU, Activation::SWIGLU}) {
    for (bool with_bias : {true, false}) {
      const int64_t K = 37, Fin = 2 * 45;  // not multiples of 16; even for the gated halves
      Tensor x = random_tensor({3, 7, K}, 1), w = random_tensor({Fin, K}, 2);
      Tensor b = with_bias ? random_tensor({Fin}, 3) : Tensor();
      NoGradGuard no_grad;
      Tensor fused = linear_activation(x, w, b, act);
      Tensor composed = activation(linear(x, w, b), act);
      if (act == Activation::RELU) {
        expect_forward_close(fused, composed, x, w, b);
      } else {
        // Smooth and gated activations: no per-element proof here (the gated product mixes both
        // halves). The pre-activations differ by at most 2γ_38·Σ|x||w| ≲ 4e-5 absolute and
        // |gelu'| ≤ 1.13, so 1e-4 of max|y| is a loose check that the fused path computes the same
        // function; its exactness is covered by the parity suite against PyTorch.
        ASSERT_EQ(fused.shape(), composed.shape());
        EXPECT_TRUE(tfm::testing::close_rel(fused, composed, 1e-4, std::string(enum_name(act))));
      }
    }
  }
}

TEST(LinearActivation, ReluTrainingGradientsBitwiseEqualComposition) {
  const int64_t K = 29, F = 53;
  Tensor x0 = random_tensor({4, 9, K}, 11), w0 = random_tensor({F, K}, 12), b0 = random_tensor({F}, 13);
  Tensor dy = random_tensor({4, 9, F}, 14);
  auto run = [&](bool fused, Tensor& y, Tensor& dx, Tensor& dw, Tensor& db) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    x.requires_grad_();
    w.requires_grad_();
    b.requires_grad_();
    y = fused ? linear_activation(x, w, b, Activation::RELU) : activation(linear(x, w, b), Activation::RELU);
    y.backward(dy);
    dx = x.grad();
    dw = w.grad();
    db = b.grad();
  };
  Tensor yf, dxf, dwf, dbf, yc, dxc, dwc, dbc;
  run(true, yf, dxf, dwf, dbf);
  run(false, yc, dxc, dwc, dbc);
  expect_forward_close(yf.detach(), yc.detach(), x0, w0, b0);
  for (int64_t i = 0; i < yf.numel(); ++i)
    ASSERT_EQ(yf.data()[i] > 0.0f, yc.data()[i] > 0.0f) << "relu mask differs at " << i;
  EXPECT_TRUE(bitwise_equal(dxf, dxc, "dx"));
  EXPECT_TRUE(bitwise_equal(dwf, dwc, "dW"));
  EXPECT_TRUE(bitwise_equal(dbf, dbc, "db"));
}

// Training with a non-ReLU activation: the composition bit for bit, output and every gradient — GELU and
// GELU_TANH in one node keeping act'(z) (LinearActivationNode), the gated kinds as the composition itself; with
// and without a bias, in float32 and under Autocast(BFLOAT16).
TEST(LinearActivation, TrainingIsTheCompositionBitwise) {
  const int64_t K = 37, Fin = 2 * 45;
  Tensor x0 = random_tensor({3, 7, K}, 21), w0 = random_tensor({Fin, K}, 22), b0 = random_tensor({Fin}, 23);
  for (Activation act : {Activation::GELU, Activation::GELU_TANH, Activation::GEGLU})
    for (bool with_bias : {true, false})
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE(std::string(enum_name(act)) + (with_bias ? " bias" : "") + (bf16 ? " bf16" : ""));
        const int64_t F = activation_is_gated(act) ? Fin / 2 : Fin;
        Tensor dy = random_tensor({3, 7, F}, 24);
        auto run = [&](bool fused) {
          Tensor x = x0.clone(), w = w0.clone(), b = with_bias ? b0.clone() : Tensor();
          x.requires_grad_();
          w.requires_grad_();
          if (with_bias) b.requires_grad_();
          Tensor y;
          {
            Autocast cast(bf16 ? Precision::BFLOAT16 : Precision::FLOAT32);
            y = fused ? linear_activation(x, w, b, act) : activation(linear(x, w, b), act);
          }
          y.backward(dy);
          return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), with_bias ? b.grad() : Tensor()};
        };
        const std::vector<Tensor> f = run(true), c = run(false);
        EXPECT_TRUE(bitwise_equal(f[0], c[0], "y"));
        EXPECT_TRUE(bitwise_equal(f[1], c[1], "dx"));
        EXPECT_TRUE(bitwise_equal(f[2], c[2], "dW"));
        if (with_bias) {
          EXPECT_TRUE(bitwise_equal(f[3], c[3], "db"));
        }
      }
}

TEST(LinearActivation, ErrorsNameTheTensor) {
  Tensor x = random_tensor({2, 8}, 1);
  EXPECT_THROW(linear_activation(x, random_tensor({6, 7}, 2), Tensor(), Activation::RELU), std::invalid_argument);
  EXPECT_THROW(linear_activation(x, random_tensor({6, 8}, 2), random_tensor({5}, 3), Activation::RELU),
               std::invalid_argument);
  EXPECT_THROW(linear_activation(x, random_tensor({7, 8}, 2), Tensor(), Activation::GLU), std::invalid_argument);
}

// The FFN's inner dropout joined to the bias + ReLU pass: output and generator draw bitwise the
// composition dropout(relu(linear(x))); every gradient too (the composition's relu backward
// multiplies by [z > 0] where the fused one selects, which differs only in the sign of zeros: the
// random data here has no zero products, and the GEMMs then see the same values).
TEST(LinearActivation, LinearReluDropoutEqualsComposition) {
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
TEST(LinearActivation, LinearReluDropoutEdgeCasesFollowDropout) {
  Tensor x = random_tensor({4, 8}, 90), w = random_tensor({6, 8}, 91), b = random_tensor({6}, 92);
  const Tensor relu_lin = activation(linear(x, w, b), Activation::RELU);
  Generator g{3, 0};
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 0.5f, false, g), relu_lin, "eval"));
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 0.0f, true, g), relu_lin, "p = 0"));
  EXPECT_EQ(g.offset, 0u);
  EXPECT_TRUE(bitwise_equal(linear_relu_dropout(x, w, b, 1.0f, true, g), Tensor::zeros({4, 6}), "p = 1"));
}

// The whole feed-forward, linear2(dropout(act(linear1(x)))): under Autocast(BFLOAT16) with a tape, one node keeps
// the hidden activation as bfloat16 (and, for activations other than ReLU, the float32 pre-activation), and must
// give the composition's output, generator draw and every gradient bitwise (its second product reads y rounded
// whole where ops::linear rounds it panel by panel: the same values in the same panels). ReLU, GELU and a gated
// kind; dropout 0.1 and 0; training and eval; 1 and 2 threads; with and without biases; N·F odd. In float32, and
// for ReLU without dropout, it is the composition itself (a "linear" node on top).
TEST(LinearActivation, FeedForwardEqualsComposition) {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    struct Dims {
      int64_t N, in, F, out;
    };
    for (const Dims& dims : {Dims{3, 5, 7, 4}, Dims{130, 64, 515, 64}, Dims{256, 128, 512, 128}}) {
      const int64_t N = dims.N, in = dims.in, F = dims.F, out = dims.out;
      for (Activation act : {Activation::RELU, Activation::GELU, Activation::GEGLU}) {
        const int64_t Fin = activation_is_gated(act) ? 2 * F : F;
        for (bool with_bias : {true, false}) {
          for (Precision precision : {Precision::BFLOAT16, Precision::FLOAT32}) {
            for (float p : {0.1f, 0.0f}) {
              for (bool training : {true, false}) {
                auto leaves = [&] {
                  std::vector<Tensor> l{random_tensor({N, in}, 180).requires_grad_(true),
                                        random_tensor({Fin, in}, 181).requires_grad_(true),
                                        with_bias ? random_tensor({Fin}, 182).requires_grad_(true) : Tensor(),
                                        random_tensor({out, F}, 183).requires_grad_(true),
                                        with_bias ? random_tensor({out}, 184).requires_grad_(true) : Tensor()};
                  return l;
                };
                std::vector<Tensor> f = leaves(), c = leaves();
                Tensor gy = random_tensor({N, out}, 185);
                Generator gf{13, 77}, gc{13, 77};
                SCOPED_TRACE("N " + std::to_string(N) + " F " + std::to_string(F) + " " +
                             std::string(enum_name(act)) + " p " + std::to_string(p) + " threads " +
                             std::to_string(threads) + (with_bias ? " bias " : " no bias ") +
                             std::string(enum_name(precision)) + (training ? " training" : " eval"));
                {
                  Autocast scope(precision);
                  Tensor yf = feed_forward(f[0], f[1], f[2], f[3], f[4], act, p, training, gf);
                  Tensor yc = act == Activation::RELU
                                  ? linear(linear_relu_dropout(c[0], c[1], c[2], p, training, gc), c[3], c[4])
                                  : linear(dropout(linear_activation(c[0], c[1], c[2], act), p, training, gc), c[3],
                                           c[4]);
                  ASSERT_TRUE(bitwise_equal(yf, yc, "output"));
                  EXPECT_EQ(gf.offset, gc.offset);
                  const bool fused = precision == Precision::BFLOAT16;  // p < 1 here
                  const char* node = !fused                   ? "linear"
                                     : act == Activation::RELU ? "feed_forward_relu_bf16"
                                                               : "feed_forward_activation_bf16";
                  EXPECT_EQ(std::string(yf.grad_fn()->name()), node);
                  yf.backward(gy);
                  yc.backward(gy);
                }
                const char* names[] = {"dx", "dW1", "db1", "dW2", "db2"};
                for (size_t i = 0; i < f.size(); ++i)
                  if (f[i].defined()) {
                    EXPECT_TRUE(bitwise_equal(f[i].grad(), c[i].grad(), names[i]));
                  }
              }
            }
          }
        }
      }
    }
  }
}

// Only the second Linear's weight needs a gradient: the node computes dW2 and db2 and nothing before them, as
// the composition does.
TEST(LinearActivation, FeedForwardOnlySecondLinearTrains) {
  for (Activation act : {Activation::RELU, Activation::GELU}) {
    Tensor x = random_tensor({9, 8}, 196), w1 = random_tensor({6, 8}, 197), b1 = random_tensor({6}, 198);
    Tensor wf = random_tensor({3, 6}, 199).requires_grad_(true), wc = wf.detach().clone().requires_grad_(true);
    Generator gf{5, 0}, gc{5, 0};
    Autocast scope(Precision::BFLOAT16);
    Tensor yf = feed_forward(x, w1, b1, wf, Tensor(), act, 0.1f, true, gf);
    Tensor yc = composed(x, w1, b1, wc, act, gc);
    ASSERT_TRUE(bitwise_equal(yf, yc, "output"));
    Tensor g = random_tensor({9, 3}, 200);
    yf.backward(g);
    yc.backward(g);
    EXPECT_TRUE(bitwise_equal(wf.grad(), wc.grad(), "dW2"));
  }
}

// A misshapen second weight is ops::linear's error, as in the composition.
TEST(LinearActivation, FeedForwardErrorsNameTheTensor) {
  Tensor x = random_tensor({4, 8}, 193).requires_grad_(true), w1 = random_tensor({6, 8}, 194);
  Generator g{3, 0};
  Autocast scope(Precision::BFLOAT16);
  for (Activation act : {Activation::RELU, Activation::GELU}) {
    try {
      feed_forward(x, w1, Tensor(), random_tensor({3, 5}, 195), Tensor(), act, 0.1f, true, g);
      FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("linear: input"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tfm::ops
