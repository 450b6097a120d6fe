// tests/mpi/mpi_test_util.h — what the mpirun tests share: the fixture that skips (saying why) when
// the library was built without MPI or mpirun is not on the PATH and spells the launch line, the
// equality of two run directories, and generated TSV pairs. Open MPI refuses to run as root unless
// told: the allow-root variables are set on the test's command lines only.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tfm/train/comm.h"

namespace tfm::testing {

// A file's bytes, "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Two runs are the same when model.safetensors and trainer_state.safetensors are the same bytes (the
// state holds no clock: trainer_clock.json has that).
inline ::testing::AssertionResult same_run(const std::string& a, const std::string& b) {
  for (const char* f : {"model.safetensors", "trainer_state.safetensors"}) {
    const std::string x = read_file(a + "/" + f);
    if (x.empty()) return ::testing::AssertionFailure() << a << "/" << f << ": missing";
    if (x != read_file(b + "/" + f)) return ::testing::AssertionFailure() << a << "/" << f << " and " << b << "/" << f << " differ";
  }
  return ::testing::AssertionSuccess();
}

class MpirunTest : public ::testing::Test {
 public:
  // The launch line's start: "mpirun -np <np> " with the allow-root and oversubscribe settings.
  static std::string mpirun(int np) {
    std::string line =
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np ";
    return line + std::to_string(np) + " ";
  }

 protected:
  void SetUp() override {
    if (!train::Comm::available()) GTEST_SKIP() << "tfm was built without MPI (TFM_MPI=OFF): nothing to launch";
    if (run_command("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not on the PATH (openmpi-bin)";
  }
};

// n pairs "word<TAB>its reverse" of 2–6 letters a–e.
inline void write_pairs(const std::string& path, int n, uint64_t seed) {
  Rng g(seed);
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    std::string w;
    for (int k = 0, len = g.uniform_int(2, 6); k < len; ++k) w += static_cast<char>('a' + g.uniform_int(0, 4));
    f << w << '\t' << std::string(w.rbegin(), w.rend()) << '\n';
  }
}

}  // namespace tfm::testing
