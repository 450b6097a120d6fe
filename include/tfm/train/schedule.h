// tfm/train/schedule.h — learning-rate schedules: a linear warmup, then the schedule's shape.
#pragma once

#include <cstdint>

#include "tfm/enum_names.h"

namespace tfm::train {

// The learning rate after the linear warmup. AUTO (a config value, resolved once per run by
// resolve_schedule): COSINE when the run's step count is known, else INVERSE_SQRT after a warmup,
// else CONSTANT.
enum class Schedule { AUTO, CONSTANT, INVERSE_SQRT, COSINE };

// AUTO → the concrete schedule for a run of total_steps (0 = unknown); others unchanged.
Schedule resolve_schedule(Schedule s, int64_t warmup, int64_t total_steps);

// Learning rate at step s (1-based): base_lr·s/warmup during the warmup, then CONSTANT (base_lr),
// INVERSE_SQRT (base_lr·√(max(warmup, 1)/s), continuous at the end of warmup) or COSINE
// (min_lr + (base_lr − min_lr)·½(1 + cos(π·(s − warmup)/(total − warmup))), min_lr from total_steps
// on; nanoGPT's decay to min_lr). min_lr is read by COSINE only. Throws std::invalid_argument for
// AUTO, a step below 1, a negative warmup, or COSINE with total ≤ warmup.
float scheduled_lr(Schedule schedule, float base_lr, int64_t step, int64_t warmup, int64_t total_steps,
                   float min_lr = 0.0f);

// The budget schedule of a run whose length is a time budget (TrainConfig::time_budget with COSINE or
// AUTO; src/train/trainer.cc fits total_steps to the budget once, at step decay_start): at step s
// (1-based) base_lr·s/warmup during the warmup, then base_lr while the run measures its step rate
// (s ≤ decay_start, and every step while total_steps is 0: not fixed yet), then the cosine from base_lr
// at decay_start to min_lr at total_steps, min_lr + (base_lr − min_lr)·½(1 + cos(π·(s − decay_start) /
// (total_steps − decay_start))), and min_lr from total_steps on. Continuous at decay_start. Throws
// std::invalid_argument for a step below 1, a negative warmup, or decay_start < warmup.
float budget_lr(float base_lr, int64_t step, int64_t warmup, int64_t decay_start, int64_t total_steps,
                float min_lr = 0.0f);

}  // namespace tfm::train

namespace tfm {
template <>
struct EnumNames<train::Schedule> {
  static constexpr const char* noun = "schedule";
  static constexpr std::array<std::pair<train::Schedule, std::string_view>, 4> names{
      {{train::Schedule::AUTO, "auto"},
       {train::Schedule::CONSTANT, "constant"},
       {train::Schedule::INVERSE_SQRT, "inverse_sqrt"},
       {train::Schedule::COSINE, "cosine"}}};
};
}  // namespace tfm
