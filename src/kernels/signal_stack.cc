// src/kernels/signal_stack.cc — alternate signal stacks for the threads that run oneDNN (signal_stack.h).
#include "kernels/signal_stack.h"

#include <omp.h>
#include <signal.h>

#include <cstdlib>

namespace tfm::kernels {
namespace {

// 256 KiB: a signal frame with AVX-512 state is about 3.5 KiB (with AMX tiles about 11.5 KiB); the handlers
// that run on it (a flag set, CPython's C handler) need little more.
constexpr size_t kStackBytes = size_t(256) << 10;

// This thread's stack, set once; disabled and freed when the thread ends (before the memory goes back,
// so that no signal lands on freed memory).
struct ThreadStack {
  void* memory = nullptr;
  bool checked = false;
  ~ThreadStack() {
    if (!memory) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    std::free(memory);
  }
  void ensure() {
    if (checked) return;
    checked = true;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;  // one of its own
    void* m = std::malloc(kStackBytes);
    if (!m) return;
    stack_t ss{};
    ss.ss_sp = m;
    ss.ss_size = kStackBytes;
    if (sigaltstack(&ss, nullptr) == 0) {
      memory = m;
    } else {
      std::free(m);
    }
  }
};

thread_local ThreadStack tl_stack;
thread_local int tl_team_covered = 0;  // the largest team this thread has started with every member covered

}  // namespace

void ensure_signal_stacks() {
  tl_stack.ensure();
  if (omp_in_parallel()) return;  // the team's threads call it themselves
  const int n = omp_get_max_threads();
  if (tl_team_covered >= n) return;
#pragma omp parallel num_threads(n)
  tl_stack.ensure();
  tl_team_covered = n;
}

}  // namespace tfm::kernels
