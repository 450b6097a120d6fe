// src/cli/convert_cmd.cc — `tfm import gpt2` and `tfm export gpt2`: GPT-2 checkpoints in Hugging
// Face's layout to and from tfm model directories. The work is tfm::import_gpt2 / export_gpt2
// (tfm/models/gpt2.h); this file only parses the command line and reports.
#include <cstdio>

#include "commands.h"
#include "tfm/models/gpt2.h"

namespace tfm::cli {

namespace {

struct ConvertOpts {
  std::string from, out;
  bool force = false;
};

}  // namespace

void register_import(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("import", "Convert a pretrained checkpoint into a tfm model directory");
  cmd->require_subcommand(1);
  auto* gpt2 = cmd->add_subcommand("gpt2", "A Hugging Face GPT-2 folder (config.json, model.safetensors, tokenizer files)");
  gpt2->footer(
      "Examples:\n"
      "  tfm import gpt2 ~/gpt2 --out runs/gpt2\n"
      "  tfm generate --model runs/gpt2 --prompt 'Hello, I am' --max-new-tokens 40 --top-k 40\n"
      "The folder holds config.json, model.safetensors (with or without the 'transformer.' prefix) and\n"
      "vocab.json + merges.txt (or OpenAI's encoder.json + vocab.bpe). A pickled checkpoint\n"
      "(pytorch_model.bin, nanoGPT's ckpt.pt) goes through tools/convert_gpt2.py first.");
  auto o = std::make_shared<ConvertOpts>();
  gpt2->add_option("HF_DIR", o->from, "the Hugging Face GPT-2 folder")->required();
  gpt2->add_option("--out", o->out, "model directory to write (must not exist, unless --force)")->required();
  gpt2->add_flag("--force", o->force, "replace an existing --out");
  gpt2->callback([o, &run] {
    run = [o] {
      const Gpt2ImportReport r = import_gpt2(o->from, o->out, o->force);
      std::printf("%s: GPT-2 imported from %s: %lld tensors mapped, %lld buffers ignored (%s keys, %s head)\n",
                  o->out.c_str(), o->from.c_str(), static_cast<long long>(r.tensors_mapped),
                  static_cast<long long>(r.tensors_ignored), r.prefixed ? "'transformer.'" : "unprefixed",
                  r.tied ? "tied" : "untied");
      if (r.vocab_size > r.tokenizer_size)
        std::printf("%s: the vocabulary has %lld rows for %lld tokens: the %lld padded rows are never generated\n",
                    o->out.c_str(), static_cast<long long>(r.vocab_size), static_cast<long long>(r.tokenizer_size),
                    static_cast<long long>(r.vocab_size - r.tokenizer_size));
      return 0;
    };
  });
}

void register_export(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("export", "Write a tfm model directory in another toolkit's layout");
  cmd->require_subcommand(1);
  auto* gpt2 = cmd->add_subcommand("gpt2", "A Hugging Face GPT-2 folder (an imported model comes back bit for bit)");
  gpt2->footer(
      "Example:\n"
      "  tfm export gpt2 runs/gpt2-tuned --out ~/gpt2-tuned\n"
      "The model must have GPT-2's shape (arch decoder, pre-norm, learned positions) and the gpt2-bpe\n"
      "tokenizer. A directory made by tfm import gpt2 is written back as it came; any other in the\n"
      "hub's layout (unprefixed keys, F32, vocab.json + merges.txt).");
  auto o = std::make_shared<ConvertOpts>();
  gpt2->add_option("MODEL_DIR", o->from, "the tfm model directory")->required();
  gpt2->add_option("--out", o->out, "Hugging Face folder to write (must not exist, unless --force)")->required();
  gpt2->add_flag("--force", o->force, "replace an existing --out");
  gpt2->callback([o, &run] {
    run = [o] {
      export_gpt2(o->from, o->out, o->force);
      std::printf("%s: GPT-2 written from %s\n", o->out.c_str(), o->from.c_str());
      return 0;
    };
  });
}

}  // namespace tfm::cli
