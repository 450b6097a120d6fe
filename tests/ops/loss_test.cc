// tests/ops/loss_test.cc — mse_loss on sizes where it runs in parallel chunks (the autograd test
// covers small shapes against finite differences), and cross_entropy on rows holding −inf logits.
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

#include "kernels/kernels.h"
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

// Masked logits (−inf, e.g. a vocabulary entry that may not be predicted) against F.cross_entropy
// (PyTorch 1.13, float64, ignore_index −100), by hand: row 0 z = (0, −inf, 1, 0.5), target 0:
// lse = log(1 + e + e^0.5) = 1.68026967…, loss 1.68026967; row 1 z = (2, 1, 0, −1), target 2:
// lse − 0 = 2.44018969…; row 2 is ignored. Mean over the two kept rows 2.06022968460146.
// Without label smoothing torch takes the plain NLL (its smoothing term, Σ_v −log p_v, is +inf on
// such a row and is not formed); with label smoothing > 0 the loss is +inf, as in torch.
// Tolerance: lse is accumulated in double and rounded once, so the float loss is within a few ulp
// of the float64 value (4·2⁻²³ relative); the gradients, softmax probabilities times 1/2, within
// 4·2⁻²³ absolute (the vector exp is within 2 ulp).
TEST(CrossEntropy, MinusInfinityLogitsMatchTorch) {
  const float inf = INFINITY;
  const std::vector<float> z = {0, -inf, 1, 0.5f, 2, 1, 0, -1, -inf, 3, -inf, 0};
  const std::vector<int32_t> target = {0, 2, -100};
  const double want = 2.060229684601465;
  const std::vector<double> dz_want = {-0.40683813838707622, 0, 0.25324019552782701, 0.15359794285924919,
                                       0.32195712994398618, 0.11844140904495508, -0.45642784062898373,
                                       0.01602930164004249, 0, 0, 0, 0};
  const double eps = std::ldexp(1.0, -23);

  Tensor x = Tensor::from_vector({3, 4}, z).requires_grad_(true);
  Tensor loss = cross_entropy(x, target);
  EXPECT_NEAR(loss.item(), want, 4 * eps * want);
  loss.backward();
  EXPECT_TRUE(tfm::testing::close_abs(tfm::testing::values(x.grad()), dz_want, 4 * eps, "dz"));

  // The scalar twin (the dispatcher above runs the AVX-512 body where the CPU has it).
  std::vector<float> rows(3), lse(3);
  kernels::cross_entropy_forward_scalar(z.data(), target.data(), rows.data(), lse.data(), 3, 4, -100, 0.0f);
  EXPECT_NEAR(0.5 * (static_cast<double>(rows[0]) + rows[1]), want, 4 * eps * want);

  // Label smoothing > 0: −log p of the masked entry is +inf, so is the loss (torch: inf).
  Tensor y = Tensor::from_vector({3, 4}, z);
  EXPECT_EQ(cross_entropy(y, target, -100, 0.1f).item(), inf);
}

}  // namespace
}  // namespace tfm::ops
