// src/train/checkpoint.h — everything that moves during training, and its checkpoint in the run
// directory (tfm/train/trainer.h describes the files and the exact-resume argument). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfm/models/model.h"
#include "tfm/models/model_dir.h"
#include "tfm/optim.h"
#include "tfm/random.h"
#include "tfm/train/trainer.h"
#include "train/ema.h"

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
  std::string valid_text_hash;   // text data with a validation file: its hash ("" otherwise, and before it was kept)
  // The budget schedule (trainer.cc): the step count fixed to fit time budget `budget_seconds`, rank
  // 0's decision at step decay_start, where the learning rate starts its decay to min_lr at
  // budget_steps. 0: not fixed (no budget, or not measured yet). --max-steps on resume replaces
  // budget_steps and keeps decay_start.
  int64_t budget_steps = 0, decay_start = 0;
  double budget_seconds = 0;
  // The run stopped because its time budget was spent (not a fixed count): a resume has nothing to train, where a
  // run interrupted after its clock passed the budget still takes the step the uninterrupted run would.
  bool budget_ended = false;
  std::vector<EvalRow> history;
};

// Writes model.safetensors (the weights' average when there is one, else the weights),
// trainer_clock.json (the wall clock: State::elapsed and the history's tokens_per_sec and
// elapsed_seconds), then trainer_state.safetensors (the commit point: weights, optimizer state, the
// average ("ema.<key>") and its update count, generator and the rest of State, the same bytes for the
// same run whatever P or the thread count), metrics.csv and curves.svg (plot_curves_svg with `title`,
// `label_smoothing` and `language_model`); sets checkpoint_step. `average` (may be null) must be complete
// (gathered under mpirun).
void write_checkpoint(const std::string& dir, Model& model, const Optimizer& opt, const Generator& gen, State& st,
                      const std::string& title, const WeightAverage* average = nullptr, double label_smoothing = 0,
                      bool language_model = false);
// Restores all of that from DIR/trainer_state.safetensors; throws naming the file. A checkpoint
// written before the budget schedule or without an average has neither (an average is then refused:
// the run has none to continue). A state's budget fields are read when present.
void read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, Generator& gen, State& st,
                     WeightAverage* average = nullptr);

// Files a run writes besides the model directory's own.
inline constexpr const char* STATE_FILE = model_dir::TRAINER_STATE;
inline constexpr const char* METRICS_FILE = model_dir::METRICS;
inline constexpr const char* CURVES_FILE = model_dir::CURVES;
inline constexpr const char* CLOCK_FILE = model_dir::TRAINER_CLOCK;

// A fresh run into `out_dir` deletes the files a run writes there, so one that holds a run or model (weights, a
// trainer state, metrics or a best model) is refused unless the caller replaces it (--force). Throws
// std::invalid_argument naming the file found and the ways on:
//   "--out <dir> holds a run or model already (<file>): continue a run with --resume <dir>, train into another
//    --out, or give --force to delete it and start over" (--resume offered when the checkpoint is whole).
// A config.json beside none of them is the description of a run stopped before its first checkpoint: nothing to
// lose. The option layer checks it early; the trainer again under the directory's lock (a run that ended between
// the two is not overwritten).
void refuse_existing_run(const std::string& out_dir);

}  // namespace tfm::train
