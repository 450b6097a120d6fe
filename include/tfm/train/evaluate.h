// tfm/train/evaluate.h — what a model is judged on: sources with their accepted references, decoded
// and scored (tfm/train/metrics.h), and the teacher-forced loss and accuracies of training.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/tasks.h"
#include "tfm/data/text.h"
#include "tfm/data/tsv.h"
#include "tfm/models/model.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/metrics.h"

namespace tfm::train {

class Comm;  // tfm/train/comm.h

// Each source once, with every reference it has.
struct EvalSet {
  std::vector<data::Tokens> sources;
  std::vector<std::vector<data::Tokens>> references;  // (sources) each non-empty
  // (sources) the references as the file has them, when the set came from text (a TSV file), else empty: BLEU and
  // chrF score against these, as sacreBLEU scores a translation against the file's targets. A tokenizer may
  // normalize text (SentencePiece pair models apply NFKC and collapse spaces), so detokenizing the references'
  // tokens can give another text than the file's, which the model's output could never differ from.
  std::vector<std::vector<std::string>> reference_texts;
  int64_t skipped = 0;  // lines of the set's file left out (tsv_test_set: those the TSV reader skips), else 0
};

// Groups (source, target) pairs by source in first-appearance order: a source on several lines of a
// file has several accepted targets. `target_texts` (the targets as written, or empty) are grouped alike.
EvalSet group_references(std::vector<data::Tokens> sources, std::vector<data::Tokens> targets,
                         std::vector<std::string> target_texts = {});
// `count` examples of a task's split, each its own entry (repeats included), in the task vocabulary's
// tokens.
EvalSet task_eval_set(data::Task task, uint64_t seed, data::Split split, int64_t count);
// The pairs of a TSV file, grouped by source.
EvalSet tsv_eval_set(data::TsvData tsv);

// A trained model's test sets (`tfm eval`). A task's: `count` fresh TEST-split sequences, drawn with
// `seed` or else the run's own seed; throws when the model was not trained on a built-in task. A TSV
// file's: read with the model's tokenizations, every line the model can take whatever its length (not the
// run's max_tokens, a training filter): a source longer than the model's max_len is over-long, skipped as
// the reader skips a malformed line (TsvOptions::max_src_tokens). Lines the reader skips (tfm/data/tsv.h;
// `strict`: the first throws DataError naming file:line instead) are counted in EvalSet::skipped and summarised in
// *note (empty when none), and so are tokens the vocabularies lack (source and target) and references the target
// tokenizer changes beyond whitespace (their count, with the first, its changed part written \u{hex} beyond ASCII).
// Fresh test sequences of a task when a caller does not say (tfm eval --count).
inline constexpr int64_t kTaskTestCount = 1000;
EvalSet task_test_set(const TrainedModel& m, data::Task task, std::optional<uint64_t> seed,
                      int64_t count = kTaskTestCount);
EvalSet tsv_test_set(const TrainedModel& m, const std::string& path, std::string* note, bool strict = false);

// Decodes every source (greedy or beam, with `decode`'s options: predict()) and scores it against its
// references: the token figures on the tokens, BLEU and chrF (tfm/train/text_metrics.h) on the prediction
// and references as turned into text by `detokenize` (target side), e.g.
//   [&](const data::Tokens& t) { return data::detokenize(t, m.tgt_tokenizer); }
// and Metrics::truncated, the predictions the length limit stopped; Metrics::skipped is the set's.
Metrics evaluate(const Model& model, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, const EvalSet& set,
                 const DecodeOptions& decode, int64_t batch_size,
                 const std::function<std::string(const data::Tokens&)>& detokenize);
Metrics evaluate(const TrainedModel& m, const EvalSet& set, const DecodeOptions& decode, int64_t batch_size,
                 const std::function<std::string(const data::Tokens&)>& detokenize);

// Teacher-forced figures over every pair, without label smoothing: loss = mean over non-pad targets
// of lse(logits) − logits[y] (computed in double), token and sequence accuracy of the argmax.
struct TeacherForced {
  double loss = 0, token_accuracy = 0, sequence_accuracy = 0;
};
// Runs in eval mode (EvalModeGuard: the model's mode is restored afterwards) inside an InferenceMode
// scope. The figures are the one scorer's (src/models/scorer.h), the same code for one process and
// for several, and bitwise the same for every process and thread count.
//
// With `comm` of P > 1 processes the work is split: every rank must call with the same model and
// data; rank r forwards batches k with k % P == r (round robin over the batches, in the one-process
// order) and records each one's loss terms; the records are gathered to every rank
// (Comm::allgatherv, waiting --comm-timeout plus twice the longest share's estimated time) and replayed
// in batch order into the same running double sum as one process adds. Every rank returns the same
// figures. Without `comm`, or with one process: part 0 of 1, each batch's record replayed as it is made.
// `unk_id` (the target vocabulary's <unk>, or −1): a target token the vocabulary could not name; its loss counts,
// but predicting it is never counted correct (the decoded output, "<unk>", is never the token).
TeacherForced evaluate_teacher_forced(Model& model, const std::vector<data::Example>& examples, int64_t batch_size,
                                      Comm* comm = nullptr, int32_t unk_id = -1);
// The same figures for a language model over the validation windows of `corpus` (tfm/data/text.h:
// the whole text, every token but the first a target once — a text has no padding, so every target
// is scored), at most `batch_size` windows a batch; sequence accuracy is the share of windows
// predicted entirely right. With block_size = the model's max_len and the same batch_size its loss is
// bitwise evaluate_text's (tfm/models/text_eval.h). `comm`: as above.
TeacherForced evaluate_teacher_forced_text(Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                           int64_t batch_size, Comm* comm = nullptr, int32_t unk_id = -1);

}  // namespace tfm::train
