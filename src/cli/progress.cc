// src/cli/progress.cc — `tfm train`'s progress lines (src/cli/progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace tfm::cli {
namespace {

std::string duration(double s) {
  if (s < 0) return "?";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string rate(double tps) {
  char buf[32];
  if (tps >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", tps / 1e6);
  else if (tps >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tps / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tps);
  return buf;
}

}  // namespace

ProgressPrinter::ProgressPrinter(bool text) : tty_(isatty(STDERR_FILENO) == 1), text_(text) {}

void ProgressPrinter::operator()(const train::ProgressEvent& e) {
  using K = train::ProgressEvent::Kind;
  if (e.kind == K::NOTE || e.kind == K::CHECKPOINT) {
    if (e.kind == K::CHECKPOINT && tty_) return;  // the step line already shows progress
    clear();
    std::fprintf(stderr, "%s\n", e.message.c_str());
    return;
  }
  char line[256];
  std::string step = std::to_string(e.step);
  if (e.total_steps > 0) step.append("/").append(std::to_string(e.total_steps));
  char acc[16];  // rounded to 2 decimals, as the eval line prints it
  std::snprintf(acc, sizeof acc, "%.2f%%", e.last_eval.valid_token_accuracy * 100);
  std::string val = e.has_eval ? acc : "-";
  if (text_) {
    char v[32] = "-";
    if (e.has_eval) std::snprintf(v, sizeof v, "%.4f", e.last_eval.valid_loss);
    val = v;
  }
  const std::string procs = e.processes > 1 ? " (" + std::to_string(e.processes) + " procs)" : "";
  std::snprintf(line, sizeof line, "step %s | epoch %lld | loss %.4f | val %s %s | %s tok/s%s | ETA %s", step.c_str(),
                static_cast<long long>(e.epoch), e.loss, text_ ? "loss" : "acc", val.c_str(), rate(e.tokens_per_sec).c_str(),
                procs.c_str(), duration(e.eta_seconds).c_str());
  if (e.kind == K::EVAL) {
    clear();
    // Step 0 (an --init-from run's starting model) has trained on nothing: no training loss to show
    // (metrics.csv writes nan; curves.svg leaves the point out).
    char train_loss[32] = "-";
    if (e.step > 0) std::snprintf(train_loss, sizeof train_loss, "%.4f", e.last_eval.train_loss);
    std::fprintf(stderr, "eval  step %lld | epoch %lld | train loss %s | val loss %.4f | val token acc %.2f%%",
                 static_cast<long long>(e.step), static_cast<long long>(e.epoch), train_loss, e.last_eval.valid_loss,
                 100 * e.last_eval.valid_token_accuracy);
    // A language model's windows are not sequences to get right: no sequence accuracy for it.
    if (!text_) std::fprintf(stderr, " | val seq acc %.2f%%", 100 * e.last_eval.valid_sequence_accuracy);
    std::fprintf(stderr, "\n");
    return;
  }
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", line);
    open_ = true;
  } else if (e.elapsed_seconds - last_plain_ >= 10) {
    last_plain_ = e.elapsed_seconds;
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void ProgressPrinter::clear() {
  if (open_) std::fprintf(stderr, "\r\033[K");
  open_ = false;
}

}  // namespace tfm::cli
