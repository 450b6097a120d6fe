// src/cli/stop_signal.h — SIGINT/SIGTERM as a request to stop, for the commands that can stop cleanly
// (`tfm train`: a final checkpoint; `tfm quantize`: nothing written). The library never sees a signal:
// it polls a should_stop function the command passes it, which reads stop_signal().
#pragma once

namespace tfm::cli {

// The first SIGINT/SIGTERM is recorded (stop_signal() returns it); SA_RESETHAND makes a second one kill
// the process at once (what a command writes is staged and renamed, so nothing half-written remains).
// SA_ONSTACK: the handler runs on the thread's alternate signal stack, which every thread running
// oneDNN has (src/kernels/signal_stack.h: oneDNN's JIT sgemm keeps rsp in the heap).
void install_stop_handlers();

// The signal received since install_stop_handlers (SIGINT or SIGTERM), or 0.
int stop_signal();

}  // namespace tfm::cli
