// src/cli/generate_cmd.cc — `tfm generate`: sample text from a trained language model (arch
// decoder). Prints the prompt, then streams the continuation token by token; several samples are
// separated by a line `---`. The work is tfm::generate (tfm/models/generate.h).
#include <cstdio>
#include <optional>
#include <string>

#include "commands.h"
#include "tfm/inference.h"
#include "tfm/models/generate.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/sampling.h"
#include "tfm/threads.h"

namespace tfm::cli {

void register_generate(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a trained language model (--arch decoder)");
  cmd->footer(
      "Examples:\n"
      "  tfm generate --model runs/lm --prompt 'ROMEO:' --max-new-tokens 500\n"
      "  tfm generate --model runs/lm --temperature 0.8 --top-k 40 --num-samples 3 --seed 7\n"
      "  tfm generate --model runs/lm --prompt-file start.txt --stop $'\\n\\n'   # stop after a blank line within the "
      "continuation\n"
      "Without a prompt, generation starts from a newline. --temperature 0 or --top-k 1 is greedy.\n"
      "--stop is looked for in each sample's continuation only, not across the prompt's end: after a prompt\n"
      "ending in a newline, one generated newline does not match $'\\n\\n', two do.\n"
      "A sample ends at the end-of-text token (--ignore-eos goes on); <pad>, <bos> and <unk> are never drawn, nor\n"
      "is <eos> by a model tfm trained on text with char, byte or spm tokens (a text holds none to learn).\n"
      "Past the model's block size the context slides (its last half is kept). The same --seed gives\n"
      "the same samples whatever --threads.");
  struct Opts {
    std::string model, prompt, prompt_file, stop;
    GenerateOptions gen;
    double temperature = GenerateOptions{}.sampling.temperature;  // read as a double, then float32_option's float
    int threads = 0;
    std::string dtype;  // empty: the directory's (model_dtype)
    bool no_mmap = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "trained model directory (arch decoder)")->required();
  auto* prompt = cmd->add_option("--prompt", o->prompt, "text to continue");
  cmd->add_option("--prompt-file", o->prompt_file, "file whose text to continue (-: standard input)")->excludes(prompt);
  cmd->add_option("--max-new-tokens", o->gen.max_new_tokens, "tokens generated per sample")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "softmax temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->gen.sampling.top_k, "keep the K likeliest tokens (0 = all)")->capture_default_str();
  cmd->add_option("--top-p", o->gen.sampling.top_p, "keep the likeliest tokens of total probability ≥ P")
      ->capture_default_str();
  cmd->add_option("--num-samples", o->gen.num_samples, "samples, separated by a line ---")->capture_default_str();
  cmd->add_option("--seed", o->gen.seed, "random seed")->check(kNonNegative)->capture_default_str();
  auto* stop = cmd->add_option(
      "--stop", o->stop,
      "a sample ends once its continuation (the prompt not included) contains this text, printed whole");
  cmd->add_flag("--ignore-eos", o->gen.ignore_eos, "go on past the end-of-text token (by default a sample ends there)");
  cmd->add_option("--threads", o->threads, std::string("threads (default ") + tfm::kThreadsZero + ")");
  cmd->add_option("--dtype", o->dtype, MODEL_DTYPE_HELP)->type_name(choices_type<Precision>());
  cmd->add_flag("--no-mmap", o->no_mmap, NO_MMAP_HELP);
  cmd->callback([o, prompt, stop, &run] {
    const bool prompt_given = prompt->count() > 0;
    const std::optional<std::string> stop_text = stop->count() > 0 ? std::optional(o->stop) : std::nullopt;
    run = [o, prompt_given, stop_text] {
      apply_threads(o->threads);
      // A bad option fails before the load (and before any note).
      o->gen.sampling.temperature = float32_option(o->temperature, "--temperature");
      check_generate_options(o->gen);
      if (stop_text) check_stop_text(*stop_text);
      if (!o->dtype.empty()) dtype_name(o->dtype);  // a bad name fails before the load
      const TrainedModel m = load_model_dir(o->model, weights_load(o->no_mmap));
      const InferenceMode scope(model_dtype(o->dtype, m));
      flush_notes();
      require_data(m, DataKind::TEXT, "generate needs --arch decoder (tfm translate decodes the others)");
      std::string text = "\n";
      if (prompt_given) {
        text = o->prompt;
      } else if (!o->prompt_file.empty()) {
        text = read_prompt_file(o->prompt_file);
      }
      const std::string prompt_name = prompt_given || o->prompt_file.empty() ? "--prompt" : o->prompt_file;
      const std::vector<int32_t> ids = encode_prompt(m, text, prompt_name);
      if (const int64_t unknown = prompt_given || !o->prompt_file.empty() ? unknown_tokens(m, ids) : 0; unknown > 0)
        std::fprintf(stderr, "note: %lld prompt token%s not in the model's vocabulary, read as <unk>\n",
                     static_cast<long long>(unknown), unknown == 1 ? " is" : "s are");
      // Each sample: the prompt, then its tokens as they come; a newline closes a sample that does
      // not end with one, then `---` separates it from the next.
      bool at_line_start = !text.empty() && text.back() == '\n';
      const auto print = [&](const std::string& s) {
        if (s.empty()) return;
        std::fwrite(s.data(), 1, s.size(), stdout);
        at_line_start = s.back() == '\n';
      };
      int64_t current = -1;  // the sample being printed
      const auto begin_sample = [&](int64_t sample) {  // also prints samples that produced no token
        while (current < sample) {
          if (current >= 0) {
            if (!at_line_start) print("\n");
            print("---\n");
          }
          print(text);
          ++current;
        }
      };
      generate_text(m, ids, o->gen, stop_text, [&](int64_t sample, const std::string& piece) {
        begin_sample(sample);
        print(piece);
        check_stdout();
      });
      begin_sample(o->gen.num_samples - 1);
      if (!at_line_start) print("\n");
      std::fflush(stdout);
      return 0;
    };
  });
}

}  // namespace tfm::cli
