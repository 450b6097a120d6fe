// src/cli/forward_cmd.cc — `tfm forward`: the conformance contract (see include/tfm/forward.h).
#include <stdexcept>

#include "cli/commands.h"
#include "io/file_util.h"
#include "quote.h"
#include "tfm/forward.h"
#include "tfm/io/safetensors.h"

namespace tfm::cli {
namespace {

NamedTensors to_named(const io::SafeTensorsFile& f, bool inputs) {
  NamedTensors out;
  for (auto& [name, lt] : f.tensors) {
    if (inputs) {
      const bool mask = name.find("mask") != std::string::npos;
      const bool causal = name.find("is_causal") != std::string::npos;
      if (causal && lt.dtype != "BOOL")
        throw std::runtime_error(f.path + ": tensor " + quote_name(name) + " must be BOOL, got " + lt.dtype);
      if (mask && lt.dtype != "BOOL" && lt.dtype != "F32")
        throw std::runtime_error(f.path + ": tensor " + quote_name(name) + " must be BOOL or F32, got " + lt.dtype);
      if (!mask && !causal && lt.dtype != "F32")
        throw std::runtime_error(f.path + ": tensor " + quote_name(name) + " must be F32, got " + lt.dtype);
    } else if (lt.dtype != "F32" && lt.dtype != "F16" && lt.dtype != "BF16" && lt.dtype != "F64") {
      throw std::runtime_error(f.path + ": tensor " + quote_name(name) + " must be floating point, got " + lt.dtype);
    }
    out[name] = lt.tensor;
  }
  return out;
}

}  // namespace

void register_forward(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("forward", "Run a module exported from PyTorch on given inputs (and its backward)");
  cmd->footer(
      "Example:\n  tfm forward --config enc.json --weights enc.safetensors --inputs in.safetensors "
      "--output out.safetensors\n"
      "If the inputs hold 'grad_output', gradients grad.<key> are written too.\n"
      "--dtype bf16 runs the Linear layers' matmuls in bfloat16 (forward only; see docs/bf16.md).");
  struct Opts {
    std::string config, weights, inputs, output, dtype = "f32";
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "module config JSON ({\"module\": NAME, ...})")->required();
  cmd->add_option("--weights", o->weights, "state_dict as safetensors")->required();
  cmd->add_option("--inputs", o->inputs, "forward arguments as safetensors")->required();
  cmd->add_option("--output", o->output, "where to write output (and grad.*)")->required();
  cmd->add_option("--threads", o->threads, "threads (default: OMP_NUM_THREADS or all cores)");
  cmd->add_option("--dtype", o->dtype, "matmul precision of Linear layers: f32 or bf16")->capture_default_str();
  cmd->callback([o, &run] {
    run = [o] {
      apply_threads(o->threads);
      const Precision precision = parse_precision(o->dtype);
      const std::string config = io::read_file(o->config);
      std::unique_ptr<ConformanceModule> probe;
      try {
        probe = build_module(config);
      } catch (const std::exception& e) {
        throw std::runtime_error(o->config + ": " + e.what());
      }
      // Zero-copy: load_state_dict copies the weights into the module's parameters straight from
      // the mapping, skipping an intermediate owned copy of the whole file; nothing reads the
      // mapping after that (see io::LoadOptions for the hazard, which ends there).
      auto weights = io::load_safetensors(o->weights, io::LoadOptions{.zero_copy = true});
      auto inputs = io::load_safetensors(o->inputs);
      NamedTensors result;
      try {
        result = run_forward(config, to_named(weights, false), to_named(inputs, true), o->weights, precision);
      } catch (const std::invalid_argument& e) {
        std::string msg = e.what();
        if (msg.rfind("inputs:", 0) == 0) msg = o->inputs + ": " + msg.substr(8);
        throw std::runtime_error(msg);
      }
      std::vector<std::pair<std::string, Tensor>> list(result.begin(), result.end());
      io::save_safetensors(o->output, list);
      return 0;
    };
  });
}

}  // namespace tfm::cli
