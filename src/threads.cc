// src/threads.cc — the thread count (tfm/threads.h).
#include "tfm/threads.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <stdexcept>

namespace tfm {
namespace {

// libgomp's thread pool does not survive fork(): a child whose parent had run a parallel region waits forever in
// its first region of more than one thread, for pool threads it does not have. So a forked child computes on one
// thread: the fork handler sets the forking thread's count to 1, and set_num_threads keeps every count there.
std::atomic<bool> g_forked{false};

void on_fork_child() {
  g_forked.store(true);
  omp_set_num_threads(1);
}

[[maybe_unused]] const int g_fork_handler = pthread_atfork(nullptr, nullptr, on_fork_child);

}  // namespace

void check_threads(int64_t n, const std::string& what) {
  if (n < 0 || n > kMaxThreads)
    throw std::invalid_argument(what + " must be in [0, " + std::to_string(kMaxThreads) + "] (" + kThreadsZero +
                                "), got " + std::to_string(n));
}

int64_t thread_cap() { return g_forked.load() ? 1 : kMaxThreads; }

void set_num_threads(int64_t n) {
  check_threads(n, "the thread count");
  if (g_forked.load()) n = 1;
  if (n > 0) omp_set_num_threads(static_cast<int>(n));
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace tfm
