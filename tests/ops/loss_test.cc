// tests/ops/loss_test.cc — mse_loss on sizes where it runs in parallel chunks (the autograd test
// covers small shapes against finite differences).
//
// Forward: mean((x − t)²) is summed in double over fixed chunks; every term (x − t)² is exact in
// double (24-bit inputs, 48-bit product after an exact 25-bit difference), so the double sum of n
// terms is within γ_n(double)·Σ ≈ n·2⁻⁵³·Σ of the exact value, far below one float rounding: the
// float result must equal the correctly rounded mean of a long double reference to within 1 ulp,
// and be bitwise the same on 1 and 2 threads.
// Backward: dx = 2·dy/n · (x − t) elementwise, checked exactly against the same float expression.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"
#include "tfm/autograd.h"
#include "tfm/ops/loss.h"

namespace tfm::ops {
namespace {

using tfm::testing::random_tensor;

TEST(MseLoss, LargeInputMatchesLongDoubleAndThreadCount) {
  const int64_t n = 300007;  // many chunks and a ragged last one
  Tensor x = random_tensor({n}, 5, -3.0f, 3.0f).requires_grad_(true);
  Tensor t = random_tensor({n}, 6, -3.0f, 3.0f);
  long double ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const long double d = static_cast<long double>(x.data()[i]) - t.data()[i];
    ref += d * d;
  }
  const float want = static_cast<float>(ref / n);
  float got[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    got[threads - 1] = mse_loss(x, t).item();
  }
  EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(float)), 0) << got[0] << " vs " << got[1];
  EXPECT_LE(std::fabs(got[0] - want), std::nextafter(want, INFINITY) - want) << got[0] << " vs " << want;

  Tensor loss = mse_loss(x, t);
  loss.backward();
  const float s = 2.0f / static_cast<float>(n);
  std::vector<float> dx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) dx[static_cast<size_t>(i)] = s * (x.data()[i] - t.data()[i]);
  EXPECT_TRUE(tfm::testing::close_abs(tfm::testing::values(x.grad()), dx, 0.0, "dx"));  // equal values
}

}  // namespace
}  // namespace tfm::ops
