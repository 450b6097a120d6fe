// tests/test_util.h — what every test shares: the one random source, the comparisons, and file and
// process helpers.
//
// Random data: Rng, a 64-bit LCG (Knuth's MMIX constants), and random_values / random_tensor over
// it. Tests need data that is the same on every platform, compiler and standard library (the
// std::*_distribution classes are implementation-defined), not statistical quality.
//
// Comparisons, each an AssertionResult for EXPECT_TRUE / ASSERT_TRUE:
//   close_rel(actual, expected, bound)  normwise: max_i |a_i − e_i| / max(max_i |e_i|, floor) ≤ bound
//   close_abs(actual, expected, tol)    elementwise: |a_i − e_i| ≤ tol_i for every i, where tol is one
//                                       number, one value per element, or a function of i
//   bitwise_equal(a, b)                 the same bits (floats, bf16 words) or bytes (bool tensors)
// close_rel and close_abs fail on NaN in either operand and count two equal infinities as equal
// (close_rel leaves infinities out of max|e|). A failure names the sizes or shapes when they
// differ, else prints how many elements are out of tolerance, the first few with their index (in
// the tensor's shape when there is one), both values, the error and its tolerance, and the max
// error. Tolerances are the caller's, derived in its header comment.
//
// To add a comparison: build it on Mismatches, so every failure reads the same.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::testing {

// True in the sanitized build (`make test-asan`: AddressSanitizer + UndefinedBehaviorSanitizer, every access
// checked, the tests' own code at -O0), where a test runs 5–40× slower. A test may shrink a size or a count by it
// where the larger run only repeats, longer, code the smaller one runs too (each such test says what it keeps);
// the Release suite runs them whole.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// ---- random data ------------------------------------------------------------------------------------

// A 64-bit linear congruential generator: state ← state·a + c (mod 2⁶⁴). Its high bits are the good
// ones, so every draw takes the top of the state.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * kA + kC) {}

  uint64_t next() {  // advances and returns the whole state
    state_ = state_ * kA + kC;
    return state_;
  }
  uint32_t bits() { return static_cast<uint32_t>(next() >> 32); }  // 32 random bits
  // Uniform in [lo, hi], both ends included (hi − lo < 2³¹; the tiny modulo bias does not matter here).
  int32_t uniform_int(int32_t lo, int32_t hi) {
    return lo + static_cast<int32_t>((next() >> 33) % static_cast<uint64_t>(int64_t{hi} - lo + 1));
  }
  // Uniform in [lo, hi) on a grid of 2²⁴ steps (24 random bits, exact in float).
  float uniform(float lo = -1.0f, float hi = 1.0f) {
    return lo + (hi - lo) * static_cast<float>((next() >> 40) * (1.0 / 16777216.0));
  }

 private:
  static constexpr uint64_t kA = 6364136223846793005ull, kC = 1442695040888963407ull;
  uint64_t state_;
};

// n draws of Rng(seed).uniform(lo, hi), and the same as a tensor of `shape` (row-major).
std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// ---- comparisons ------------------------------------------------------------------------------------

// A contiguous run of numbers: std::vector<float>, std::vector<double>, std::span<const float>, …
template <class R>
concept NumberRange = std::ranges::contiguous_range<R> && std::is_arithmetic_v<std::ranges::range_value_t<R>>;

// A float32 tensor's elements, for comparing a tensor with a vector.
std::span<const float> values(const Tensor& t);

// "[i, j, k]" for flat index `flat` of a row-major `shape`; "[flat]" when the shape is empty.
std::string index_str(int64_t flat, const Shape& shape);

// The report behind every comparison: counts the elements out of tolerance, keeps the first few
// (index, actual, expected, error, tolerance) and the largest error.
class Mismatches {
 public:
  explicit Mismatches(std::string what, Shape shape = {});
  // Element i passes when actual == expected (equal infinities included) or |actual − expected| ≤ tol;
  // NaN in either fails. The error of a failing non-finite pair counts as +inf. Returns whether it passed.
  bool check(int64_t i, double actual, double expected, double tol);
  // An element the caller found different (bitwise); its error still enters max_error().
  void record(int64_t i, double actual, double expected);
  int64_t count() const { return count_; }
  double max_error() const { return max_error_; }  // over every element checked or recorded
  // Failure: `headline`, the count, the first mismatches and the max error.
  ::testing::AssertionResult failure(const std::string& headline) const;
  ::testing::AssertionResult result() const;  // success when count() == 0, else failure("")

 private:
  void keep(int64_t i, double actual, double expected, double err, double tol);
  static constexpr int kShown = 5;
  std::string what_;
  Shape shape_;
  int64_t count_ = 0;
  double max_error_ = 0;
  std::vector<std::string> shown_;
};

// The smallest magnitude close_rel divides by: an all-zero reference is then compared absolutely,
// to within bound·1e-30.
inline constexpr double kTinyMagnitude = 1e-30;

// max|a − e| / max(max|e|, kTinyMagnitude) over all elements: the relative error tests print beside
// their bound (for finite data the number close_rel compares).
double rel_error(const float* a, const float* b, int64_t n);
double rel_error(const Tensor& a, const Tensor& b);

// ‖a − e‖₂ / ‖e‖₂, or the absolute ‖a − e‖₂ when e is all zeros: the normwise relative error the bf16 and int8
// bounds are stated in (docs/bf16.md). The sizes must match (checked by the caller).
double rel_error_l2(std::span<const float> a, std::span<const double> e);
double rel_error_l2(const Tensor& a, const Tensor& e);

// Pieces of the comparisons below.
std::string number_str(double x);  // 9 significant digits
::testing::AssertionResult size_mismatch(const std::string& what, size_t actual, size_t expected);
bool same_float32_shape(const Tensor& a, const Tensor& b);  // both defined, float32, one shape
::testing::AssertionResult shape_mismatch(const std::string& what, const Tensor& actual, const Tensor& expected);

// Normwise relative check: rel = max_i |a_i − e_i| / max(max_i |e_i| over finite e_i, floor) ≤ bound.
// `floor` keeps the denominator away from zero (or at a scale the caller derives); `shape`, when
// given, prints indices as [i, j, …].
template <NumberRange A, NumberRange E>
::testing::AssertionResult close_rel(const A& actual, const E& expected, double bound, const std::string& what = "",
                                     double floor = kTinyMagnitude, const Shape& shape = {}) {
  const auto n = std::ranges::size(actual);
  if (n != std::ranges::size(expected)) return size_mismatch(what, n, std::ranges::size(expected));
  const auto* a = std::ranges::data(actual);
  const auto* e = std::ranges::data(expected);
  double mag = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(static_cast<double>(e[i]))) mag = std::max(mag, std::fabs(static_cast<double>(e[i])));
  const double denom = std::max(mag, floor);
  Mismatches m(what, shape);
  for (size_t i = 0; i < n; ++i)
    m.check(static_cast<int64_t>(i), static_cast<double>(a[i]), static_cast<double>(e[i]), bound * denom);
  const double rel = m.max_error() / denom;
  if (rel <= bound) return ::testing::AssertionSuccess();
  return m.failure("rel error " + number_str(rel) + " > bound " + number_str(bound) + " (max|expected| " +
                   number_str(mag) + ")");
}

::testing::AssertionResult close_rel(const Tensor& actual, const Tensor& expected, double bound,
                                     const std::string& what = "", double floor = kTinyMagnitude);

// Elementwise check: |a_i − e_i| ≤ tol_i for every i. `tol` is a number (the same for all), a run of
// per-element tolerances, or a function int64_t i → double.
template <NumberRange A, NumberRange E, class Tol>
::testing::AssertionResult close_abs(const A& actual, const E& expected, const Tol& tol, const std::string& what = "",
                                     const Shape& shape = {}) {
  const auto n = std::ranges::size(actual);
  if (n != std::ranges::size(expected)) return size_mismatch(what, n, std::ranges::size(expected));
  if constexpr (NumberRange<Tol>) {
    if (std::ranges::size(tol) != n) return size_mismatch(what + " (tolerances)", std::ranges::size(tol), n);
  }
  const auto* a = std::ranges::data(actual);
  const auto* e = std::ranges::data(expected);
  Mismatches m(what, shape);
  for (size_t i = 0; i < n; ++i) {
    double t;
    if constexpr (std::is_arithmetic_v<Tol>) {
      t = static_cast<double>(tol);
    } else if constexpr (NumberRange<Tol>) {
      t = static_cast<double>(std::ranges::data(tol)[i]);
    } else {
      static_assert(std::invocable<const Tol&, int64_t>, "tol: a number, a run of numbers or a function of i");
      t = static_cast<double>(tol(static_cast<int64_t>(i)));
    }
    m.check(static_cast<int64_t>(i), static_cast<double>(a[i]), static_cast<double>(e[i]), t);
  }
  return m.result();
}

template <class Tol>
::testing::AssertionResult close_abs(const Tensor& actual, const Tensor& expected, const Tol& tol,
                                     const std::string& what = "") {
  if (!same_float32_shape(actual, expected)) return shape_mismatch(what, actual, expected);
  return close_abs(values(actual), values(expected), tol, what, actual.shape());
}

// The same bits, element by element (floats compared as bit patterns: −0 ≠ +0, a NaN equals itself).
template <NumberRange A, NumberRange B>
  requires(std::same_as<std::ranges::range_value_t<A>, std::ranges::range_value_t<B>>)
::testing::AssertionResult bitwise_equal(const A& a, const B& b, const std::string& what = "",
                                         const Shape& shape = {}) {
  const auto n = std::ranges::size(a);
  if (n != std::ranges::size(b)) return size_mismatch(what, n, std::ranges::size(b));
  const auto* x = std::ranges::data(a);
  const auto* y = std::ranges::data(b);
  Mismatches m(what, shape);
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(x[i])) != 0)
      m.record(static_cast<int64_t>(i), static_cast<double>(x[i]), static_cast<double>(y[i]));
  return m.result();
}

// Tensors: same dtype and shape, then the same bits (float32) or bytes (bool).
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what = "");

// ---- files and processes ----------------------------------------------------------------------------

// Whole-file bytes for tests that build or corrupt files by hand. spit replaces the file, removing it
// first: ext4 flushes a file truncated over old data on close (auto_da_alloc), which made the
// truncation sweeps of the safetensors tests take seconds.
std::string slurp(const std::string& path);
void spit(const std::string& path, const std::string& bytes);

// Runs a shell command, returns its exit status and captures stdout+stderr into `output`.
int run_command(const std::string& cmd, std::string* output = nullptr);
// A fresh directory under the system temp dir, removed with all it holds after the last test of the process.
std::string temp_dir(const std::string& tag);
// Runs f with writes past `limit` bytes of a file failing with EFBIG, as a full disk fails them (SIGXFSZ ignored,
// RLIMIT_FSIZE lowered; child processes f starts inherit both); both restored after, also when f throws.
void with_file_size_limit(size_t limit, const std::function<void()>& f);

}  // namespace tfm::testing
