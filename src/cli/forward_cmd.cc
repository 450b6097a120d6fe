// src/cli/forward_cmd.cc — `tfm forward`: the conformance contract (include/tfm/models/forward.h) on files:
// load the module, read the inputs, run, write the outputs.
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "commands.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/forward.h"
#include "tfm/threads.h"

namespace tfm::cli {

void register_forward(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("forward", "Run a module exported from PyTorch on given inputs (and its backward)");
  cmd->footer(
      "Example:\n  tfm forward --config enc.json --weights enc.safetensors --inputs in.safetensors "
      "--output out.safetensors\n"
      "If the inputs hold 'grad_output', gradients grad.<key> are written too.\n"
      "--dtype bf16 runs the Linear layers' matmuls in bfloat16, and with a 'grad_output' trains as tfm train\n"
      "--dtype bf16 does, attention's products included where the CPU has AVX512-BF16 (docs/bf16.md);\n"
      "--dtype int8 in int8 with per-row scales (docs/int8.md), forward only (a 'grad_output' input is refused).");
  struct Opts {
    std::string config, weights, inputs, output, dtype{enum_name(Precision::FLOAT32)};
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "module config JSON ({\"module\": NAME, ...})")->required();
  cmd->add_option("--weights", o->weights, "state_dict as safetensors")->required();
  cmd->add_option("--inputs", o->inputs, "forward arguments as safetensors")->required();
  cmd->add_option("--output", o->output, "where to write output (and grad.*)")->required();
  cmd->add_option("--threads", o->threads, std::string("threads (default ") + tfm::kThreadsZero + ")");
  cmd->add_option("--dtype", o->dtype, "matmul precision: f32, bf16 (the Linear layers'; with a grad_output, as tfm train --dtype bf16), int8")
      ->type_name(choices_type<Precision>())
      ->capture_default_str();
  cmd->callback([o, &run] {
    run = [o] {
      apply_threads(o->threads);
      // The output replaces its file: never one the command reads.
      for (const auto& [flag, in] : {std::pair<const char*, const std::string*>{"--config", &o->config},
                                     {"--weights", &o->weights},
                                     {"--inputs", &o->inputs}}) {
        std::error_code ec;
        if (std::filesystem::equivalent(o->output, *in, ec))
          throw std::invalid_argument("--output " + o->output + " is the " + flag +
                                      " file: writing the output would replace it (choose another --output)");
      }
      const Precision precision = parse_dtype(o->dtype);
      LoadedModule module = load_module(o->config, o->weights, precision);
      const NamedTensors inputs = read_forward_inputs(o->inputs);
      io::save_safetensors(o->output, run_forward(module, inputs, o->inputs));
      return 0;
    };
  });
}

}  // namespace tfm::cli
