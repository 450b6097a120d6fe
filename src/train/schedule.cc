// src/train/schedule.cc — learning-rate schedules (tfm/train/schedule.h).
#include "tfm/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tfm::train {
namespace {

// min_lr + (base − min_lr)·½(1 + cos(π·progress)), progress in [0, 1).
float cosine_decay(double base, float min_lr, double progress) {
  const double floor = min_lr;  // 0: base·½(1 + cos) exactly (base − 0 and x + 0 are exact)
  return static_cast<float>(floor + (base - floor) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace

Schedule resolve_schedule(Schedule s, int64_t warmup, int64_t total_steps) {
  if (s != Schedule::AUTO) return s;
  if (total_steps > warmup) return Schedule::COSINE;
  return warmup > 0 ? Schedule::INVERSE_SQRT : Schedule::CONSTANT;
}

float scheduled_lr(Schedule schedule, float base_lr, int64_t step, int64_t warmup, int64_t total_steps,
                   float min_lr) {
  const auto fail = [](const std::string& m) { throw std::invalid_argument("scheduled_lr: " + m); };
  if (step < 1) fail("step is 1-based, got " + std::to_string(step));
  if (warmup < 0) fail("warmup must be non-negative, got " + std::to_string(warmup));
  if (schedule == Schedule::AUTO) fail("AUTO is resolved per run (resolve_schedule) before use");
  if (schedule == Schedule::COSINE && total_steps <= warmup)
    fail("cosine needs total_steps > warmup (got " + std::to_string(total_steps) + " and " + std::to_string(warmup) + ")");
  const double base = base_lr;
  if (step <= warmup) return static_cast<float>(base * static_cast<double>(step) / static_cast<double>(warmup));
  switch (schedule) {
    case Schedule::CONSTANT:
      return base_lr;
    case Schedule::INVERSE_SQRT:
      return static_cast<float>(base * std::sqrt(static_cast<double>(std::max<int64_t>(warmup, 1)) /
                                                 static_cast<double>(step)));
    case Schedule::COSINE:
    case Schedule::AUTO:
      break;
  }
  if (step >= total_steps) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total_steps - warmup);
  return cosine_decay(base, min_lr, progress);
}

float budget_lr(float base_lr, int64_t step, int64_t warmup, int64_t decay_start, int64_t total_steps, float min_lr) {
  const auto fail = [](const std::string& m) { throw std::invalid_argument("budget_lr: " + m); };
  if (step < 1) fail("step is 1-based, got " + std::to_string(step));
  if (warmup < 0) fail("warmup must be non-negative, got " + std::to_string(warmup));
  if (decay_start < warmup)
    fail("the decay starts after the warmup (got decay_start " + std::to_string(decay_start) + ", warmup " +
         std::to_string(warmup) + ")");
  const double base = base_lr;
  if (step <= warmup) return static_cast<float>(base * static_cast<double>(step) / static_cast<double>(warmup));
  if (total_steps == 0 || step <= decay_start) return base_lr;
  if (step >= total_steps) return min_lr;
  const double progress = static_cast<double>(step - decay_start) / static_cast<double>(total_steps - decay_start);
  return cosine_decay(base, min_lr, progress);
}

}  // namespace tfm::train
