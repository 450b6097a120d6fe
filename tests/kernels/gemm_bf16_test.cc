// tests/kernels/gemm_bf16_test.cc — gemm_bf16 (oneDNN's bf16 matmul on fixed panels; A given in bfloat16 or in
// float32, rounded per panel) against its scalar twin gemm_bf16_scalar, the twin against a double reference,
// every transpose with and without bias and accumulation, padded leading dimensions, K = 0, bitwise thread-count
// independence, and convert_to_bf16 against the scalar rounding.
//
// Tolerance. Both operands are bfloat16 values, so every product a·b is exact in float32 (8 + 8
// significant bits); only the float32 sums round. Any summation order of K exact products, the bias
// and beta·c (at most three more roundings) is within γ_{K+3} · (Σ_k |a_ik b_kj| + |bias_j| + |beta c_ij|)
// of the exact value (γ_n = n·u / (1 − n·u), u = 2^-24), so two implementations differ by at most
// twice that, and the twin against the double reference (computed from the same bf16 values) by once.
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm_bf16.h"
#include "kernels/gemm_packed.h"
#include "kernels/gemm_scalar.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using testing::Rng;

double gamma_f(int64_t n) {
  const double u = FLT_EPSILON / 2.0;
  return double(n) * u / (1.0 - double(n) * u);
}

// A (rows, cols) matrix of bfloat16 values at leading dimension ld ≥ cols; padding holds a NaN pattern
// (0x7FC0), so reading it would poison the result.
struct Bf16Mat {
  int64_t rows, cols, ld;
  std::vector<uint16_t> v;
  Bf16Mat(int64_t r, int64_t c, int64_t pad, Rng& rng) : rows(r), cols(c), ld(c + pad), v(size_t(std::max<int64_t>(r * (c + pad), 1)), 0x7FC0) {
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) v[i * ld + j] = float_to_bf16(rng.uniform(-1.f, 1.f));
  }
  double at(int64_t i, int64_t j) const { return bf16_to_float(v[i * ld + j]); }
};

struct Shape3 {
  int64_t M, N, K;
};
// Single panels, odd sizes, and products past gemm's serial threshold (2^21 multiply-adds: row or column panels).
const Shape3 kShapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {130, 70, 300}, {300, 257, 64}, {40, 600, 128}, {512, 96, 200}};

// C from gemm_bf16 and from the twin for one case, each checked against the double reference.
void check_case(bool ta, bool tb, const Shape3& s, float beta, bool with_bias, uint64_t seed) {
  Rng rng(seed);
  const auto [M, N, K] = s;
  // op(A) (M, K): A stored (M, K) or (K, M); op(B) (K, N): B stored (K, N) or (N, K).
  const Bf16Mat A = ta ? Bf16Mat(K, M, 3, rng) : Bf16Mat(M, K, 3, rng);
  const Bf16Mat B = tb ? Bf16Mat(N, K, 5, rng) : Bf16Mat(K, N, 5, rng);
  std::vector<float> bias(static_cast<size_t>(N));
  for (auto& b : bias) b = rng.uniform(-1.f, 1.f);
  const int64_t ldc = N + 2;
  std::vector<float> c0(static_cast<size_t>(M * ldc));
  for (auto& c : c0) c = rng.uniform(-1.f, 1.f);
  std::vector<float> fast = c0, twin = c0, fast_f = c0, twin_f = c0;
  const float* bp = with_bias ? bias.data() : nullptr;
  gemm_bf16(ta, tb, M, N, K, A.v.data(), A.ld, B.v.data(), B.ld, beta, fast.data(), ldc, bp);
  gemm_bf16_scalar(ta, tb, M, N, K, A.v.data(), A.ld, B.v.data(), B.ld, beta, twin.data(), ldc, bp);
  // A in float32 (rounded inside, panel by panel): values 2⁻¹⁰ above A's bf16 values round back to them, so the
  // exact reference is the same; the padding stays NaN.
  std::vector<float> af(A.v.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = bf16_to_float(A.v[i]) * (1.0f + 0x1p-10f);
  gemm_bf16(ta, tb, M, N, K, af.data(), A.ld, B.v.data(), B.ld, beta, fast_f.data(), ldc, bp);
  gemm_bf16_scalar(ta, tb, M, N, K, af.data(), A.ld, B.v.data(), B.ld, beta, twin_f.data(), ldc, bp);
  const std::string what = "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " " + std::to_string(M) + "x" +
                           std::to_string(N) + "x" + std::to_string(K) + " beta=" + std::to_string(beta) +
                           (with_bias ? " bias" : "");
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A.at(k, i) : A.at(i, k), b = tb ? B.at(j, k) : B.at(k, j);
        exact += a * b;
        mag += std::fabs(a * b);
      }
      if (with_bias) exact += bias[j], mag += std::fabs(bias[j]);
      exact += double(beta) * c0[i * ldc + j];
      mag += std::fabs(double(beta) * c0[i * ldc + j]);
      const double bound = gamma_f(K + 3) * mag;
      ASSERT_LE(std::fabs(twin[i * ldc + j] - exact), bound) << what << " twin at " << i << "," << j;
      ASSERT_LE(std::fabs(fast[i * ldc + j] - exact), bound) << what << " fast at " << i << "," << j;
      ASSERT_LE(std::fabs(twin_f[i * ldc + j] - exact), bound) << what << " twin, float A, at " << i << "," << j;
      ASSERT_LE(std::fabs(fast_f[i * ldc + j] - exact), bound) << what << " fast, float A, at " << i << "," << j;
    }
  for (int64_t i = 0; i < M; ++i)  // the padding columns of C are neither read nor written
    for (int64_t j = N; j < ldc; ++j) {
      ASSERT_EQ(fast[i * ldc + j], c0[i * ldc + j]) << what;
      ASSERT_EQ(fast_f[i * ldc + j], c0[i * ldc + j]) << what;
    }
}

TEST(GemmBf16, EveryTransposeBiasAndBetaWithinTheSumBound) {
  uint64_t seed = 1;
  for (const Shape3& s : kShapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f})
          for (bool bias : {false, true}) check_case(ta, tb, s, beta, bias, seed++);
}

TEST(GemmBf16, BetaZeroOverwritesEvenNaNAndKZeroGivesBiasPlusBetaC) {
  const std::vector<uint16_t> a(6, float_to_bf16(1.0f)), b(6, float_to_bf16(2.0f));
  std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
  gemm_bf16(false, false, 2, 2, 3, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2);
  for (float v : c) EXPECT_EQ(v, 6.0f);
  const float bias[2] = {0.5f, -1.0f};
  std::vector<float> d = {1, 2, 3, 4};
  gemm_bf16(false, false, 2, 2, 0, a.data(), 3, b.data(), 2, 1.0f, d.data(), 2, bias);
  EXPECT_EQ(d, (std::vector<float>{1.5f, 1.0f, 3.5f, 3.0f}));
  std::vector<float> e = {1, 2, 3, 4}, f = e;
  gemm_bf16_scalar(false, false, 2, 2, 0, a.data(), 3, b.data(), 2, 1.0f, f.data(), 2, bias);
  EXPECT_EQ(f, (std::vector<float>{1.5f, 1.0f, 3.5f, 3.0f}));
}

// Panels are fixed by the shape; each is one single-threaded call: 1 and 2 threads give the same bits,
// for the three products a bf16 Linear makes (forward NT, dx NN, dW TN).
TEST(GemmBf16, BitwiseTheSameForOneAndTwoThreads) {
  Rng rng(7);
  const int64_t rows = 640, in = 256, out = 384;
  const Bf16Mat x(rows, in, 0, rng), w(out, in, 0, rng), g(rows, out, 0, rng);
  std::vector<float> xf(x.v.size()), gf(g.v.size());  // the op's float32 operands (rounded inside)
  for (auto& v : xf) v = rng.uniform(-1.f, 1.f);
  for (auto& v : gf) v = rng.uniform(-1.f, 1.f);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in)), dw(static_cast<size_t>(out * in));
    gemm_bf16(false, true, rows, out, in, xf.data(), in, w.v.data(), in, 0.0f, y.data(), out);
    gemm_bf16(false, false, rows, in, out, gf.data(), out, w.v.data(), in, 0.0f, dx.data(), in);
    gemm_bf16(true, false, out, in, rows, gf.data(), out, x.v.data(), in, 0.0f, dw.data(), in);
    omp_set_num_threads(saved);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  };
  const std::vector<float> one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
}

TEST(GemmBf16, ConvertEqualsTheScalarRoundingAcrossBlocks) {
  Rng rng(3);
  const int64_t n = (1 << 17) + 37;  // past one block of the parallel split, not a multiple of 16
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = rng.uniform(-4.f, 4.f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = 3.4e38f;  // rounds up to inf
  x[8] = -0.0f;
  std::vector<uint16_t> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  convert_to_bf16(x.data(), n, got.data());
  convert_rows_to_bf16_scalar(x.data(), n, 1, n, want.data());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tfm::kernels
