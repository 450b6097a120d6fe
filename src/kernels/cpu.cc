// src/kernels/cpu.cc — run-time CPU feature detection, the TFM_FORCE_SCALAR switch, and splitmix64, the
// counter-based hash behind every random number: initial weights draw from it directly (uniform01), and
// dropout's own 32-bit hash takes its key per (seed, counter / 2³²) from it (dropout_key, kernels.h).
#include <cstdlib>
#include <cstring>

#include "kernels/kernels.h"

namespace tfm::kernels {

bool force_scalar() {
  static const bool forced = [] {
    const char* v = std::getenv("TFM_FORCE_SCALAR");
    return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
  }();
  return forced;
}

bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every flag the *_avx512.cc files are compiled with (CMakeLists.txt, TFM_AVX512_OPTIONS).
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("fma");
  }();
  return has && !force_scalar();
}

bool cpu_has_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every flag the *_avx2.cc files are compiled with (CMakeLists.txt).
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has && !force_scalar();
}

bool cpu_has_int8_dot() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every CPU with AMX-INT8 has AVX512-VNNI too (and clang 14 has no "amx-int8" feature name).
    return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  }();
  return has && !force_scalar();
}

// SplitMix64's output step on the state seed·φ + counter + φ (φ = 2⁶⁴/golden ratio): a cheap,
// well-mixed 64-bit hash, so initial weights and dropout's keys (hence its masks) are a pure function of
// (seed, element index).
// One round is enough: it passes the uniformity, consecutive-pair and seed-to-seed tests
// (tests/kernels/elementwise_test.cc, ElementwiseKernel.HashIsUniformAndUncorrelated), which a
// second round does not improve while adding to the cost of every draw (bench/RESULTS.md, "Design
// measurements behind the kernels").
uint64_t splitmix64(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace tfm::kernels
