// src/cli/eval_cmd.cc — `tfm eval`: decode a task's fresh test sequences or a TSV file with a trained
// model and print token accuracy, sequence accuracy and token error rate, and for a TSV file BLEU and
// chrF on the detokenized text (or one JSON object, which always has "bleu", "chrf", "truncated": the
// predictions the length limit stopped, and "skipped": the file's lines not scored); or, for a language
// model, score a text file (tfm::evaluate_text_file, tfm/models/text_eval.h).
#include <cstdio>
#include <optional>

#include "commands.h"
#include "tfm/data/tasks.h"
#include "tfm/inference.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/text_eval.h"
#include "tfm/threads.h"
#include "tfm/train/evaluate.h"

namespace tfm::cli {

void register_eval(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a trained model on a task or a TSV file");
  cmd->footer(
      "Examples:\n"
      "  tfm eval --model runs/reverse --task reverse\n"
      "  tfm eval --model runs/mt --data test.tsv --beam 4 --json\n"
      "  tfm eval --model runs/lm --text valid.txt      # a language model: loss, perplexity, bits per char\n"
      "A source on several lines of the file has several accepted targets: a prediction is exact if it\n"
      "matches any, and its edit distance is to the closest. With --data, BLEU (sacreBLEU's defaults: 13a\n"
      "tokenization, 4-grams) and chrF2 (character 6-grams, beta 2) score the detokenized output against all\n"
      "of a source's targets as the file writes them. When predictions stop at the length limit without an end token, "
      "a note on\n"
      "stderr says how many (--max-len raises the limit); --json has the count as \"truncated\".\n"
      "Every line of --data the model can take is scored whatever its length; lines skipped (blank, malformed,\n"
      "a source longer than the model's max_len) are noted on stderr and counted (\"skipped\" in --json);\n"
      "--strict refuses the first.");
  struct Opts {
    std::string model, task, data, text;
    DecodeOptions decode;  // the defaults are the library's
    bool json = false;
    bool strict = false;
    std::optional<int64_t> batch_size;  // unset: kDecodeBatchSize, or kScoreBatchSize with --text
    int64_t count = train::kTaskTestCount;
    uint64_t seed = 0;
    int threads = 0;
    std::string dtype;  // empty: the directory's (model_dtype)
    bool no_mmap = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "trained model directory")->required();
  auto* g = cmd->add_option_group("data", "a built-in task, a TSV file, or a text file");
  g->add_option("--task", o->task, "built-in task (fresh test sequences)")->type_name(choices_type<data::Task>());
  auto* data = g->add_option("--data", o->data, "TSV pairs, one 'source<TAB>target' a line");
  auto* text = g->add_option("--text", o->text, "a language model's text: scored in consecutive block-size windows");
  g->require_option(1);
  auto* beam = cmd->add_option("--beam", o->decode.beam, "beam size (1 = greedy)")->capture_default_str();
  auto* max_len = cmd->add_option("--max-len", o->decode.max_len, MAX_LEN_HELP)->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--batch-size", o->batch_size,
                  "sources decoded together (default " + std::to_string(kDecodeBatchSize) +
                      "); with --text, windows scored together (default " + std::to_string(kScoreBatchSize) + ")");
  auto* count = cmd->add_option("--count", o->count, "with --task: sequences to generate")->capture_default_str();
  auto* seed =
      cmd->add_option("--seed", o->seed, "with --task: seed (default: the model's training seed)")->check(kNonNegative);
  auto* strict = cmd->add_flag("--strict", o->strict,
                               "with --data: a blank or malformed line is an error (otherwise: skip and count)");
  strict->needs(data);
  text->excludes(beam)->excludes(max_len)->excludes(count)->excludes(seed);  // a text is scored, not decoded or generated
  data->excludes(count)->excludes(seed);  // a file's pairs are read, not generated
  cmd->add_option("--threads", o->threads, std::string("threads (default ") + tfm::kThreadsZero + ")");
  cmd->add_option("--dtype", o->dtype, MODEL_DTYPE_HELP)->type_name(choices_type<Precision>());
  cmd->add_flag("--no-mmap", o->no_mmap, NO_MMAP_HELP);
  cmd->callback([o, seed, &run] {
    const bool seed_given = seed->count() > 0;
    run = [o, seed_given] {
      apply_threads(o->threads);
      const DecodeOptions& decode = o->decode;
      check_decode_options(decode);  // before the model is loaded
      if (o->batch_size && *o->batch_size < 1) throw std::invalid_argument("--batch-size must be ≥ 1");
      if (!o->dtype.empty()) dtype_name(o->dtype);  // a bad name fails before the load
      const TrainedModel m = load_model_dir(o->model, weights_load(o->no_mmap));
      const InferenceMode scope(model_dtype(o->dtype, m));  // weights packed once for all batches
      flush_notes();
      if (!o->text.empty()) {
        const TextScore r = evaluate_text_file(m, o->text, o->batch_size.value_or(kScoreBatchSize));
        if (r.unknown_tokens > 0)
          std::fprintf(stderr,
                       "tfm: note: %s: %lld %s not in the model's vocabulary, read as <unk> (the "
                       "figures score them as one unknown token)\n",
                       o->text.c_str(), static_cast<long long>(r.unknown_tokens),
                       r.unknown_tokens == 1 ? "token is" : "tokens are");
        if (o->json) {
          std::printf("%s\n", r.to_json().c_str());
        } else {
          std::printf("tokens          %lld\n", static_cast<long long>(r.tokens));
          std::printf("loss            %.4f\n", r.loss);
          std::printf("perplexity      %.4f\n", r.perplexity);
          std::printf("bits per token  %.4f\n", r.bits_per_token);
          if (r.chars > 0)
            std::printf("bits per char   %.4f\n", r.bits_per_char);
          else
            std::printf("bits per char   - (no whole character predicted)\n");
        }
        return 0;
      }
      require_data(m, DataKind::PAIRS, "evaluate it on a text with --text FILE");
      check_decode_options(m, decode);  // before the data is read
      train::EvalSet set;
      if (!o->task.empty()) {
        set = train::task_test_set(m, enum_from_name<data::Task>(o->task),
                                   seed_given ? std::optional<uint64_t>(o->seed) : std::nullopt, o->count);
      } else {
        std::string note;
        set = train::tsv_test_set(m, o->data, &note, o->strict);
        if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
      }
      const train::Metrics r =
          train::evaluate(m, set, decode, o->batch_size.value_or(kDecodeBatchSize),
                          [&](const data::Tokens& t) { return data::detokenize(t, m.tgt_tokenizer); });
      note_truncated(r.truncated, r.examples, decode.max_len, m);
      if (o->json) {
        std::printf("%s\n", r.to_json().c_str());
      } else {
        std::printf("examples             %lld\n", static_cast<long long>(r.examples));
        if (!o->data.empty()) std::printf("skipped lines        %lld\n", static_cast<long long>(r.skipped));
        std::printf("token accuracy       %.2f%%\n", 100 * r.token_accuracy());
        std::printf("sequence accuracy    %.2f%%\n", 100 * r.sequence_accuracy());
        std::printf("token error rate     %.4f\n", r.token_error_rate());
        std::printf("sequence error rate  %.2f%%\n", 100 * r.sequence_error_rate());
        if (!o->data.empty()) {  // text outputs: scored on the detokenized text
          std::printf("BLEU                 %.2f\n", r.bleu());
          std::printf("chrF2                %.2f\n", r.chrf());
        }
      }
      return 0;
    };
  });
}

}  // namespace tfm::cli
