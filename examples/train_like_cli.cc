// examples/train_like_cli.cc — a C++ program that trains exactly what a given `tfm train` command line
// trains: the same options, resolved by the same library function, so the same config and the same
// weights byte for byte.
//
//   train_like_cli <the words after 'tfm train'>
//   e.g. train_like_cli --task reverse --arch encoder --max-steps 20 --out runs/x --threads 1
//        train_like_cli --preset nanogpt-baby --text input.txt --max-steps 200 --out runs/baby
//        train_like_cli --resume runs/x --max-steps 40
//
// Build and run (from a configured build directory; the examples are built by default):
//   cmake --build . --target example_train_like_cli && examples/train_like_cli --task reverse ...
// CTest runs it as example.train_like_cli; tests/cli/train_like_cli_test.cc checks that it and
// `tfm train` given the same words write the same model.safetensors and trainer_state.safetensors.
//
// What it shows: `tfm train` has no settings of its own. Its options are a table in the library
// (tfm/train/options.h); a program takes the same steps the CLI takes:
//   1. tfm::train::parse_train_args turns the words into the options given ("--d-model 64",
//      "--x=v", "--no-bias"), and resolve_train_options decides the run: a fresh run (the preset, or
//      the task's preset, with every option given set on it), a fine-tune (--init-from) or a resumed
//      one (--resume DIR: the saved config, with a new length when one is given);
//   2. the run settings are this process's: --threads goes to OpenMP (the numbers do not depend on
//      it; the kernels' contract);
//   3. tfm::train::run_training runs the config with a progress callback (the library never prints),
//      continuing the checkpoint when the mode is RESUME.
// What it leaves out is the CLI's frontend only: the --help text, MPI start-up (mpirun) and Ctrl-C →
// checkpoint handling. Errors — an unknown option, a missing value, a refused combination, a bad
// data file — print `train_like_cli: error: <what>` and exit 1.
#include <tfm/threads.h>
#include <tfm/train/options.h>
#include <tfm/train/trainer.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s <the words after 'tfm train'>\n"
                 "  e.g. %s --task reverse --arch encoder --max-steps 20 --out runs/x --threads 1\n"
                 "  (`tfm train --help` lists the options)\n",
                 argv[0], argv[0]);
    return 2;
  }
  try {
    // ---- 1. the options given → the run they ask for ------------------------------------------------
    const std::vector<std::string> words(argv + 1, argv + argc);
    const tfm::train::TrainSetup setup = tfm::train::resolve_train_options(tfm::train::parse_train_args(words));
    const tfm::train::TrainConfig& config = setup.config;

    // ---- 2. how this process runs it ----------------------------------------------------------------
    tfm::set_num_threads(setup.run.threads);  // 0: OpenMP's default (every core)
    std::printf("%s run: %s model, out %s\n", std::string(tfm::enum_name(setup.mode)).c_str(),
                std::string(tfm::enum_name(config.model.arch)).c_str(), config.out_dir.c_str());

    // ---- 3. train, printing a line per evaluation ---------------------------------------------------
    tfm::train::TrainHooks hooks;
    hooks.replace_run = setup.run.force;
    hooks.progress = [&config](const tfm::train::ProgressEvent& e) {
      using Kind = tfm::train::ProgressEvent::Kind;
      if (e.kind == Kind::EVAL) {
        const tfm::train::EvalRow& r = e.last_eval;
        if (config.text())  // a language model: loss per token
          std::printf("eval step %5lld  train loss %.4f  valid loss %.4f\n", static_cast<long long>(r.step),
                      r.train_loss, r.valid_loss);
        else
          std::printf("eval step %5lld  train loss %.4f  valid loss %.4f  token acc %.3f  sequence acc %.3f\n",
                      static_cast<long long>(r.step), r.train_loss, r.valid_loss, r.valid_token_accuracy,
                      r.valid_sequence_accuracy);
      } else if (e.kind == Kind::NOTE) {  // e.g. "resuming DIR at step N", skipped data lines
        std::printf("%s\n", e.message.c_str());
      }
      std::fflush(stdout);
    };
    const tfm::train::TrainResult result =
        tfm::train::run_training(config, hooks, setup.mode == tfm::train::StartMode::RESUME);
    std::printf("trained %lld steps in %.1f s (%s); model in %s\n", static_cast<long long>(result.steps),
                result.seconds, std::string(tfm::enum_name(result.stop_reason)).c_str(), config.out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_like_cli: error: %s\n", e.what());
    return 1;
  }
}
