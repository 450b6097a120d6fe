// tests/kernels/kernel_test_util.h — what the SIMD-versus-twin kernel tests share beyond test_util.h:
// the widths around the 16-float vector, their input range, and the skip when there is no AVX-512.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels::test {

// Widths around the vector size: below, equal, above, and a transformer width plus a remainder.
inline const int64_t kSizes[] = {1, 7, 15, 16, 17, 33, 100, 515};

// Kernel inputs are uniform in [−2, 2): the tolerances of layer_norm_test.cc assume |w|, |b|, |dy| ≤ 2.
inline std::vector<float> rnd(int64_t n, uint64_t seed) { return testing::random_values(n, seed, -2.0f, 2.0f); }

#define SKIP_WITHOUT_AVX512() \
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or TFM_FORCE_SCALAR set)"

}  // namespace tfm::kernels::test
