// tfm/train/options.h — the options of a training run, defined once: `tfm train` builds its parser
// from train_options() (a binding to another language builds its keywords from the same table: the
// names with '_' for '-'), and hands what was given to resolve_train_options, the one place where the
// settings of a run are decided (what was given, on a preset or a task's preset, or the run being
// resumed).
//
// An option sets config fields by key (TrainConfig's or its ModelConfig's, tfm/train/config.h); its
// type, choices and default follow from the field it sets, so adding an option is one row in
// src/train/options.cc after the field exists. A few options are not config fields (RunSettings): how
// a run starts (--resume, --preset) and how this process runs it (--threads, --comm-timeout, --bucket-mb).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tfm/train/config.h"

namespace tfm::train {

// The value an option takes, as --help shows it.
enum class OptionType { FLAG, INT, UINT, FLOAT, TEXT, CHOICE };  // UINT: an unsigned field (--seed)

struct TrainOption {
  std::string name;               // "d-model": --d-model on the command line, d_model in Python
  std::vector<std::string> keys;  // the config fields it sets; empty: a RunSettings member
  std::string help;
  std::string group;              // the --help section: "data", "model", "length", "optimisation", "run"
  OptionType type = OptionType::TEXT;
  std::vector<std::string> choices;  // CHOICE: the names
  std::string default_text;          // as a user reads it ("0.001", "on", "relu"); "" when unset
  std::vector<std::string> needs, excludes;  // other options' names (checked by resolve_train_options)
};

// Every option of `tfm train`, in --help order.
const std::vector<TrainOption>& train_options();
const TrainOption& train_option(const std::string& name);  // throws std::invalid_argument "unknown option --x"

// How this process runs the training: not part of the run's config (a resumed run may change them).
struct RunSettings {
  int threads = 0;             // 0: every core (OMP_NUM_THREADS or the default)
  double comm_timeout = 600;   // seconds a process waits for the others under mpirun
  double bucket_mb = 4;        // MiB of gradient per message under mpirun (speed only)
  bool force = false;          // a fresh run may replace the run in --out (the trainer deletes its files)
};

enum class StartMode { FRESH, RESUME, INIT_FROM };

struct TrainSetup {
  StartMode mode = StartMode::FRESH;
  TrainConfig config;          // RESUME: the saved config, with a new length when one was given
  RunSettings run;
};

// The options given, by name (without dashes), each with its text (a flag's "true" or "false").
using GivenOptions = std::vector<std::pair<std::string, std::string>>;

// The settings of the run these options ask for. The rule, in order:
//   - every name must be an option, each given once; an option's `needs` and `excludes` hold;
//   - --resume DIR continues DIR's saved run: only the length (--epochs, --max-steps, --time-budget,
//     replacing the saved length together) and the run settings may be given with it;
//   - otherwise --out and data (--task, --train/--valid or --text) are required; the config starts
//     from the preset (--preset), the task's preset (task_preset with the given --arch), or
//     TrainConfig{} (text data without --arch: arch decoder), and every option given is set on it, in
//     train_options() order (so --encoder-layers overrides --layers);
//   - --init-from DIR refuses the options that would set what DIR fixes (fixed_by_init_from);
//   - a layer-count option for a stack the model family does not have is refused by name.
// Throws std::invalid_argument naming the option.
TrainSetup resolve_train_options(const GivenOptions& given);

// resolve_train_options on a command line's words after `tfm train` ("--d-model", "64", "--no-bias",
// ...): what a C++ program runs to train exactly what that `tfm train` command line trains.
GivenOptions parse_train_args(const std::vector<std::string>& args);

}  // namespace tfm::train

namespace tfm {
template <>
struct EnumNames<train::StartMode> {
  static constexpr const char* noun = "start mode";
  static constexpr std::array<std::pair<train::StartMode, std::string_view>, 3> names{
      {{train::StartMode::FRESH, "fresh"}, {train::StartMode::RESUME, "resume"}, {train::StartMode::INIT_FROM, "init-from"}}};
};
}  // namespace tfm
