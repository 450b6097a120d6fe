// src/cli/main.cc — the `tfm` command line: parse, dispatch, and turn exceptions into one clear
// line on stderr and a non-zero exit code. The library never prints or exits; only this file does.

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "tfm/autocast.h"
#include "tfm/message.h"
#include "tfm/threads.h"
#include "tfm/train/comm.h"

namespace tfm::cli {
void apply_threads(int threads) {
  check_threads(threads, "--threads");
  set_num_threads(threads);
}
namespace {
std::vector<std::string>& pending_notes() {
  static std::vector<std::string> notes;
  return notes;
}
}  // namespace
void queue_note(std::string note) { pending_notes().push_back(std::move(note)); }
void flush_notes() {
  for (const std::string& n : pending_notes()) std::fprintf(stderr, "tfm: note: %s\n", n.c_str());
  pending_notes().clear();
}
Precision dtype_name(const std::string& dtype) {
  try {
    return enum_from_name<Precision>(dtype);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--dtype: ") + e.what());
  }
}

Precision parse_dtype(const std::string& dtype) {
  const Precision p = dtype_name(dtype);
  if (p == Precision::INT8 && !int8_matmul_accelerated())
    queue_note(
        "no AVX2, AVX512-VNNI or AMX-INT8 on this CPU (or TFM_FORCE_SCALAR): int8 matmuls run on the portable "
        "loop (the same integer products; the float32 work around them may differ in the last bits; much "
        "slower)");
  if (p == Precision::BFLOAT16 && !bf16_matmul_accelerated())
    queue_note(
        "no AVX512-BF16 or AMX-BF16 on this CPU (or TFM_FORCE_SCALAR): the Linear layers' bf16 matmuls are "
        "emulated (the same numbers up to summation order, no faster than f32); training's attention products "
        "stay float32 (bfloat16 on a CPU with AVX512-BF16 where a head's scores pass 64 x 64)");
  return p;
}
Precision model_dtype(const std::string& dtype, const TrainedModel& m) {
  return parse_dtype(!dtype.empty() ? dtype : std::string(enum_name(m.default_precision())));
}

void refuse_out_of_range_integers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();  // "UINT", or "UINT:>= 0" with a check's description
    const std::string base = type.substr(0, type.find(':'));
    if (base != "INT" && base != "UINT") continue;
    const bool is_unsigned = base == "UINT";
    opt->check(CLI::Validator(
        [is_unsigned](std::string& s) -> std::string {
          // The conversion CLI11 makes (base 0: decimal, 0x hex, 0 octal), asked only whether it overflowed;
          // anything else (not a number, a negative unsigned) is left to CLI11 and the other checks.
          char* end = nullptr;
          errno = 0;
          if (is_unsigned) {
            (void)std::strtoull(s.c_str(), &end, 0);
          } else {
            (void)std::strtoll(s.c_str(), &end, 0);
          }
          if (s.empty() || end != s.c_str() + s.size() || errno != ERANGE) return {};
          return s + " is out of range (beyond " + (is_unsigned ? "an unsigned" : "a") + " 64-bit integer)";
        },
        ""));  // no description: --help stays as it was
  }
  // Option groups too; not tfm train's options, text that the library's option table parses and checks itself
  // (one message for the CLI and Python: "--max-steps must be an integer in range").
  for (CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() != "train") refuse_out_of_range_integers(*sub);
}

void check_stdout() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return;
  const int e = errno;
  std::clearerr(stdout);  // said once
  throw std::runtime_error(std::string("stdout: write failed") + (e ? std::string(" (") + std::strerror(e) + ")" : ""));
}

void note_truncated(int64_t truncated, int64_t outputs, int64_t max_len, const TrainedModel& m) {
  const std::string note = truncation_note(m, truncated, outputs, max_len);
  if (!note.empty()) std::fprintf(stderr, "tfm: note: %s\n", note.c_str());
}
}  // namespace tfm::cli

int main(int argc, char** argv) {
  CLI::App app{"tfm: PyTorch-exact Transformer models on the CPU"};
  app.set_version_flag("--version", std::string("tfm ") + TFM_VERSION);
  app.require_subcommand(1);
  tfm::cli::Runner run;
  tfm::cli::register_forward(app, run);
  tfm::cli::register_train(app, run);
  tfm::cli::register_eval(app, run);
  tfm::cli::register_translate(app, run);
  tfm::cli::register_generate(app, run);
  tfm::cli::register_bench(app, run);
  tfm::cli::register_import(app, run);
  tfm::cli::register_export(app, run);
  tfm::cli::register_quantize(app, run);
  tfm::cli::refuse_out_of_range_integers(app);
  // A usage error depends on the arguments alone, so every copy an mpirun job started finds it: the
  // copies other than rank 0 exit as rank 0 does, quietly (other errors may differ by process: each says its own).
  const auto quiet = [] { return tfm::train::Comm::launched_size() > 1 && tfm::train::Comm::launched_rank() != 0; };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    if (quiet()) return e.get_exit_code();
    // A usage error: one line, as every other error (CLI11's own exit code kept).
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {  // `tfm bogus`
      std::string commands;
      for (const CLI::App* c : app.get_subcommands({})) commands += (commands.empty() ? "" : ", ") + c->get_name();
      std::fprintf(stderr, "tfm: error: unknown command %s (the commands: %s)\n",
                   ("'" + tfm::one_line(argv[1]) + "'").c_str(), commands.c_str());
    } else {
      std::fprintf(stderr, "tfm: error: %s (tfm --help, tfm <command> --help)\n", tfm::one_line(e.what()).c_str());
    }
    return e.get_exit_code();
  }
  // Only tfm train runs across processes (docs/distributed.md). Any other command a launcher started
  // several copies of would run whole in each: each eval printing the same report, each generate the
  // same samples, each import writing the same files. Refused before it starts, said once as a usage
  // error is; every copy exits non-zero.
  if (const int launched = tfm::train::Comm::launched_size(); launched > 1 && !app.get_subcommands().empty()) {
    const std::string name = app.get_subcommands().front()->get_name();
    if (name != "train") {
      if (quiet()) return 1;
      std::fprintf(stderr,
                   "tfm: error: tfm %s runs in one process, but a launcher (mpirun, srun) started %d copies of it, "
                   "each of which would do the whole work and print its own output: run it without the launcher "
                   "(only tfm train runs across processes)\n",
                   name.c_str(), launched);
      return 1;
    }
  }
  try {
    const int code = run ? run() : 0;
    tfm::cli::check_stdout();
    tfm::cli::flush_notes();
    return code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tfm: error: out of memory: the sizes asked for need more memory than this machine has "
                         "(a smaller batch, sequence or model)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfm: error: %s\n", tfm::one_line(e.what()).c_str());
    return 1;
  }
}
