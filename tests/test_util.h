// tests/test_util.h — shared test helpers: random tensors, derived tolerances, comparisons that
// print the first mismatches (index, both values, max error).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::testing {

// Deterministic uniform values in [lo, hi) from a seed (a tiny LCG: tests need reproducibility,
// not quality).
std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// max|a − b| / max(max|b|, tiny): the relative error measure used across the suite.
double rel_error(const float* a, const float* b, int64_t n);
double rel_error(const Tensor& a, const Tensor& b);

// Asserts rel_error(actual, expected) ≤ bound; on failure prints the first few mismatching indices.
::testing::AssertionResult close_rel(const Tensor& actual, const Tensor& expected, double bound,
                                     const std::string& what = "");
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what = "");

// Whole-file bytes for tests that build or corrupt files by hand. spit replaces the file, removing it
// first: ext4 flushes a file truncated over old data on close (auto_da_alloc), which made the
// truncation sweeps of the safetensors tests take seconds.
std::string slurp(const std::string& path);
void spit(const std::string& path, const std::string& bytes);

// Runs a shell command, returns its exit status and captures stdout+stderr into `output`.
int run_command(const std::string& cmd, std::string* output = nullptr);
std::string temp_dir(const std::string& tag);  // a fresh directory under the system temp dir

}  // namespace tfm::testing
