// src/threads.cc — the thread count (tfm/threads.h).
#include "tfm/threads.h"

#include <omp.h>

#include <stdexcept>

namespace tfm {

void check_threads(int64_t n, const std::string& what) {
  if (n < 0 || n > kMaxThreads)
    throw std::invalid_argument(what + " must be in [0, " + std::to_string(kMaxThreads) + "] (0: every core), got " +
                                std::to_string(n));
}

void set_num_threads(int64_t n) {
  check_threads(n, "the thread count");
  if (n > 0) omp_set_num_threads(static_cast<int>(n));
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace tfm
