// src/cli/stop_signal.cc — SIGINT/SIGTERM recorded for a command to poll (stop_signal.h).
#include "stop_signal.h"

#include <atomic>
#include <csignal>

namespace tfm::cli {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) { g_signal.store(sig); }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_signal.load(); }

}  // namespace tfm::cli
