// src/train/checkpoint.h — everything that moves during training, and its checkpoint in the run
// directory (tfm/train/trainer.h describes the files and the exact-resume argument). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfm/models/model.h"
#include "tfm/optim.h"
#include "tfm/random.h"
#include "tfm/train/trainer.h"

namespace tfm::train {

// Everything that changes while training and must be saved for an exact resume (besides the
// weights, the optimizer state and the generator).
struct State {
  int64_t step = 0;              // optimizer steps taken
  int64_t epoch = 0;             // 0-based epoch in progress
  int64_t batch = 0;             // next batch of that epoch's plan
  double loss_sum = 0;           // training loss since the last evaluation
  int64_t loss_count = 0;
  int64_t tokens = 0;            // target tokens since the last evaluation (throughput)
  int64_t skipped = 0;           // non-finite batches skipped
  double elapsed = 0;            // seconds over all sessions, at the last save
  int64_t checkpoint_step = -1;  // step of the last complete checkpoint
  std::string text_hash;         // text data: data::text_file_hash of the training text ("" otherwise)
  std::vector<EvalRow> history;
};

// Writes model.safetensors, trainer_clock.json (the wall clock: State::elapsed and the history's
// tokens_per_sec and elapsed_seconds), then trainer_state.safetensors (the commit point: weights,
// optimizer state, generator and the rest of State, the same bytes for the same run whatever P or
// the thread count), metrics.csv and curves.svg (titled `title`); sets checkpoint_step.
void write_checkpoint(const std::string& dir, Model& model, const Optimizer& opt, const Generator& gen, State& st,
                      const std::string& title);
// Restores all of that from DIR/trainer_state.safetensors; throws naming the file.
void read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, Generator& gen, State& st);

// Files a run writes besides the model directory's own.
inline constexpr const char* STATE_FILE = "trainer_state.safetensors";
inline constexpr const char* METRICS_FILE = "metrics.csv";
inline constexpr const char* CURVES_FILE = "curves.svg";
inline constexpr const char* CLOCK_FILE = "trainer_clock.json";

}  // namespace tfm::train
