// tests/kernels/kernel_test_util.h — what the SIMD-versus-twin kernel tests share: the widths around
// the 16-float vector, random inputs, and the bitwise and tolerance comparisons that name the first
// mismatching index with both values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace tfm::kernels::test {

// Widths around the vector size: below, equal, above, and a transformer width plus a remainder.
inline const int64_t kSizes[] = {1, 7, 15, 16, 17, 33, 100, 515};

inline std::vector<float> rnd(int64_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (auto& x : v) x = u(g);
  return v;
}

#define SKIP_WITHOUT_AVX512() \
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or TFM_FORCE_SCALAR set)"

inline ::testing::AssertionResult bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "index " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

// |a − ref| ≤ 2^-23·|ref| + abs_tol element by element (one float ulp of the reference plus an
// absolute term the caller derives).
inline ::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& ref,
                                       double abs_tol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = std::ldexp(std::fabs(double(ref[i])), -23) + abs_tol;
    const double err = std::fabs(double(a[i]) - double(ref[i]));
    worst = std::max(worst, err);
    if (!(err <= tol))
      return ::testing::AssertionFailure()
             << "index " << i << ": " << a[i] << " vs " << ref[i] << " (err " << err << ", tol " << tol << ")";
  }
  return ::testing::AssertionSuccess() << "max err " << worst;
}

}  // namespace tfm::kernels::test
