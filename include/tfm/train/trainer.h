// tfm/train/trainer.h — the training loop as a library: configuration, run with a progress
// callback, checkpoints that resume exactly, and loading a trained model directory for use.
//
// The library never prints: everything a user should see arrives through the ProgressFn, and
// failures throw (DataError for input files, TrainingDiverged for a non-finite loss, std::runtime_error
// / std::invalid_argument otherwise).
//
// Output directory (TrainConfig::out_dir), every file written atomically (temporary file + rename):
//   config.json               {"format": "tfm-train", "version": 1, "model": ModelConfig, "train":
//                              TrainConfig, "vocab": {...}} — written before the first step
//   src_vocab.txt, tgt_vocab.txt   one token per line, line i = id i
//   model.safetensors         the model's state_dict (PyTorch keys), at every checkpoint
//   trainer_state.safetensors the commit point of a checkpoint, written last and alone sufficient
//                              to resume: "model.<key>" weights, "optim.<key>.<slot>" optimizer state
//                              and in its metadata the step, data position (epoch, batch), RNG state,
//                              optimizer step count, loss accumulators and the metrics history.
//                              A kill at any moment leaves the previous one intact.
//   metrics.csv, curves.svg   one row / point per evaluation
//
// Exact resume: the data plan of an epoch is a pure function of (seed, epoch), dropout draws come
// from the counter-based default generator whose (seed, offset) is saved, and the optimizer state
// is saved bit for bit; so a run interrupted at any step and resumed produces the same weights as
// the uninterrupted one. Same seed, same numbers for any thread count (the kernels' contract).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/vocab.h"
#include "tfm/models/seq2seq.h"
#include "tfm/train/metrics.h"

namespace tfm::train {

struct TrainConfig {
  // ---- data: a built-in task, or a pair of TSV files ----
  std::string task;                         // "reverse" | "copy" | "sort", or empty
  std::string train_path, valid_path;       // TSV files when task is empty
  std::string src_tokens = "char", tgt_tokens = "char";  // TSV tokenization: "char" | "space"
  bool strict = false;                      // a bad TSV line is an error instead of skipped
  int64_t max_tokens = 256;                 // longer TSV lines are over-long
  int64_t task_train_size = 20000;          // task examples per epoch (fresh ones every epoch)
  int64_t task_valid_size = 1000;           // task validation sequences

  // ---- model (vocab sizes and special ids are filled in from the data) ----
  ModelConfig model;

  // ---- length of the run: whichever limit is reached first; none set → epochs = 10 ----
  int64_t epochs = 0, max_steps = 0;
  double time_budget = 0;                   // seconds of training (evaluation included), 0 = none

  // ---- optimisation ----
  std::string optimizer = "adam";           // "adam" | "adamw"
  float lr = 1e-3f;
  int64_t warmup = 0;                       // linear warmup steps
  std::string schedule = "auto";            // "constant" | "inverse_sqrt" | "cosine" | "auto"
                                            // (auto: cosine when the step count is known, else inverse_sqrt)
  float weight_decay = 0.0f, label_smoothing = 0.0f;
  float clip_norm = 0.0f;                   // 0 = no clipping
  data::BatchSettings batch;
  uint64_t seed = 0;
  int64_t eval_every = 0;                   // steps between evaluations; 0 = each epoch (or 10 per run)
  bool skip_nonfinite = false;              // skip batches with a non-finite loss or gradient

  std::string out_dir;

  std::string to_json() const;              // pretty JSON, every field
  static TrainConfig from_json(const std::string& text);  // missing keys keep their defaults
  void validate() const;                    // throws std::invalid_argument naming the bad field
};

// One row of metrics.csv.
struct EvalRow {
  int64_t step = 0, epoch = 0;
  double lr = 0, train_loss = 0, valid_loss = 0;   // train_loss: mean over the steps since the last row
  double valid_token_accuracy = 0, valid_sequence_accuracy = 0;  // teacher-forced
  double tokens_per_sec = 0, elapsed_seconds = 0;
};
std::string metrics_csv(const std::vector<EvalRow>& rows);  // header + one line per row
// curves.svg: loss (train, valid) and accuracy (token, sequence) against steps, two panels.
std::string plot_curves_svg(const std::vector<EvalRow>& rows, const std::string& title);

struct ProgressEvent {
  enum Kind { STEP, EVAL, CHECKPOINT, NOTE } kind = STEP;
  int64_t step = 0, total_steps = 0;        // total 0 = unknown
  int64_t epoch = 0;                        // 1-based epoch being trained
  double loss = 0;                          // running mean training loss since the last evaluation
  double lr = 0, tokens_per_sec = 0, elapsed_seconds = 0;
  double eta_seconds = -1;                  // −1 = unknown
  bool has_eval = false;                    // `last_eval` holds a row
  EvalRow last_eval;
  std::string message;                      // NOTE / CHECKPOINT: a sentence for the user
};
using ProgressFn = std::function<void(const ProgressEvent&)>;

struct TrainHooks {
  ProgressFn progress;                      // may be empty
  // Polled after every step; true = stop now, write a checkpoint and return interrupted.
  std::function<bool(int64_t step)> should_stop;
};

struct TrainResult {
  int64_t steps = 0, epochs_completed = 0;
  bool interrupted = false;                 // stopped by should_stop (checkpoint written)
  std::string stop_reason;                  // "max-steps" | "epochs" | "time-budget" | "interrupted"
  int64_t skipped_nonfinite = 0;
  std::vector<EvalRow> history;
  Metrics final_metrics;                    // decoded (greedy) on the validation set; empty if interrupted
  double seconds = 0;
};

// A non-finite loss (or gradient norm) without skip_nonfinite. what() names the step, the last
// good checkpoint and the usual fixes.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Trains from scratch (resume = false) or continues the checkpoint in config.out_dir (resume = true;
// `config` should then come from load_train_config, possibly with a longer run).
TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks = {}, bool resume = false);
// The TrainConfig saved in DIR/config.json.
TrainConfig load_train_config(const std::string& dir);

// A trained model directory, ready for decoding.
struct LoadedModel {
  TrainConfig train;
  std::unique_ptr<Seq2SeqModel> model;  // in eval mode
  data::Vocab src_vocab, tgt_vocab;
  data::Tokenization src_tokens = data::Tokenization::SPACE, tgt_tokens = data::Tokenization::SPACE;
};
LoadedModel load_model_dir(const std::string& dir);

// Source texts → predicted target texts (greedy or beam), in order, `batch_size` at a time.
// Unknown source tokens become <unk> (or throw, for a vocabulary without one, naming the line).
std::vector<std::string> translate_lines(const LoadedModel& m, const std::vector<std::string>& sources, int beam,
                                         int64_t batch_size);

// Decodes every (source, references) example and accumulates the metrics.
Metrics evaluate_examples(const LoadedModel& m, const std::vector<Tokens>& sources,
                          const std::vector<std::vector<Tokens>>& references, int beam, int64_t batch_size);

}  // namespace tfm::train
