// src/cli/main.cc — the `tfm` command line: parse, dispatch, and turn exceptions into one clear
// line on stderr and a non-zero exit code. The library never prints or exits; only this file does.

#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "commands.h"
#include "tfm/autocast.h"
#include "tfm/threads.h"

namespace tfm::cli {
void apply_threads(int threads) {
  check_threads(threads, "--threads");
  set_num_threads(threads);
}
Precision parse_dtype(const std::string& dtype) {
  const Precision p = enum_from_name<Precision>(dtype);
  if (p == Precision::INT8 && !int8_matmul_accelerated())
    std::fprintf(stderr, "tfm: note: no AVX512-VNNI or AMX-INT8 on this CPU (or TFM_FORCE_SCALAR): int8 matmuls "
                         "run on the portable loop (the same numbers, much slower)\n");
  if (p == Precision::BFLOAT16 && !bf16_matmul_accelerated())
    std::fprintf(stderr, "tfm: note: no AVX512-BF16 or AMX-BF16 on this CPU (or TFM_FORCE_SCALAR): bf16 matmuls are "
                         "emulated (the same numbers up to summation order, slower than f32)\n");
  return p;
}
Precision model_dtype(const std::string& dtype, const TrainedModel& m) {
  return parse_dtype(!dtype.empty() ? dtype : std::string(enum_name(m.default_precision())));
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A usage error: one line, as every other error (CLI11's own exit code kept).
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {  // `tfm bogus`
      std::string commands;
      for (const CLI::App* c : app.get_subcommands({})) commands += (commands.empty() ? "" : ", ") + c->get_name();
      std::fprintf(stderr, "tfm: error: unknown command '%s' (the commands: %s)\n", argv[1], commands.c_str());
    } else {
      std::fprintf(stderr, "tfm: error: %s (tfm --help, tfm <command> --help)\n", e.what());
    }
    return e.get_exit_code();
  }
  try {
    return run ? run() : 0;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tfm: error: out of memory: the sizes asked for need more memory than this machine has "
                         "(a smaller batch, sequence or model)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
    return 1;
  }
}
