// tests/kernels/activation_test.cc — the activation kernels (activation.cc, activation_avx512.cc,
// activation_avx2.cc): every SIMD body the CPU has (AVX-512, AVX2): the relu bodies against their scalar twins on sizes
// that are not multiples of the 16-float vector; the dispatcher against the kernel it runs for every kind; the other
// kinds' bodies (gelu, gelu_tanh, glu, geglu, swiglu) against float64 and against the twin on edge values; and the
// fused bias + relu + dropout kernels against their twins and the composition (bias_activation_forward, then
// dropout_forward), and the relu + dropout backward from a bfloat16 y against the float one. The relu comparisons are
// bitwise: the SIMD body performs the same float operations in the same order per element as the twin. The other bodies
// use a vector erf / exp / sigmoid, so their comparisons are bounded in float ulps (measured maxima stated at each
// test). The fused op itself is tested in tests/ops/linear_activation_test.cc; the finite-difference checks of every
// backward are in gradcheck_test.cc. To add a SIMD body: a TEST comparing foo_avx512 with foo_scalar over kSizes,
// bitwise when it performs the twin's operations, else within a measured bound in ulps.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/activation_scalar.h"
#include "kernels/gemm_packed.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using test::kSizes;
using test::rnd;

// The SIMD bodies this CPU runs: AVX-512 (16 lanes) and AVX2 (8 lanes; AVX-512 CPUs have it too), every kind.
struct SimdBody {
  const char* name;
  bool (*forward)(Activation, const float*, const float*, float*, int64_t, int64_t);
  bool (*backward)(Activation, const float*, const float*, float*, int64_t, int64_t);
};
std::vector<SimdBody> simd_bodies() {
  std::vector<SimdBody> b;
  if (cpu_has_avx512()) b.push_back({"avx512", bias_activation_forward_avx512, activation_backward_avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", bias_activation_forward_avx2, activation_backward_avx2});
  return b;
}
#define SKIP_WITHOUT_SIMD_BODY() \
  if (simd_bodies().empty()) GTEST_SKIP() << "no AVX-512 or AVX2 on this CPU (or TFM_FORCE_SCALAR set)"

TEST(ActivationKernel, ReluBiasForwardAndBackwardBitwise) {
  SKIP_WITHOUT_SIMD_BODY();
  const int64_t N = 3;
  for (const SimdBody& body : simd_bodies())
    for (int64_t F : kSizes) {
      SCOPED_TRACE(body.name);
      auto x = rnd(N * F, 20 + F), b = rnd(F, 21 + F), dy = rnd(N * F, 22 + F);
      x[0] = -0.0f;  // relu(−0) = −0 in both (torch.relu's)
      std::vector<float> y1(N * F), y2(N * F);
      ASSERT_TRUE(body.forward(Activation::RELU, x.data(), b.data(), y1.data(), N, F));
      bias_activation_forward_scalar(Activation::RELU, x.data(), b.data(), y2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "bias+relu F=" << F;
      ASSERT_TRUE(body.forward(Activation::RELU, x.data(), nullptr, y1.data(), N, F));
      activation_forward_scalar(Activation::RELU, x.data(), y2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "relu F=" << F;
      std::vector<float> d1(N * F), d2(N * F);
      ASSERT_TRUE(body.backward(Activation::RELU, dy.data(), x.data(), d1.data(), N, F));
      activation_backward_scalar(Activation::RELU, dy.data(), x.data(), d2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(d1, d2)) << "relu backward F=" << F;
    }
}

// ReLU's non-finite values as torch.relu and its threshold_backward give them (torch 1.13, checked by hand:
// relu([NaN, −1, 0, −0, 2, −inf, inf]) = [NaN, 0, 0, −0, 2, 0, inf]; with dy = [5, NaN, inf, −inf, 3, NaN, 7] the
// input's gradient is [5, 0, 0, 0, 3, 0, 7], zeros +0): in every body — the twin, the SIMD bodies this CPU has, the
// dispatcher —, from x and from relu's output y, in the fused relu + dropout kernels at p = 0 and from a bfloat16 y.
TEST(ActivationKernel, ReluKeepsNaNAndItsBackwardSelectsAsTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {nan, -1.0f, 0.0f, -0.0f, 2.0f, -inf, inf};
  const std::vector<float> dy = {5.0f, nan, inf, -inf, 3.0f, nan, 7.0f};
  const std::vector<float> y_want = {nan, 0.0f, 0.0f, -0.0f, 2.0f, 0.0f, inf};
  const std::vector<float> dx_want = {5.0f, 0.0f, 0.0f, 0.0f, 3.0f, 0.0f, 7.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  // NaN compares by class (any NaN), every other value by its bits (the zeros' signs included).
  const auto same = [](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    for (size_t i = 0; i < want.size(); ++i) {
      const bool ok =
          std::isnan(want[i]) ? std::isnan(got[i]) : std::signbit(got[i]) == std::signbit(want[i]) && got[i] == want[i];
      EXPECT_TRUE(ok) << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    }
  };
  std::vector<SimdBody> bodies = simd_bodies();
  bodies.push_back({"twin",
                    [](Activation k, const float* a, const float* b, float* y, int64_t N, int64_t F) {
                      bias_activation_forward_scalar(k, a, b, y, N, F);
                      return true;
                    },
                    [](Activation k, const float* g, const float* a, float* d, int64_t N, int64_t F) {
                      activation_backward_scalar(k, g, a, d, N, F);
                      return true;
                    }});
  bodies.push_back({"dispatch",
                    [](Activation k, const float* a, const float* b, float* y, int64_t N, int64_t F) {
                      bias_activation_forward(k, a, b, y, N, F);
                      return true;
                    },
                    [](Activation k, const float* g, const float* a, float* d, int64_t N, int64_t F) {
                      activation_backward(k, g, a, d, N, F);
                      return true;
                    }});
  for (const SimdBody& body : bodies) {
    SCOPED_TRACE(body.name);
    std::vector<float> y(n), dx(n), dx_from_y(n);
    ASSERT_TRUE(body.forward(Activation::RELU, x.data(), nullptr, y.data(), 1, n));
    same(y, y_want, "relu");
    ASSERT_TRUE(body.backward(Activation::RELU, dy.data(), x.data(), dx.data(), 1, n));
    same(dx, dx_want, "backward from x");
    ASSERT_TRUE(body.backward(Activation::RELU, dy.data(), y.data(), dx_from_y.data(), 1, n));
    same(dx_from_y, dx_want, "backward from y");
  }
  std::vector<float> y(n), d(n), dx(n);
  activation_forward_grad(Activation::RELU, x.data(), y.data(), d.data(), 1, n);
  same(y, y_want, "forward_grad's y");
  same(d, {1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f}, "forward_grad's d");
  const DropoutSpec none{0.0f, 1, 0};
  bias_relu_dropout_forward(x.data(), nullptr, y.data(), 1, n, none);
  same(y, y_want, "relu + dropout at p = 0");
  bias_relu_dropout_forward_scalar(x.data(), nullptr, y.data(), 1, n, none);
  same(y, y_want, "relu + dropout at p = 0, twin");
  relu_dropout_backward(dy.data(), y_want.data(), dx.data(), n, 0.0f);
  same(dx, dx_want, "relu + dropout backward");
  relu_dropout_backward_scalar(dy.data(), y_want.data(), dx.data(), n, 0.0f);
  same(dx, dx_want, "relu + dropout backward, twin");
  std::vector<uint16_t> y16(n);
  for (int64_t i = 0; i < n; ++i) y16[i] = float_to_bf16(y_want[i]);
  relu_dropout_backward_bf16(dy.data(), y16.data(), dx.data(), n, 0.0f);
  same(dx, dx_want, "backward from a bf16 y");
  relu_dropout_backward_bf16_scalar(dy.data(), y16.data(), dx.data(), n, 0.0f);
  same(dx, dx_want, "backward from a bf16 y, twin");
}

TEST(ActivationKernel, BiasActivationDispatchMatchesItsKernelForEveryKind) {
  // The dispatcher runs the AVX-512 body of a kind when there is one (every kind), else the AVX2 body
  // when there is one (every kind), and the twin otherwise; cut into row chunks, it must equal that kernel run on the
  // whole matrix bitwise.
  const int64_t N = 70;  // more than one row chunk
  for (auto k : {Activation::RELU, Activation::GELU, Activation::GELU_TANH,
                 Activation::GLU, Activation::GEGLU, Activation::SWIGLU}) {
    for (int64_t F : {int64_t(17), int64_t(33)}) {
      const int64_t in_row = activation_is_gated(k) ? 2 * F : F;
      auto x = rnd(N * in_row, 30 + F), b = rnd(in_row, 31 + F), dy = rnd(N * F, 32 + F);
      std::vector<float> y1(N * F), y2(N * F);
      bias_activation_forward(k, x.data(), b.data(), y1.data(), N, F);
      const bool avx512 = cpu_has_avx512(), avx2 = !avx512 && cpu_has_avx2();
      if (!(avx512 && bias_activation_forward_avx512(k, x.data(), b.data(), y2.data(), N, F)) &&
          !(avx2 && bias_activation_forward_avx2(k, x.data(), b.data(), y2.data(), N, F)))
        bias_activation_forward_scalar(k, x.data(), b.data(), y2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "kind " << int(k) << " F=" << F;
      // bias_activation with the bias pre-added equals activation_forward on the sum.
      std::vector<float> xb(x);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < in_row; ++f) xb[n * in_row + f] += b[f];
      activation_forward(k, xb.data(), y1.data(), N, F);
      EXPECT_TRUE(bitwise_equal(y1, y2)) << "pre-added bias, kind " << int(k) << " F=" << F;
      std::vector<float> d1(N * in_row), d2(N * in_row);
      activation_backward(k, dy.data(), x.data(), d1.data(), N, F);
      if (!(avx512 && activation_backward_avx512(k, dy.data(), x.data(), d2.data(), N, F)) &&
          !(avx2 && activation_backward_avx2(k, dy.data(), x.data(), d2.data(), N, F)))
        activation_backward_scalar(k, dy.data(), x.data(), d2.data(), N, F);
      EXPECT_TRUE(bitwise_equal(d1, d2)) << "backward, kind " << int(k) << " F=" << F;
    }
  }
}

// kernels.h lets a plain kind's backward write dx over dy (the bf16 feed-forward's dz does): in place, the
// dispatcher and the twin give their out-of-place bits.
TEST(ActivationKernel, PlainBackwardInPlaceIsOutOfPlace) {
  const int64_t N = 70;  // more than one row chunk
  for (auto k : {Activation::RELU, Activation::GELU, Activation::GELU_TANH}) {
    for (int64_t F : {int64_t(17), int64_t(33)}) {
      const auto x = rnd(N * F, 40 + F), dy = rnd(N * F, 41 + F);
      for (auto backward : {activation_backward, activation_backward_scalar}) {
        std::vector<float> out(N * F), in_place(dy);
        backward(k, dy.data(), x.data(), out.data(), N, F);
        backward(k, in_place.data(), x.data(), in_place.data(), N, F);
        EXPECT_TRUE(bitwise_equal(out, in_place)) << "kind " << int(k) << " F=" << F;
      }
    }
  }
}

// activation_forward_grad's y and d, for every plain kind, on each body (the SIMD bodies this CPU has, the twin,
// the dispatcher): y bitwise that body's forward, dy ⊙ d bitwise that body's backward (a NaN's sign aside; RELU: equal
// as numbers, its backward selecting +0); in place (y = x) too.
TEST(ActivationKernel, ForwardGradIsTheForwardAndTheBackward) {
  using ForwardGrad = bool (*)(Activation, const float*, float*, float*, int64_t);
  struct Body {
    const char* name;
    std::function<void(Activation, const float*, float*, float*, int64_t, int64_t)> forward_grad;
    std::function<void(Activation, const float*, float*, int64_t, int64_t)> forward;
    std::function<void(Activation, const float*, const float*, float*, int64_t, int64_t)> backward;
    std::function<void(const float*, const float*, float*, int64_t)> mul;
  };
  using FG = void (*)(Activation, const float*, float*, float*, int64_t, int64_t);
  using Fwd = void (*)(Activation, const float*, float*, int64_t, int64_t);
  using Bwd = void (*)(Activation, const float*, const float*, float*, int64_t, int64_t);
  using Mul = void (*)(const float*, const float*, float*, int64_t);
  std::vector<Body> bodies = {
      {"twin", static_cast<FG>(activation_forward_grad_scalar), static_cast<Fwd>(activation_forward_scalar),
       static_cast<Bwd>(activation_backward_scalar), static_cast<Mul>(mul_forward_scalar)},
      {"dispatch", activation_forward_grad, activation_forward, activation_backward, mul_forward}};
  const auto simd = [](const char* name, ForwardGrad fg, decltype(&bias_activation_forward_avx512) fwd,
                       decltype(&activation_backward_avx512) bwd, decltype(&mul_forward_avx512) mul) {
    return Body{name,
                [fg](Activation k, const float* x, float* y, float* d, int64_t N, int64_t F) {
                  ASSERT_TRUE(fg(k, x, y, d, N * F));
                },
                [fwd](Activation k, const float* x, float* y, int64_t N, int64_t F) {
                  ASSERT_TRUE(fwd(k, x, nullptr, y, N, F));
                },
                [bwd](Activation k, const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
                  ASSERT_TRUE(bwd(k, dy, x, dx, N, F));
                },
                mul};
  };
  if (cpu_has_avx512())
    bodies.push_back(simd("avx512", activation_forward_grad_avx512, bias_activation_forward_avx512,
                          activation_backward_avx512, mul_forward_avx512));
  if (cpu_has_avx2())
    bodies.push_back(simd("avx2", activation_forward_grad_avx2, bias_activation_forward_avx2, activation_backward_avx2,
                          mul_forward_avx2));
  const float inf = std::numeric_limits<float>::infinity();
  // Every NaN as the one quiet NaN: the twin compiled in two places may give a NaN input's derivative either
  // sign (the NaN its last operation propagates); NaN it is in both.
  const auto one_nan = [](std::vector<float> v) {
    for (float& e : v)
      if (std::isnan(e)) e = std::numeric_limits<float>::quiet_NaN();
    return v;
  };
  for (const Body& body : bodies)
    for (auto k : {Activation::RELU, Activation::GELU, Activation::GELU_TANH})
      for (int64_t F : kSizes) {
        SCOPED_TRACE(std::string(body.name) + " kind " + std::to_string(int(k)) + " F=" + std::to_string(F));
        const int64_t N = 70;  // more than one of the dispatcher's row chunks
        auto x = rnd(N * F, 50 + F), dy = rnd(N * F, 51 + F);
        for (int64_t i = 0; i < N * F; ++i) x[i] *= 6.0f;  // both of GELU's ranges
        const float edges[] = {-0.0f, 0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 20.0f, -20.0f};
        for (size_t e = 0; e < std::size(edges) && static_cast<int64_t>(e) < N * F; ++e) x[e * 7 % (N * F)] = edges[e];
        std::vector<float> y(N * F), d(N * F), y_want(N * F), dx(N * F), dx_want(N * F);
        body.forward_grad(k, x.data(), y.data(), d.data(), N, F);
        body.forward(k, x.data(), y_want.data(), N, F);
        EXPECT_TRUE(bitwise_equal(y, y_want, "y"));
        body.mul(dy.data(), d.data(), dx.data(), N * F);
        body.backward(k, dy.data(), x.data(), dx_want.data(), N, F);
        if (k == Activation::RELU) {  // the backward selects +0 where dy·0 may be −0 (kernels.h): equal as numbers
          for (int64_t i = 0; i < N * F; ++i) ASSERT_EQ(dx[i], dx_want[i]) << "dy ⊙ d at " << i;
        } else {
          EXPECT_TRUE(bitwise_equal(one_nan(dx), one_nan(dx_want), "dy ⊙ d"));
        }
        std::vector<float> in_place(x);
        body.forward_grad(k, in_place.data(), in_place.data(), d.data(), N, F);
        EXPECT_TRUE(bitwise_equal(in_place, y_want, "y in place"));
      }
}

// activation_forward_grad_bf16, body for body (the twin, the SIMD bodies this CPU has, the dispatcher): y16 bitwise
// the rounding of the float32 form's y (float_to_bf16), d bitwise its d, on edges (±0, ±inf, NaN) and values whose
// rounding ties or carries; the element past the end keeps its sentinel.
TEST(ActivationKernel, ForwardGradBf16IsTheForwardGradThenTheRounding) {
  using FG = void (*)(Activation, const float*, float*, float*, int64_t, int64_t);
  using FG16 = void (*)(Activation, const float*, uint16_t*, float*, int64_t, int64_t);
  struct Body {
    const char* name;
    std::function<void(Activation, const float*, float*, float*, int64_t, int64_t)> f32;
    std::function<void(Activation, const float*, uint16_t*, float*, int64_t, int64_t)> bf16;
  };
  std::vector<Body> bodies = {
      {"twin", static_cast<FG>(activation_forward_grad_scalar), static_cast<FG16>(activation_forward_grad_bf16_scalar)},
      {"dispatch", activation_forward_grad, activation_forward_grad_bf16}};
  const auto simd = [](const char* name, auto fg, auto fg16) {
    return Body{name,
                [fg](Activation k, const float* x, float* y, float* d, int64_t N, int64_t F) {
                  ASSERT_TRUE(fg(k, x, y, d, N * F));
                },
                [fg16](Activation k, const float* x, uint16_t* y16, float* d, int64_t N, int64_t F) {
                  ASSERT_TRUE(fg16(k, x, y16, d, N * F));
                }};
  };
  if (cpu_has_avx512())
    bodies.push_back(simd("avx512", activation_forward_grad_avx512, activation_forward_grad_bf16_avx512));
  if (cpu_has_avx2()) bodies.push_back(simd("avx2", activation_forward_grad_avx2, activation_forward_grad_bf16_avx2));
  const float inf = std::numeric_limits<float>::infinity();
  for (const Body& body : bodies)
    for (auto k : {Activation::RELU, Activation::GELU, Activation::GELU_TANH})
      for (int64_t F : kSizes) {
        SCOPED_TRACE(std::string(body.name) + " kind " + std::to_string(int(k)) + " F=" + std::to_string(F));
        const int64_t N = 70, n = N * F;  // more than one of the dispatcher's row chunks
        auto x = rnd(n, 60 + F);
        for (float& v : x) v *= 6.0f;
        const float edges[] = {-0.0f,
                               0.0f,
                               inf,
                               -inf,
                               std::numeric_limits<float>::quiet_NaN(),
                               1.0f + 0x1.0p-8f,
                               1.0f + 0x1.8p-8f,
                               0x1.ffffp127f,
                               20.0f,
                               -20.0f};
        for (size_t e = 0; e < std::size(edges) && static_cast<int64_t>(e) < n; ++e) x[e * 7 % n] = edges[e];
        std::vector<float> y(n), d(n), d16(n);
        std::vector<uint16_t> y16(static_cast<size_t>(n) + 1, 0xABCD), want(n);
        body.f32(k, x.data(), y.data(), d.data(), N, F);
        body.bf16(k, x.data(), y16.data(), d16.data(), N, F);
        convert_rows_to_bf16_scalar(y.data(), n, 1, n, want.data());
        // A NaN's sign may differ between two compiled copies of the twin (see the test above): NaN it is in both.
        const auto is_nan16 = [](uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; };
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(y[i])) {
            ASSERT_TRUE(is_nan16(y16[i])) << "y16[" << i << "] of a NaN";
          } else {
            ASSERT_EQ(y16[i], want[i]) << "y16[" << i << "] of x " << x[i];
          }
          if (std::isnan(d[i]) && std::isnan(d16[i])) d16[i] = d[i];
        }
        EXPECT_EQ(y16[n], 0xABCD) << "wrote past the end";
        EXPECT_TRUE(bitwise_equal(d16, d, "d"));
      }
}

// ---- gelu -----------------------------------------------------------------------------------------
// The float64 reference without cancellation: gelu(x) = 0.5·x·erfc(−x/√2),
// gelu'(x) = 0.5·erfc(−x/√2) + x·exp(−x²/2)/√(2π).
double gelu_ref(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }
double gelu_grad_ref(double x) {
  return 0.5 * std::erfc(-x * 0.70710678118654752440) +
         x * std::exp(-0.5 * x * x) * 0.39894228040143267794;
}

// x over [−14, 14] densely (where gelu is a normal float), then the edge values.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (float t = -14.0f; t < 14.0f; t += 0.000377f) x.push_back(t);
  for (float t = -1e-3f; t < 1e-3f; t += 3.1e-7f) x.push_back(t);
  return x;
}

// Against float64, over [−13, 13] (the forward where the reference is a normal float): forward
// within 8·eps relative (measured 5.3, at x ≈ −1.40 where 1 + erf(z) cancels for z → −1: the
// rounding of z = x/√2 and of z·P(z²) is amplified by |erf(z)|/(1 + erf(z)) ≈ 5); backward within
// 3·eps of its scale 0.5·(1 + erf) + |x·φ(x)| (measured 1.72). For 13 < |x| ≤ 14 exp(−x²/2) is
// denormal and both are checked within 1e-36 absolute. The twin's own 1 + erf cancels in the
// negative tail (x < −5 gives 0 or large relative errors), so it is not held to this bound.
TEST(ActivationKernel, GeluWithinFewUlpOfFloat64) {
  SKIP_WITHOUT_SIMD_BODY();
  for (const SimdBody& body : simd_bodies()) {
    SCOPED_TRACE(body.name);
    const auto x = gelu_inputs();
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> y(n), dy(n, 1.0f), d(n);
    ASSERT_TRUE(body.forward(Activation::GELU, x.data(), nullptr, y.data(), 1, n));
    ASSERT_TRUE(body.backward(Activation::GELU, dy.data(), x.data(), d.data(), 1, n));
    const double eps = std::numeric_limits<float>::epsilon();
    double worst_f = 0, worst_b = 0;
    int64_t at_f = 0, at_b = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x[i], r = gelu_ref(xi), rg = gelu_grad_ref(xi);
      if (std::fabs(xi) > 13.0) {  // exp(−x²/2) < 2e-37 is denormal: relative precision ends
        EXPECT_LE(std::fabs(y[i] - r), 1e-36) << "x = " << x[i];
        EXPECT_LE(std::fabs(d[i] - rg), 1e-36) << "x = " << x[i];
        continue;
      }
      if (std::fabs(r) >= std::numeric_limits<float>::min()) {
        const double e = std::fabs(y[i] - r) / (std::fabs(r) * eps);
        if (e > worst_f) worst_f = e, at_f = i;
      } else {  // reference below float's normal range: y is 0 or tiny of its sign
        EXPECT_LE(std::fabs(y[i] - r), 2.0 * std::numeric_limits<float>::min()) << "x = " << x[i];
      }
      const double scale = 0.5 * std::erfc(-xi * 0.70710678118654752440) +
                           std::fabs(xi * std::exp(-0.5 * xi * xi) * 0.39894228040143267794);
      const double e = std::fabs(d[i] - rg) / (scale * eps);
      if (e > worst_b) worst_b = e, at_b = i;
    }
    EXPECT_LE(worst_f, 8.0) << "forward at x = " << x[at_f] << ": " << y[at_f];
    EXPECT_LE(worst_b, 3.0) << "backward at x = " << x[at_b] << ": " << d[at_b];
  }
}

// Against the scalar twin (std::erf), with and without bias, over kSizes and on the edge values.
// The twin's 1 + erf(z) carries an absolute error of about eps, which 0.5·x scales: the forward
// bound is 2·eps·(|y| + 0.5·|x|) (measured 0.84), the backward 2·eps·|dy| (measured 1.00, gelu' ≤ 1.13).
// Where the twin is not finite (x = ±inf, NaN: gelu(−inf) = −inf·0, gelu'(±inf) = ±inf·0 are NaN
// as in the twin's formulas), the SIMD body gives the same value.
::testing::AssertionResult gelu_close_to_twin(const std::vector<float>& x, const std::vector<float>& dy,
                                              const std::vector<float>& y, const std::vector<float>& yt,
                                              const std::vector<float>& d, const std::vector<float>& dt) {
  const double eps = std::numeric_limits<float>::epsilon();
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(yt[i]) || !std::isfinite(dt[i])) {
      const bool same_f = std::isnan(yt[i]) ? std::isnan(y[i]) : y[i] == yt[i];
      const bool same_b = std::isnan(dt[i]) ? std::isnan(d[i]) : d[i] == dt[i];
      if (!same_f || !same_b)
        return ::testing::AssertionFailure() << "x = " << x[i] << ": " << y[i] << " vs " << yt[i]
                                             << ", " << d[i] << " vs " << dt[i];
      continue;
    }
    const double bf = 2.0 * eps * (std::fabs(yt[i]) + 0.5 * std::fabs(x[i]));
    const double bb = 2.0 * eps * std::fabs(dy[i]);
    if (!(std::fabs(double(y[i]) - yt[i]) <= bf) || !(std::fabs(double(d[i]) - dt[i]) <= bb))
      return ::testing::AssertionFailure() << "element " << i << " x = " << x[i] << ": forward " << y[i]
                                           << " vs " << yt[i] << ", backward " << d[i] << " vs "
                                           << dt[i];
  }
  return ::testing::AssertionSuccess();
}

TEST(ActivationKernel, GeluBiasForwardAndBackwardCloseToTwin) {
  SKIP_WITHOUT_SIMD_BODY();
  for (const SimdBody& body : simd_bodies()) {
    SCOPED_TRACE(body.name);
    const int64_t N = 3;
    for (int64_t F : kSizes) {
      auto x = rnd(N * F, 40 + F), b = rnd(F, 41 + F), dy = rnd(N * F, 42 + F);
      for (auto& v : x) v *= 3.0f;  // x + b over [−8, 8]: both branches of the erf and the tails
      std::vector<float> xb(N * F), y(N * F), yt(N * F), d(N * F), dt(N * F);
      for (int64_t i = 0; i < N * F; ++i) xb[i] = x[i] + b[i % F];
      ASSERT_TRUE(body.forward(Activation::GELU, x.data(), b.data(), y.data(), N, F));
      bias_activation_forward_scalar(Activation::GELU, x.data(), b.data(), yt.data(), N, F);
      ASSERT_TRUE(body.backward(Activation::GELU, dy.data(), xb.data(), d.data(), N, F));
      activation_backward_scalar(Activation::GELU, dy.data(), xb.data(), dt.data(), N, F);
      EXPECT_TRUE(gelu_close_to_twin(xb, dy, y, yt, d, dt)) << "F=" << F;
    }
    const float inf = std::numeric_limits<float>::infinity(), tiny = 1e-30f,
                denormal = std::numeric_limits<float>::denorm_min() * 1000.0f;
    std::vector<float> x = {0.0f,      -0.0f,  tiny,   -tiny,      denormal,
                            -denormal, 0.7f,   -0.7f,  1.4142135f, -1.4142135f,
                            5.0f,      -5.0f,  10.5f,  -10.5f,     14.0f,
                            -14.0f,    20.0f,  -20.0f, 1e10f,      -1e10f,
                            3e38f,     -3e38f, inf,    -inf,       std::numeric_limits<float>::quiet_NaN()};
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> dy(n, 1.0f), y(n), yt(n), d(n), dt(n);
    ASSERT_TRUE(body.forward(Activation::GELU, x.data(), nullptr, y.data(), 1, n));
    activation_forward_scalar(Activation::GELU, x.data(), yt.data(), 1, n);
    ASSERT_TRUE(body.backward(Activation::GELU, dy.data(), x.data(), d.data(), 1, n));
    activation_backward_scalar(Activation::GELU, dy.data(), x.data(), dt.data(), 1, n);
    EXPECT_TRUE(gelu_close_to_twin(x, dy, y, yt, d, dt));
    EXPECT_TRUE(std::signbit(y[1]) && y[1] == 0.0f);  // gelu(−0) = −0
    EXPECT_EQ(y[22], inf);
    EXPECT_TRUE(std::isnan(y[23]) && std::isnan(d[22]) && std::isnan(d[23]) && std::isnan(y[24]));
  }
}

// ---- gelu_tanh and the gated kinds --------------------------------------------------------------
// Against float64 references written without cancellation (σ(v) = 1/(1 + exp(−v)), σc = σ(−v),
// gelu and gelu' by erfc as above; the twin's forms 1 + tanh u, 1 − tanh² u, 1 − σ and 1 + erf
// cancel in the tails even in double), each output within C·eps of its scale: the sum of the
// magnitudes of the terms that make it up (an output that cancels, like gelu' near its zero, is
// measured against the terms it cancels). With u₂ = 2u = 2√(2/π)(x + 0.044715x³), u' = du/dx:
//   gelu_tanh  y = x·σ(u₂)          dx = dy·(σ(u₂) + 2x·σ(u₂)σ(−u₂)·u')
//   glu        y = a·σ(b)           da = dy·σ(b)         db = dy·a·σ(b)σ(−b)
//   geglu      y = a·gelu(b)        da = dy·gelu(b)      db = dy·a·gelu'(b)
//   swiglu     y = a·b·σ(b)         da = dy·b·σ(b)       db = dy·a·σ(b)·(1 + b·σ(−b))
// gelu_tanh's scales also carry the condition number 1 + |u₂|·σ(−u₂) of σ at u₂: u₂ is rounded to
// float (relative ~eps), which σ(u₂) amplifies by up to |u₂| ≈ 50 at x = −8, as in any float
// evaluation. Measured maxima over [−8, 8] and kSizes, in eps of the scale (forward, backward):
// gelu_tanh (1.05, 1.37), glu (1.43, 2.78), geglu (5.03, 4.69), swiglu (1.77, 2.01); the bounds are
// 4 and 6 (geglu 8 and 8: gelu's 5.3 at b ≈ −1.4).
double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
struct Ref {
  double y, ys, d0, d0s, d1, d1s;  // values and scales: forward; dx or da; db
};
Ref kind_ref(Activation k, double a, double b, double dy) {
  const double s = sig(b), sc = sig(-b);
  switch (k) {
    case Activation::GELU_TANH: {
      const double c = 0.79788456080286535588, u2 = 2 * c * (b + 0.044715 * b * b * b);
      const double du = c * (1 + 3 * 0.044715 * b * b), t = 2 * b * sig(u2) * sig(-u2) * du;
      const double y = b * sig(u2), cond = 1 + std::fabs(u2) * sig(-u2);
      return {y, std::fabs(y) * cond, dy * (sig(u2) + t), std::fabs(dy) * (sig(u2) + std::fabs(t)) * cond, 0, 0};
    }
    case Activation::GLU:
      return {a * s, std::fabs(a * s), dy * s, std::fabs(dy * s), dy * a * s * sc, std::fabs(dy * a * s * sc)};
    case Activation::GEGLU: {
      const double g = gelu_ref(b);
      const double gs = 0.5 * std::erfc(-b * 0.70710678118654752440) +
                        std::fabs(b * std::exp(-0.5 * b * b) * 0.39894228040143267794);
      return {a * g,          std::fabs(a * g),
              dy * g,         std::fabs(dy * g),
              dy * a * gelu_grad_ref(b), std::fabs(dy * a) * gs};
    }
    default:
      return {a * b * s, std::fabs(a * b * s), dy * b * s, std::fabs(dy * b * s), dy * a * s * (1 + b * sc),
              std::fabs(dy * a) * s * (1 + std::fabs(b) * sc)};
  }
}

TEST(ActivationKernel, GeluTanhAndGatedWithinFewUlpOfFloat64) {
  SKIP_WITHOUT_SIMD_BODY();
  const double eps = std::numeric_limits<float>::epsilon();
  auto ratio = [eps](float got, double want, double scale) {
    return scale > 0 ? std::fabs(got - want) / (eps * scale) : std::fabs(got - want) / eps;
  };
  for (const SimdBody& body : simd_bodies())
    for (auto k : {Activation::GELU_TANH, Activation::GLU, Activation::GEGLU, Activation::SWIGLU}) {
      SCOPED_TRACE(body.name);
      const bool gated = activation_is_gated(k);
      double worst_y = 0, worst_d = 0;
      for (int64_t F : kSizes) {
        const int64_t N = 3, in_row = gated ? 2 * F : F;
        auto x = rnd(N * in_row, 70 + F), dy = rnd(N * F, 71 + F);
        for (auto& v : x) v *= 4.0f;
        std::vector<float> y(N * F), d(N * in_row);
        ASSERT_TRUE(body.forward(k, x.data(), nullptr, y.data(), N, F));
        ASSERT_TRUE(body.backward(k, dy.data(), x.data(), d.data(), N, F));
        for (int64_t n = 0; n < N; ++n)
          for (int64_t f = 0; f < F; ++f) {
            const int64_t o = n * F + f, ia = n * in_row + f, ib = gated ? ia + F : ia;
            const Ref r = kind_ref(k, x[ia], x[ib], dy[o]);
            worst_y = std::max(worst_y, ratio(y[o], r.y, r.ys));
            worst_d = std::max(worst_d, ratio(d[ia], r.d0, r.d0s));
            if (gated) worst_d = std::max(worst_d, ratio(d[ib], r.d1, r.d1s));
          }
      }
      const double bound_y = k == Activation::GEGLU ? 8.0 : 4.0, bound_d = k == Activation::GEGLU ? 8.0 : 6.0;
      EXPECT_LE(worst_y, bound_y) << "forward, kind " << int(k);
      EXPECT_LE(worst_d, bound_d) << "backward, kind " << int(k);
    }
}

// Against the twin on the edge values (the gate input b for the gated kinds, with a = 1.5, dy = 1):
// the same NaN / inf where the twin is not finite (σ(±inf) = 1, 0; −inf·0 = NaN), else within
// 2·eps of the twin's own error scale, since the twin's 1 + tanh, 1 − tanh² and 1 − σ lose to
// cancellation what these bodies keep: forward 2·eps·|a|·(|g| + |b|), backward 2·eps·(1 + |b|)·
// (1 + |b·u'|) for gelu_tanh's u' = √(2/π)(1 + 0.134·b²) (1 for the gated kinds), times |a| for db.
TEST(ActivationKernel, GeluTanhAndGatedEdgeValuesAsTheTwin) {
  SKIP_WITHOUT_SIMD_BODY();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edge = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.7f, -0.7f, 10.5f, -10.5f, 20.0f, -20.0f,
                                   1e10f, -1e10f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  const double eps = std::numeric_limits<float>::epsilon();
  const float a_val = 1.5f;
  for (const SimdBody& body : simd_bodies())
    for (auto k : {Activation::GELU_TANH, Activation::GLU, Activation::GEGLU, Activation::SWIGLU}) {
      SCOPED_TRACE(body.name);
      const bool gated = activation_is_gated(k);
      const int64_t F = static_cast<int64_t>(edge.size()), in_row = gated ? 2 * F : F;
      std::vector<float> x(in_row, a_val), dy(F, 1.0f), y(F), yt(F), d(in_row), dt(in_row);
      std::copy(edge.begin(), edge.end(), x.begin() + (gated ? F : 0));
      ASSERT_TRUE(body.forward(k, x.data(), nullptr, y.data(), 1, F));
      activation_forward_scalar(k, x.data(), yt.data(), 1, F);
      ASSERT_TRUE(body.backward(k, dy.data(), x.data(), d.data(), 1, F));
      activation_backward_scalar(k, dy.data(), x.data(), dt.data(), 1, F);
      // The same NaN / inf where the twin is not finite, else within bound.
      auto check = [k](float got, float want, double bound, const char* what, double b) {
        if (!std::isfinite(want)) {
          EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want)
              << what << ", kind " << int(k) << " b = " << b << ": " << got;
        } else {
          EXPECT_LE(std::fabs(double(got) - want), bound) << what << ", kind " << int(k) << " b = " << b;
        }
      };
      for (int64_t f = 0; f < F; ++f) {
        const double b = edge[f], a = gated ? a_val : 1.0;
        const double du = k == Activation::GELU_TANH ? 0.79788456 * (1 + 0.134145 * b * b) : 1.0;
        const double by = 2 * eps * std::fabs(a) * (std::fabs(yt[f]) / std::fabs(a) + std::fabs(b));
        const double bd = 2 * eps * (1 + std::fabs(b)) * (1 + std::fabs(b * du));
        const int64_t ib = gated ? F + f : f;
        check(y[f], yt[f], by, "forward", b);
        check(d[ib], dt[ib], bd * std::fabs(a), gated ? "db" : "dx", b);
        if (gated) check(d[f], dt[f], by, "da", b);
      }
    }
}

// The kernels' SIMD bodies against their scalar twins, at widths around the vector width, with
// row offsets crossing 2³²; the backward selects: NaN or inf in dy where y = 0 gives +0.
TEST(ActivationKernel, ReluDropoutMatchesScalarTwins) {
  for (int64_t F : {1, 15, 16, 17, 100, 515}) {
    for (uint64_t offset : {uint64_t{1000}, (uint64_t{1} << 32) - 700}) {
      const int64_t N = 9, n = N * F;
      const auto x = testing::random_values(n, 100), bias = testing::random_values(F, 101);
      auto dy = testing::random_values(n, 102);
      std::vector<float> fast(n), slow(n), dfast(n), dslow(n);
      const DropoutSpec d{0.3f, 17, offset};
      bias_relu_dropout_forward(x.data(), bias.data(), fast.data(), N, F, d);
      bias_relu_dropout_forward_scalar(x.data(), bias.data(), slow.data(), N, F, d);
      ASSERT_TRUE(bitwise_equal(fast, slow, "forward F " + std::to_string(F)));
      // The composition's forward, bitwise.
      std::vector<float> comp(n);
      bias_activation_forward(Activation::RELU, x.data(), bias.data(), comp.data(), N, F);
      dropout_forward(comp.data(), comp.data(), n, d.p, d.seed, d.offset);
      ASSERT_TRUE(bitwise_equal(fast, comp, "composition F " + std::to_string(F)));
      float* g = dy.data();
      g[0] = std::numeric_limits<float>::quiet_NaN();
      if (n > 1) g[n - 1] = std::numeric_limits<float>::infinity();
      relu_dropout_backward(g, fast.data(), dfast.data(), n, d.p);
      relu_dropout_backward_scalar(g, fast.data(), dslow.data(), n, d.p);
      ASSERT_TRUE(bitwise_equal(dfast, dslow, "backward F " + std::to_string(F)));
      if (cpu_has_avx2()) {  // the AVX2 bodies, also on AVX-512 CPUs (whose dispatcher runs the AVX-512 ones)
        std::vector<float> f2(n);
        bias_relu_dropout_forward_avx2(x.data(), bias.data(), f2.data(), N, F, d);
        ASSERT_TRUE(bitwise_equal(f2, slow, "AVX2 forward F " + std::to_string(F)));
        std::vector<float> d2(n);
        relu_dropout_backward_avx2(g, fast.data(), d2.data(), n, d.p);
        ASSERT_TRUE(bitwise_equal(d2, dslow, "AVX2 backward F " + std::to_string(F)));
      }
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

// The backward from y rounded to bfloat16: the dispatcher (AVX-512 body on AVX-512 CPUs) against its
// twin, bitwise, and both against relu_dropout_backward of the widened y: the mask is y's sign, which
// the rounding keeps. y has +0, −0, negatives and values that round up across a binade; dy NaN and inf
// where y is 0 give +0.
TEST(ActivationKernel, ReluDropoutBackwardFromBf16IsTheFloatBackward) {
  for (int64_t n : {1, 15, 16, 17, 100, 515, 70000}) {  // 70000: more than one element chunk
    auto y = testing::random_values(n, 110);
    for (int64_t i = 0; i < n; i += 3) y[i] = std::max(y[i], 0.0f);  // relu's zeros
    y[0] = -0.0f;
    if (n > 1) y[1] = 1.99999988f;  // rounds up to 2 in bfloat16
    std::vector<uint16_t> y16(n);
    for (int64_t i = 0; i < n; ++i) y16[i] = float_to_bf16(y[i]);
    auto dy = testing::random_values(n, 111);
    dy[0] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) dy[3] = std::numeric_limits<float>::infinity();
    std::vector<float> fast(n), slow(n), want(n);
    relu_dropout_backward_bf16(dy.data(), y16.data(), fast.data(), n, 0.3f);
    relu_dropout_backward_bf16_scalar(dy.data(), y16.data(), slow.data(), n, 0.3f);
    ASSERT_TRUE(bitwise_equal(fast, slow, "twin n " + std::to_string(n)));
    relu_dropout_backward_scalar(dy.data(), y.data(), want.data(), n, 0.3f);
    ASSERT_TRUE(bitwise_equal(fast, want, "float backward n " + std::to_string(n)));
    std::vector<float> inplace = dy;  // dx may alias dy
    relu_dropout_backward_bf16(inplace.data(), y16.data(), inplace.data(), n, 0.3f);
    ASSERT_TRUE(bitwise_equal(inplace, fast, "in place n " + std::to_string(n)));
  }
}

// relu_dropout_backward_bf16_round (the bf16 feed-forward's dz, rounded, with its bias gradient): the dispatcher at 1
// and 2 threads, the twin and the AVX-512 body on rows at a longer stride, each bitwise relu_dropout_backward_bf16
// then bias_grad_bf16, without dropout and with it; widths over several column chunks and off the vector width.
TEST(ActivationKernel, ReluDropoutBackwardBf16RoundIsTheBackwardThenTheRounding) {
  const int64_t N = 11;
  for (int64_t F : {int64_t(1), int64_t(17), int64_t(256), int64_t(515), int64_t(1100)}) {
    auto y = testing::random_values(N * F, 120 + F);
    for (int64_t i = 0; i < N * F; i += 3) y[i] = std::max(y[i], 0.0f);
    std::vector<uint16_t> y16(N * F);
    for (int64_t i = 0; i < N * F; ++i) y16[i] = float_to_bf16(y[i]);
    auto dy = testing::random_values(N * F, 121 + F);
    dy[0] = std::numeric_limits<float>::infinity();
    const std::vector<float> db0 = testing::random_values(F, 122);
    for (float p : {0.0f, 0.1f}) {
      const std::string at = "F " + std::to_string(F) + " p " + std::to_string(p);
      std::vector<float> dx(N * F), want_db = db0;
      std::vector<uint16_t> want(N * F);
      relu_dropout_backward_bf16(dy.data(), y16.data(), dx.data(), N * F, p);
      bias_grad_bf16(dx.data(), want_db.data(), want.data(), N, F);
      std::vector<float> db = db0;
      std::vector<uint16_t> got(N * F);
      relu_dropout_backward_bf16_round_scalar(dy.data(), y16.data(), p, db.data(), got.data(), N, F);
      EXPECT_TRUE(bitwise_equal(db, want_db, "twin db " + at));
      EXPECT_EQ(got, want) << "twin " << at;
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        db = db0;
        relu_dropout_backward_bf16_round(dy.data(), y16.data(), p, db.data(), got.data(), N, F);
        EXPECT_TRUE(bitwise_equal(db, want_db, "db " + at + " threads " + std::to_string(threads)));
        EXPECT_EQ(got, want) << at << " threads " << threads;
      }
      if (cpu_has_avx512()) {  // rows at stride F + 3: what lies between them is left alone
        const int64_t ld = F + 3;
        std::vector<float> dyw(N * ld, 5.0f);
        std::vector<uint16_t> yw(N * ld, 0x3F80), out(N * ld, 0xABCD);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t f = 0; f < F; ++f) dyw[n * ld + f] = dy[n * F + f], yw[n * ld + f] = y16[n * F + f];
        db = db0;
        relu_dropout_backward_bf16_round_avx512(dyw.data(), yw.data(), ld, p, db.data(), out.data(), N, F);
        EXPECT_TRUE(bitwise_equal(db, want_db, "avx512 db " + at));
        for (int64_t n = 0; n < N; ++n)
          for (int64_t f = 0; f < ld; ++f)
            ASSERT_EQ(out[n * ld + f], f < F ? want[n * F + f] : uint16_t(0xABCD)) << "avx512 " << at;
      }
    }
  }
}

}  // namespace
}  // namespace tfm::kernels
