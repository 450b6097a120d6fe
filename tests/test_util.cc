#include "test_util.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tfm::testing {

std::vector<float> random_values(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<float>((s >> 40) * (1.0 / 16777216.0));
  }
  return v;
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  return Tensor::from_vector(shape, random_values(shape_numel(shape), seed, lo, hi));
}

double rel_error(const float* a, const float* b, int64_t n) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(b[i])));
  }
  return err / std::max(mag, 1e-30);
}

double rel_error(const Tensor& a, const Tensor& b) { return rel_error(a.data(), b.data(), a.numel()); }

::testing::AssertionResult close_rel(const Tensor& actual, const Tensor& expected, double bound, const std::string& what) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(actual.shape()) << " vs expected "
                                         << shape_str(expected.shape());
  const double rel = rel_error(actual, expected);
  if (rel <= bound) return ::testing::AssertionSuccess();
  double mag = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) mag = std::max(mag, std::fabs(double(expected.data()[i])));
  std::ostringstream os;
  os << what << ": rel error " << rel << " > bound " << bound << "; first mismatches:";
  int shown = 0;
  for (int64_t i = 0; i < actual.numel() && shown < 5; ++i) {
    double d = std::fabs(double(actual.data()[i]) - expected.data()[i]);
    if (d > bound * mag) {
      os << " [" << i << "] " << actual.data()[i] << " vs " << expected.data()[i];
      ++shown;
    }
  }
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << what << ": shapes differ";
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(&a.data()[i], &b.data()[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << what << ": differs at [" << i << "] " << a.data()[i] << " vs " << b.data()[i];
  return ::testing::AssertionSuccess();
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

std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  std::string templ = (fs::temp_directory_path() / ("tfm_" + tag + "_XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + templ);
  return std::string(buf.data());
}

}  // namespace tfm::testing
