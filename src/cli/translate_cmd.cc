// src/cli/translate_cmd.cc — `tfm translate`: sources on stdin, one a line; predictions on stdout
// in the same order. Input is processed in chunks so arbitrarily long streams need bounded memory.
#include <cstdio>
#include <iostream>
#include <string>

#include "commands.h"
#include "tfm/inference.h"
#include "tfm/models/model_dir.h"

namespace tfm::cli {

void register_translate(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("translate", "Predict targets for sources read from stdin, one a line");
  cmd->footer(
      "Examples:\n"
      "  echo '3 1 4 1 5' | tfm translate --model runs/reverse\n"
      "  tfm translate --model runs/mt --beam 4 < sources.txt > predictions.txt\n"
      "  tfm translate --model runs/mt --dtype bf16 < sources.txt   # bfloat16 matmuls, docs/bf16.md\n"
      "  tfm translate --model runs/mt-int8 < sources.txt   # a quantized directory runs int8, docs/int8.md\n"
      "  tfm translate --model runs/mt --sample --top-p 0.9 --seed 7 < sources.txt\n"
      "With --sample, input line i draws its tokens from its own random stream (seed, i), so the output\n"
      "does not depend on --batch-size or --threads.");
  struct Opts {
    std::string model;
    int beam = 1;
    int64_t batch_size = 64;
    int threads = 0;
    std::string dtype;  // empty: the directory's (model_dtype)
    bool sample = false;
    SamplingOptions sampling;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "trained model directory")->required();
  cmd->add_option("--beam", o->beam, "beam size (1 = greedy)")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "sources decoded together")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--dtype", o->dtype, MODEL_DTYPE_HELP)->type_name(choices_type<Precision>());
  cmd->add_flag("--sample", o->sample, "sample each token instead of searching (needs --beam 1)");
  auto* temperature = cmd->add_option("--temperature", o->sampling.temperature, "with --sample: softmax temperature (0 = greedy)")
                          ->capture_default_str();
  auto* top_k = cmd->add_option("--top-k", o->sampling.top_k, "with --sample: keep the K likeliest tokens (0 = all)")
                    ->capture_default_str();
  auto* top_p = cmd->add_option("--top-p", o->sampling.top_p, "with --sample: keep the likeliest tokens of total probability ≥ P")
                    ->capture_default_str();
  auto* seed = cmd->add_option("--seed", o->seed, "with --sample: random seed")->check(kNonNegative)->capture_default_str();
  cmd->callback([o, &run, temperature, top_k, top_p, seed] {
    for (const auto* opt : {temperature, top_k, top_p, seed})
      if (opt->count() > 0 && !o->sample) throw CLI::ValidationError(opt->get_name(), "needs --sample");
    run = [o] {
      apply_threads(o->threads);
      if (o->beam < 1) throw std::invalid_argument("--beam must be ≥ 1");
      if (o->batch_size < 1) throw std::invalid_argument("--batch-size must be ≥ 1");
      if (o->sample && o->beam > 1) throw std::invalid_argument("--sample cannot be used with --beam above 1");
      DecodeOptions decode;
      decode.beam = o->beam;
      decode.sample = o->sample;
      decode.sampling = o->sampling;
      decode.seed = o->seed;
      if (o->sample) check_sampling_options(decode.sampling);
      if (!o->dtype.empty()) enum_from_name<Precision>(o->dtype);  // a bad name fails before the load
      const TrainedModel m = load_model_dir(o->model);
      const InferenceMode scope(model_dtype(o->dtype, m));  // weights packed once for the stream
      require_data(m, DataKind::PAIRS, "sample from it with tfm generate");
      const size_t chunk = static_cast<size_t>(o->batch_size) * 64;
      std::vector<std::string> lines;
      std::string line;
      int64_t done = 0;
      const auto flush = [&] {
        std::vector<std::string> out;
        try {
          out = translate_lines(m, lines, decode, o->batch_size, static_cast<uint64_t>(done));
        } catch (const std::invalid_argument& e) {
          // translate_lines numbers lines within the chunk; report the position in the stream.
          throw std::invalid_argument(std::string(e.what()) + " (chunk starting at input line " + std::to_string(done + 1) + ")");
        }
        for (const auto& s : out) std::fwrite(s.data(), 1, s.size(), stdout), std::fputc('\n', stdout);
        std::fflush(stdout);
        done += static_cast<int64_t>(lines.size());
        lines.clear();
      };
      while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(line);
        if (lines.size() == chunk) flush();
      }
      if (!lines.empty()) flush();
      return 0;
    };
  });
}

}  // namespace tfm::cli
