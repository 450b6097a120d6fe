// tfm/threads.h — how many threads tfm computes with. tfm runs its loops on OpenMP (and oneDNN on the
// same runtime); the count is OpenMP's per-thread setting, so set it on the thread that calls tfm.
// Results never depend on it: every reduction has a fixed order (docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <string>

namespace tfm {

// The counts tfm takes (--threads of every command, tfm.set_num_threads): 0 = OpenMP's own setting
// (OMP_NUM_THREADS, else every core), up to kMaxThreads (far past any 2-socket CPU's cores; OpenMP and
// oneDNN fail well before 10^5). check_threads throws std::invalid_argument naming `what`.
inline constexpr int64_t kMaxThreads = 1024;
void check_threads(int64_t n, const std::string& what);
// What 0 (and a command's default) means, as every --threads help and message says it.
inline constexpr const char* kThreadsZero = "0: OMP_NUM_THREADS, else every core";

// The calling thread's count for every later tfm call it makes: n in [1, kMaxThreads], or 0 to leave
// OpenMP's setting as it is. Throws std::invalid_argument outside [0, kMaxThreads]. In a process forked from
// another (fork(), Python's multiprocessing "fork"), every count is 1: OpenMP's thread pool does not survive a
// fork, so the child computes on the forking thread alone (a fork handler sets that thread's count to 1); use
// "spawn" or "forkserver" for children that compute on several threads.
void set_num_threads(int64_t n);
// The most threads a call runs on: 1 in a forked process (above), else kMaxThreads.
int64_t thread_cap();
// The count the calling thread's tfm calls use.
int get_num_threads();

}  // namespace tfm
