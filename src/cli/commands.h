// src/cli/commands.h — the `tfm` subcommands. Each command file defines one register function that
// adds its subcommand to the app and sets a callback returning the process exit code.
// To add a command: write src/cli/<name>_cmd.cc with `void register_<name>(CLI::App&, Runner&)`,
// declare it here and call it in main.cc.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "tfm/enum_names.h"
#include "tfm/inference.h"
#include "tfm/models/model_dir.h"

namespace tfm::cli {

// The chosen subcommand's body; returns the exit code. Errors are thrown and turned into a
// one-line message by main.
using Runner = std::function<int()>;

void register_forward(CLI::App& app, Runner& run);
void register_train(CLI::App& app, Runner& run);
void register_eval(CLI::App& app, Runner& run);
void register_translate(CLI::App& app, Runner& run);
void register_generate(CLI::App& app, Runner& run);
void register_bench(CLI::App& app, Runner& run);
void register_import(CLI::App& app, Runner& run);
void register_export(CLI::App& app, Runner& run);
void register_quantize(CLI::App& app, Runner& run);

// Sets the OpenMP thread count from --threads (0 = leave OMP_NUM_THREADS / the default); throws for a
// count outside [0, tfm::train::kMaxThreads].
void apply_threads(int threads);

// Refuses an option value with a leading minus (CLI11 would wrap "-1" into an unsigned seed).
inline const CLI::Validator kNonNegative(
    [](std::string& s) { return !s.empty() && s[0] == '-' ? "must be a non-negative integer, got " + s : std::string(); },
    ">= 0");  // (ASCII: CLI11 aligns its help by bytes)

// Adds to every option of `app` and its subcommands whose type is INT or UINT a check that refuses a value
// beyond the 64-bit range ("--seed: 18446744073709551616 is out of range ..."): CLI11 2.1 reads 64-bit
// integers with strtoll/strtoull and keeps their saturated result without a word (narrower types it
// refuses itself). Called once, after every command is registered.
void refuse_out_of_range_integers(CLI::App& app);

inline constexpr const char* MAX_LEN_HELP =
    "longest output in target tokens (0 = 2·source tokens + 10; at most the model's max_len)";
// The one-line note on stderr after decoding when `truncated` of `outputs` predictions stopped at the
// length limit without an end token (nothing when none did).
void note_truncated(int64_t truncated, int64_t outputs, int64_t max_len, const TrainedModel& m);

// Flushes stdout and throws std::runtime_error ("stdout: write failed (No space left on device)") when
// it or an earlier write to it failed: a command printing its results (translate, eval, generate)
// must not report success over lost output. Called after each chunk of output and once at the end.
void check_stdout();

// Notes for stderr ("tfm: note: ..."), held until the command has checked its inputs: flush_notes() prints
// them, called by a command once its model is loaded and by main after a command succeeds. A command
// that fails prints its one error line only, and the held notes are dropped.
void queue_note(std::string note);
void flush_notes();

// --dtype's value as a Precision. For int8 on a CPU without int8 dot products, or bf16 without bf16 ones, it
// queues a note (queue_note: the matmuls take the portable loop or are emulated, same numbers, slower).
Precision parse_dtype(const std::string& dtype);
// The same without the note: a bad name fails before a model is loaded, naming --dtype.
Precision dtype_name(const std::string& dtype);
// --dtype of a command running a model directory: empty means the directory's own precision, int8
// for a quantized directory (tfm quantize), else f32.
Precision model_dtype(const std::string& dtype, const TrainedModel& m);
inline constexpr const char* MODEL_DTYPE_HELP =
    "matmul precision of Linear layers (default: int8 for a quantized directory, else f32; docs/int8.md)";
// --no-mmap of the decoding commands: how they load the model (WeightsLoad).
inline constexpr const char* NO_MMAP_HELP =
    "copy the weights into memory instead of mapping model.safetensors read-only (by default the run reads the "
    "file again for pages it gave back, so the file must not be overwritten in place while it runs)";
inline WeightsLoad weights_load(bool no_mmap) { return no_mmap ? WeightsLoad::COPY : WeightsLoad::MAP_READ_ONLY; }

// A closed set's names as --help shows an option's type: "{f32,bf16}".
template <typename E>
std::string choices_type() {
  return "{" + enum_choices<E>(",", ",") + "}";
}

}  // namespace tfm::cli
