// tests/test_util.cc — the shared test helpers declared, and explained, in test_util.h.
#include "test_util.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tfm::testing {

std::vector<float> random_values(int64_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  return Tensor::from_vector(shape, random_values(shape_numel(shape), seed, lo, hi));
}

std::span<const float> values(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  return {t.data(), static_cast<size_t>(t.numel())};
}

std::string index_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(std::max<size_t>(shape.size(), 1), flat);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s(1, '[');
  for (size_t i = 0; i < idx.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(idx[i]);
  }
  s += ']';
  return s;
}

Mismatches::Mismatches(std::string what, Shape shape) : what_(std::move(what)), shape_(std::move(shape)) {}

bool Mismatches::check(int64_t i, double actual, double expected, double tol) {
  if (actual == expected) return true;  // also two equal infinities
  const double err = std::fabs(actual - expected);  // NaN when either is NaN
  if (err <= tol) {
    max_error_ = std::max(max_error_, err);
    return true;
  }
  keep(i, actual, expected, std::isfinite(err) ? err : INFINITY, tol);
  return false;
}

void Mismatches::record(int64_t i, double actual, double expected) {
  const double err = std::fabs(actual - expected);
  keep(i, actual, expected, std::isnan(err) ? INFINITY : err, -1.0);
}

void Mismatches::keep(int64_t i, double actual, double expected, double err, double tol) {
  ++count_;
  max_error_ = std::max(max_error_, err);
  if (static_cast<int>(shown_.size()) >= kShown) return;
  std::ostringstream os;
  os.precision(9);
  os << index_str(i, shape_) << " " << actual << " vs " << expected << " (err " << err;
  if (tol >= 0) os << ", tol " << tol;
  os << ")";
  shown_.push_back(os.str());
}

::testing::AssertionResult Mismatches::failure(const std::string& headline) const {
  std::ostringstream os;
  os.precision(9);
  os << what_ << (what_.empty() ? "" : ": ");
  if (!headline.empty()) os << headline << "; ";
  os << count_ << " element" << (count_ == 1 ? "" : "s") << " differ" << (count_ == 1 ? "s" : "");
  if (!shown_.empty()) os << ", first:";
  for (const auto& s : shown_) os << "\n  " << s;
  os << "\n  max error " << max_error_;
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult Mismatches::result() const {
  return count_ == 0 ? ::testing::AssertionSuccess() : failure("");
}

double rel_error(const float* a, const float* b, int64_t n) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(b[i])));
  }
  return err / std::max(mag, kTinyMagnitude);
}

double rel_error(const Tensor& a, const Tensor& b) { return rel_error(a.data(), b.data(), a.numel()); }

namespace {
template <typename E>
double l2_ratio(std::span<const float> a, std::span<const E> e) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), e.size()); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(e[i]);
    num += d * d;
    den += static_cast<double>(e[i]) * static_cast<double>(e[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}
}  // namespace

double rel_error_l2(std::span<const float> a, std::span<const double> e) { return l2_ratio(a, e); }
double rel_error_l2(const Tensor& a, const Tensor& e) { return l2_ratio(values(a), values(e)); }

std::string number_str(double x) {
  std::ostringstream os;
  os.precision(9);
  os << x;
  return os.str();
}

bool same_float32_shape(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == DType::FLOAT32 && b.dtype() == DType::FLOAT32 &&
         a.shape() == b.shape();
}

::testing::AssertionResult size_mismatch(const std::string& what, size_t actual, size_t expected) {
  return ::testing::AssertionFailure() << what << (what.empty() ? "" : ": ") << actual << " elements, expected "
                                       << expected;
}

namespace {
std::string dtype_and_shape(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(t.dtype() == DType::BOOL ? "bool " : "float32 ") + shape_str(t.shape());
}
}  // namespace

::testing::AssertionResult shape_mismatch(const std::string& what, const Tensor& actual, const Tensor& expected) {
  return ::testing::AssertionFailure() << what << (what.empty() ? "" : ": ") << dtype_and_shape(actual) << ", expected "
                                       << dtype_and_shape(expected);
}

::testing::AssertionResult close_rel(const Tensor& actual, const Tensor& expected, double bound,
                                     const std::string& what, double floor) {
  if (!same_float32_shape(actual, expected)) return shape_mismatch(what, actual, expected);
  return close_rel(values(actual), values(expected), bound, what, floor, actual.shape());
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype())
    return shape_mismatch(what, a, b);
  if (a.dtype() == DType::BOOL) {
    const std::span<const uint8_t> x(a.data_bool(), static_cast<size_t>(a.numel()));
    const std::span<const uint8_t> y(b.data_bool(), static_cast<size_t>(b.numel()));
    return bitwise_equal(x, y, what, a.shape());
  }
  return bitwise_equal(values(a), values(b), what, a.shape());
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const std::string& bytes) {
  std::filesystem::remove(path);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

namespace {
// The directories temp_dir made in this process, removed after the last test (passed or failed).
std::vector<std::string>& made_temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
class RemoveTempDirs : public ::testing::Environment {
  void TearDown() override {
    std::error_code ignored;  // a test may have removed its own already
    for (const std::string& d : made_temp_dirs()) std::filesystem::remove_all(d, ignored);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempDirs =
    ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);
}  // namespace

std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  std::string templ = (fs::temp_directory_path() / ("tfm_" + tag + "_XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + templ);
  made_temp_dirs().emplace_back(buf.data());
  return made_temp_dirs().back();
}

void with_file_size_limit(size_t limit, const std::function<void()>& f) {
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old_action);
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  rlimit small = old_limit;
  small.rlim_cur = limit;
  setrlimit(RLIMIT_FSIZE, &small);
  const auto restore = [&] {
    setrlimit(RLIMIT_FSIZE, &old_limit);
    sigaction(SIGXFSZ, &old_action, nullptr);
  };
  try {
    f();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace tfm::testing
