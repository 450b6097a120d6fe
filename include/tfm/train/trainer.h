// tfm/train/trainer.h — the training loop as a library: run a TrainConfig (tfm/train/config.h) with a
// progress callback, checkpoints that resume exactly. The trained directory is a model directory
// (tfm/models/model_dir.h): load it for decoding there, evaluate it with tfm/train/evaluate.h.
//
// The loop's parts live in src/train/: the data (dataset.cc), one optimisation step (step.cc),
// evaluation (evaluate.cc), checkpoints (checkpoint.cc), and the loop driving them (trainer.cc).
//
// The library never prints: everything a user should see arrives through the ProgressFn, and
// failures throw (DataError for input files, TrainingDiverged for a non-finite loss, std::runtime_error
// / std::invalid_argument otherwise).
//
// Output directory (TrainConfig::out_dir), every file written atomically (temporary file + rename):
//   config.json               {"format": "tfm-train", "version": 1, "model": ModelConfig, "train":
//                              TrainConfig, "vocab": {...}} — written by a new run, with the vocabularies,
//                              just before its first checkpoint (earlier only with keep_best, when an
//                              --init-from run's step-0 evaluation writes BEST_DIR); a run that fails
//                              before then leaves none of them
//   src_vocab.txt, tgt_vocab.txt   one token per line, line i + 1 = id i; src_vocab.json,
//                              tgt_vocab.json instead (JSON arrays) for text data and whenever a
//                              token holds a newline (tfm/models/model_dir.h)
//   model.safetensors         the model's state_dict (PyTorch keys), at every checkpoint; with --ema
//                              the weights' average (src/train/ema.h), which evaluation uses too
//   trainer_state.safetensors the commit point of a checkpoint, written last and alone sufficient
//                              to resume: "model.<key>" weights, "optim.<key>.<slot>" optimizer state,
//                              with --ema "ema.<key>" the weights' average, and in its metadata the
//                              step, data position (epoch, batch), RNG state, optimizer step count,
//                              loss accumulators, the metrics history, for text data the training
//                              text's hash (a resume on another text is refused), the budget
//                              schedule's fixed step count ("budget_steps", "decay_start",
//                              "budget_seconds") once fixed, and with --ema "ema_updates".
//                              A kill at any moment leaves the previous one intact. Nothing in it
//                              depends on the clock but the budget's step count (rank 0's decision,
//                              taken once), so the same run gives the same bytes.
//   trainer_clock.json        the wall clock, written just before: {"elapsed": seconds over all
//                              sessions up to this checkpoint (what --time-budget counts, the final
//                              decoding aside), "history": [{"step", "tokens_per_sec",
//                              "elapsed_seconds"} per metrics row]}
//   metrics.csv, curves.svg   one row / point per evaluation (with TrainConfig::init_from, the first at
//                              step 0: the starting model's)
//
// Data parallelism (TrainConfig::grad_shards G > 1, or MPI): each step's batch is cut into G parts by
// rows; their gradients, each normalised by the whole batch's target-token count, are added in part
// order (src/train/step.h describes the fold and the exchange between processes), so the weights,
// optimizer state, losses and metrics are bitwise the same for any process count P dividing G. One
// step serves every case: with G = 1 in one process it is the plain step (the gradient stays in the
// grads, dropout draws from the run's generator).
//
// Exact resume: the data plan of an epoch is a pure function of (seed, epoch) (text data: sequential
// windows of (epoch, batch), or random windows drawn from the run's generator), dropout draws come
// from the run's counter-based generator whose (seed, offset) is saved, and the optimizer state
// is saved bit for bit; so a run interrupted at any step and resumed produces the same weights as
// the uninterrupted one. Same seed, same numbers for any thread count (the kernels' contract). A run on a
// time budget fixes its step count once (src/train/trainer.cc, "the budget schedule") and saves it, and
// --ema's average is saved with its update count, so a run resumed after the count was fixed replays
// the uninterrupted one bit for bit too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tfm/enum_names.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"
#include "tfm/train/metrics.h"

namespace tfm::train {

// One row of metrics.csv.
struct EvalRow {
  int64_t step = 0, epoch = 0;
  // train_loss: mean over the steps since the last row (0 in the step-0 row of a run with init_from,
  // which scores the starting model before any step; curves.svg draws no training point there)
  double lr = 0, train_loss = 0, valid_loss = 0;
  double valid_token_accuracy = 0, valid_sequence_accuracy = 0;  // teacher-forced
  // tokens_per_sec: training tokens over the wall time of the steps since the last row, evaluations left
  // out; elapsed_seconds: the run's clock when the row is written (evaluations included)
  double tokens_per_sec = 0, elapsed_seconds = 0;
};
std::string metrics_csv(const std::vector<EvalRow>& rows);  // header + one line per row
// The best of rows: the index of the first with the lowest validation loss (NaN rows never), -1 for none.
// TrainConfig::keep_best writes the model of this row, patience counts the rows after it.
int64_t best_row(const std::vector<EvalRow>& rows);
// The model directory TrainConfig::keep_best writes inside the run's directory.
inline constexpr const char* BEST_DIR = model_dir::BEST;
// curves.svg: loss (train, valid) and accuracy (token, sequence) against steps, two panels. label_smoothing > 0:
// the training curve is named with it (its loss has the smoothing term, the validation loss not); language_model:
// no sequence accuracy (a window is not a sequence to get right).
std::string plot_curves_svg(const std::vector<EvalRow>& rows, const std::string& title, double label_smoothing = 0,
                            bool language_model = false);

struct ProgressEvent {
  enum class Kind { STEP, EVAL, CHECKPOINT, NOTE } kind = Kind::STEP;
  int64_t step = 0, total_steps = 0;        // total 0 = unknown
  int64_t epoch = 0;                        // 1-based epoch being trained
  double loss = 0;                          // running mean training loss since the last evaluation
  double lr = 0, tokens_per_sec = 0, elapsed_seconds = 0;
  double eta_seconds = -1;                  // −1 = unknown
  bool has_eval = false;                    // `last_eval` holds a row
  EvalRow last_eval;
  std::string message;                      // NOTE / CHECKPOINT: a sentence for the user (the fields above
                                            // then say where the run stands: step, total, epoch, lr, time)
  int processes = 1;                        // processes training together (tokens_per_sec is theirs)
};
using ProgressFn = std::function<void(const ProgressEvent&)>;

struct TrainHooks {
  ProgressFn progress;                      // may be empty
  // Polled after every step and before every batch the run decodes (the final decoding; with a time budget, the
  // batch timed when the window opens); true = stop now, write a checkpoint (after the final one: it is written
  // already) and return interrupted.
  std::function<bool(int64_t step)> should_stop;
  // The processes training together (tfm/train/comm.h); null: this process alone. Under MPI every
  // rank runs run_training with the same config and its Comm::world(): every rank reads the data and
  // builds only the rows of its parts of each batch (padded to the whole batch's lengths); periodic
  // validation is split across the ranks and gathered; rank 0 alone writes files, calls `progress` and
  // decodes the final metrics (the others' TrainResult has the steps, not the figures). should_stop is
  // polled on
  // every rank and the run stops when any rank asks; a time budget follows rank 0's clock.
  Comm* comm = nullptr;
  // The clock --time-budget is measured on: seconds since any fixed origin, given the optimizer steps
  // taken so far (a test clock may tick per step, which makes a budget run's fitted step count
  // deterministic). Empty: std::chrono::steady_clock, the steps unused. Under MPI rank 0's decides.
  std::function<double(int64_t steps)> clock;
  // A fresh run into a config.out_dir that holds a run or model (weights, a trainer state, metrics or a best
  // model): true replaces it (its files deleted with the first checkpoint), false refuses it, checked once the
  // directory's lock is held, so that a run that ended after a front end's own check is not overwritten
  // (std::invalid_argument "--out <dir> holds a run or model already (...)"). The front ends pass --force.
  bool replace_run = true;
};

// Why a run ended.
enum class StopReason { EPOCHS, MAX_STEPS, TIME_BUDGET, INTERRUPTED, EARLY_STOPPING };

struct TrainResult {
  int64_t steps = 0, epochs_completed = 0;
  bool interrupted = false;                 // stopped by should_stop (checkpoint written)
  StopReason stop_reason = StopReason::EPOCHS;
  int64_t skipped_nonfinite = 0;
  std::vector<EvalRow> history;
  // Decoded (greedy) on the validation set; empty if interrupted. With a time budget, the decoding ends when the
  // budget is spent (after its first batch at least; a NOTE then says how many sources it decoded, the shortest):
  // the figures are then those sources'.
  Metrics final_metrics;
  double seconds = 0;                       // over all sessions, the final decoded evaluation included
  // What --time-budget counts: seconds of training and its evaluations, the final decoding included, against the
  // budget `time_budget` (0: none). The budget schedule sets time aside for the final decoding (estimated from
  // one batch decoded when its window opens).
  double train_seconds = 0, time_budget = 0;
  int64_t budget_steps = 0;                 // the step count fitted to the budget (0: not fixed)
};

// A non-finite loss (or gradient norm) without skip_nonfinite. what() names the step, the last
// good checkpoint and the usual fixes.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Trains from scratch (resume = false) or continues the checkpoint in config.out_dir (resume = true;
// `config` should then come from load_train_config, possibly with a longer run). Touches no
// process-wide state: initialisation and dropout draw from the run's own generator, seeded by
// config.seed and saved in its checkpoints.
TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks = {}, bool resume = false);
// The TrainConfig saved in DIR/config.json.
TrainConfig load_train_config(const std::string& dir);

}  // namespace tfm::train

namespace tfm {
template <>
struct EnumNames<train::StopReason> {
  static constexpr const char* noun = "stop reason";
  static constexpr std::array<std::pair<train::StopReason, std::string_view>, 5> names{
      {{train::StopReason::EPOCHS, "epochs"},
       {train::StopReason::MAX_STEPS, "max-steps"},
       {train::StopReason::TIME_BUDGET, "time-budget"},
       {train::StopReason::INTERRUPTED, "interrupted"},
       {train::StopReason::EARLY_STOPPING, "early-stopping"}}};
};
}  // namespace tfm
