// tests/kernels/cross_entropy_test.cc — the softmax cross-entropy kernels (cross_entropy.cc,
// cross_entropy_avx512.cc, cross_entropy_avx2.cc): the SIMD bodies against their scalar twins (cross_entropy_scalar.h)
// at vocabulary sizes around the 16-float vector, with label smoothing and ignored rows, and the
// dispatcher against the kernel it runs. The bodies use the vector exp (≤ 2 ulp from std::exp) and
// sum in another order, so the comparison is bounded, not bitwise (measured maxima at each bound).
// The loss op is tested in tests/ops; the finite-difference checks are in gradcheck_test.cc.
// To add a body: a TEST comparing it with its twin over kVocab.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/cross_entropy_scalar.h"
#include "kernels/kernels.h"

namespace tfm::kernels {
namespace {

const int64_t kVocab[] = {1, 7, 16, 17, 65, 100, 515, 5000};
constexpr double kEps = std::numeric_limits<float>::epsilon();

// Logits spread over [−8, 8) (softmax from near one-hot to flat), targets in range, row 1 ignored.
struct Rows {
  int64_t N = 6, V;
  std::vector<float> z;
  std::vector<int32_t> t;
  explicit Rows(int64_t v) : V(v), z(testing::random_values(6 * v, 50 + v, -8.0f, 8.0f)), t(6) {
    for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>((n * 37 + 11) % V);
    t[1] = -100;
  }
};

// The SIMD bodies this CPU runs: AVX-512 and AVX2 (AVX-512 CPUs have both).
struct CeBody {
  const char* name;
  void (*forward)(const float*, const int32_t*, float*, float*, int64_t, int64_t, int32_t, float);
  void (*backward)(const float*, const int32_t*, const float*, const float*, float*, int64_t, int64_t, int32_t, float);
};
std::vector<CeBody> ce_bodies() {
  std::vector<CeBody> b;
  if (cpu_has_avx512()) b.push_back({"avx512", cross_entropy_forward_avx512, cross_entropy_backward_avx512});
  if (cpu_has_avx2()) b.push_back({"avx2", cross_entropy_forward_avx2, cross_entropy_backward_avx2});
  return b;
}
#define SKIP_WITHOUT_SIMD_BODY() \
  if (ce_bodies().empty()) GTEST_SKIP() << "no AVX-512 or AVX2 on this CPU (or TFM_FORCE_SCALAR set)"

// Forward: the twin's lse is m + log s with s summed in double from exact exps; the body's exps are
// within 2 ulp (+2.2e-8 from rounding z − m), so its s is within ~2.5e-7 relative and lse within
// 2.5e-7 absolute before both round to float. Bound on lse and loss: 4·eps·(1 + |lse|) (measured
// 0.75). Backward (the same lse given to both): dz_v = s·(p_v − ε/V) with p_v within 2 ulp: bound
// 3·eps·(|s|·p_v + |dz_v|) with p_v = exp(z_v − lse) in double (measured 1.42).
TEST(CrossEntropyKernel, MatchesScalarTwinWithinFloatRounding) {
  SKIP_WITHOUT_SIMD_BODY();
  for (const CeBody& body : ce_bodies()) {
    SCOPED_TRACE(body.name);
    double worst_f = 0, worst_b = 0;
    for (int64_t V : kVocab) {
      for (float eps_ls : {0.0f, 0.1f}) {
        Rows r(V);
        const int64_t N = r.N;
        std::vector<float> loss(N), lse(N), loss_t(N), lse_t(N);
        body.forward(r.z.data(), r.t.data(), loss.data(), lse.data(), N, V, -100, eps_ls);
        cross_entropy_forward_scalar<float>(r.z.data(), r.t.data(), loss_t.data(), lse_t.data(), N, V, -100, eps_ls);
        for (int64_t n = 0; n < N; ++n) {
          const double unit = kEps * (1.0 + std::fabs(lse_t[n]));
          worst_f = std::max(
              {worst_f, std::fabs(double(lse[n]) - lse_t[n]) / unit, std::fabs(double(loss[n]) - loss_t[n]) / unit});
        }
        EXPECT_EQ(loss[1], 0.0f) << "ignored row, V=" << V;
        std::vector<float> scale(N), dz(N * V), dz_t(N * V);
        for (int64_t n = 0; n < N; ++n) scale[n] = 0.25f + 0.5f * static_cast<float>(n);
        body.backward(r.z.data(), r.t.data(), lse_t.data(), scale.data(), dz.data(), N, V, -100, eps_ls);
        cross_entropy_backward_scalar<float>(r.z.data(), r.t.data(), lse_t.data(), scale.data(), dz_t.data(), N, V,
                                             -100, eps_ls);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t v = 0; v < V; ++v) {
            const int64_t i = n * V + v;
            if (n == 1) {
              ASSERT_TRUE(dz[i] == 0.0f && !std::signbit(dz[i])) << "ignored row, V=" << V;
              continue;
            }
            const double p = std::exp(double(r.z[i]) - lse_t[n]);
            const double unit = kEps * (scale[n] * p + std::fabs(dz_t[i]));  // bound 3·unit
            worst_b = std::max(worst_b, std::fabs(double(dz[i]) - dz_t[i]) / unit);
          }
      }
    }
    EXPECT_LE(worst_f, 4.0);
    EXPECT_LE(worst_b, 3.0);
  }
}

// Special logits, as in the twin: a −inf logit contributes 0 to lse, but the smoothing term's mean
// is −inf and 0·inf makes the loss NaN even at ε = 0; a NaN or +inf logit makes lse and loss NaN.
TEST(CrossEntropyKernel, SpecialLogitsAsTheTwin) {
  SKIP_WITHOUT_SIMD_BODY();
  for (const CeBody& body : ce_bodies()) {
    SCOPED_TRACE(body.name);
    const float inf = std::numeric_limits<float>::infinity();
    const int64_t V = 20;
    for (float special : {-inf, inf, std::numeric_limits<float>::quiet_NaN()}) {
      auto z = testing::random_values(V, 60, -2.0f, 2.0f);
      z[17] = special;
      const int32_t t = 3;
      float loss, lse, loss_t, lse_t;
      body.forward(z.data(), &t, &loss, &lse, 1, V, -100, 0.0f);
      cross_entropy_forward_scalar<float>(z.data(), &t, &loss_t, &lse_t, 1, V, -100, 0.0f);
      const double bound = 4 * kEps * (1 + std::fabs(lse_t));
      if (std::isnan(lse_t))
        EXPECT_TRUE(std::isnan(lse)) << special;
      else
        EXPECT_NEAR(lse, lse_t, bound) << special;
      if (std::isnan(loss_t))
        EXPECT_TRUE(std::isnan(loss)) << special;
      else
        EXPECT_NEAR(loss, loss_t, bound) << special;
    }
  }
}

// The dispatcher runs the body row by row in parallel: bitwise the body on all rows at once.
TEST(CrossEntropyKernel, DispatchMatchesItsKernel) {
  const int64_t V = 300;
  Rows r(V);
  r.z.resize(400 * V);  // N·V above the parallel threshold
  r.t.resize(400);
  for (int64_t i = 6 * V; i < 400 * V; ++i) r.z[i] = static_cast<float>((i * 7919) % 1000) * 0.01f - 5.0f;
  for (int64_t n = 6; n < 400; ++n) r.t[n] = static_cast<int32_t>((n * 13) % V);
  const int64_t N = 400;
  std::vector<float> loss(N), lse(N), loss_k(N), lse_k(N), scale(N, 0.5f), dz(N * V), dz_k(N * V);
  cross_entropy_forward(r.z.data(), r.t.data(), loss.data(), lse.data(), N, V, -100, 0.1f);
  cross_entropy_backward(r.z.data(), r.t.data(), lse.data(), scale.data(), dz.data(), N, V, -100, 0.1f);
  if (cpu_has_avx512()) {
    cross_entropy_forward_avx512(r.z.data(), r.t.data(), loss_k.data(), lse_k.data(), N, V, -100, 0.1f);
    cross_entropy_backward_avx512(r.z.data(), r.t.data(), lse.data(), scale.data(), dz_k.data(), N, V, -100,
                                  0.1f);
  } else if (cpu_has_avx2()) {
    cross_entropy_forward_avx2(r.z.data(), r.t.data(), loss_k.data(), lse_k.data(), N, V, -100, 0.1f);
    cross_entropy_backward_avx2(r.z.data(), r.t.data(), lse.data(), scale.data(), dz_k.data(), N, V, -100, 0.1f);
  } else {
    cross_entropy_forward_scalar<float>(r.z.data(), r.t.data(), loss_k.data(), lse_k.data(), N, V, -100,
                                        0.1f);
    cross_entropy_backward_scalar<float>(r.z.data(), r.t.data(), lse.data(), scale.data(), dz_k.data(), N,
                                         V, -100, 0.1f);
  }
  EXPECT_TRUE(testing::bitwise_equal(loss, loss_k));
  EXPECT_TRUE(testing::bitwise_equal(lse, lse_k));
  EXPECT_TRUE(testing::bitwise_equal(dz, dz_k));
}

}  // namespace
}  // namespace tfm::kernels
