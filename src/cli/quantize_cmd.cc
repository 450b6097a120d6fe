// src/cli/quantize_cmd.cc — `tfm quantize`: write the int8 copy of a trained model directory
// (tfm::quantize_model_dir, tfm/models/quantize.h) and say what it wrote. SIGINT/SIGTERM stop it with
// nothing written (its staging directory deleted) and exit status 128 + the signal, as `tfm train` does.
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "stop_signal.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/quantize.h"

namespace tfm::cli {
void register_quantize(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("quantize", "Write an int8 copy of a trained model directory (for inference)");
  cmd->footer(
      "Example:\n  tfm quantize --model runs/mt --out runs/mt-int8 && tfm translate --model runs/mt-int8 < src.txt\n"
      "Every matrix (Linear weights, embeddings, output head) is stored as int8 with one float32 scale per\n"
      "row; biases and norms stay float32. The copy runs in int8 by default (--dtype f32 or bf16 runs its\n"
      "dequantized weights); it cannot be trained from. Ctrl-C (SIGINT) or SIGTERM stops it with nothing\n"
      "written (exit status 130 / 143). docs/int8.md.");
  struct Opts {
    std::string model, out;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "trained model directory")->required();
  cmd->add_option("--out", o->out, "directory to write (must not exist, unless --force)")->required();
  cmd->add_flag("--force", o->force,
                "replace an existing --out holding a model directory (a training run's too); one holding other "
                "files is refused, so that nothing but a model's files is deleted");
  cmd->callback([o, &run] {
    run = [o] {
      install_stop_handlers();
      if (!quantize_model_dir(o->model, o->out, o->force, [] { return stop_signal() != 0; })) {
        const int sig = stop_signal();
        std::fprintf(stderr, "%s: %s not written\n", sig == SIGTERM ? "terminated (SIGTERM)" : "interrupted (SIGINT)",
                     o->out.c_str());
        return 128 + sig;
      }
      const auto bytes = [](const std::string& dir) {
        uintmax_t n = 0;
        for (const auto& e : std::filesystem::directory_iterator(dir))
          if (e.is_regular_file()) n += e.file_size();
        return n;
      };
      const std::string in_model = model_dir::path(o->model, model_dir::MODEL),
                        out_model = model_dir::path(o->out, model_dir::MODEL);
      std::printf("wrote %s: %s %.1f MB (was %.1f MB); directory %.1f MB (was %.1f MB)\n", o->out.c_str(),
                  model_dir::MODEL, std::filesystem::file_size(out_model) / 1e6,
                  std::filesystem::file_size(in_model) / 1e6, bytes(o->out) / 1e6, bytes(o->model) / 1e6);
      return 0;
    };
  });
}

}  // namespace tfm::cli
