// src/models/scorer.h — the one teacher-forced scorer: a model's loss and accuracies over a fixed
// sequence of batches, pairs (the trainer's validation) or a text's windows (the trainer's validation
// of a language model, and tfm eval --text).
//
// The work is cut into parts: part p of P forwards batches p, p + P, p + 2P, … and writes one record
// per batch; the records are replayed in batch order into one running double sum. One process scores
// as part 0 of 1 (score: each record replayed as soon as it is made, so no more than a batch's record
// is held); P processes each score their part and the records, gathered (src/train/evaluate.cc with
// train::Comm), are replayed by replay_parts. Both add the same per-token doubles in the same order
// through ScoreSums::replay_batch, so the figures are bitwise equal for every P, and for every thread
// count (the kernels' results do not depend on it).
//
// A batch's record (doubles): [n, correct, rows, rows all right, loss_1 … loss_n]; n the batch's
// scored targets, loss_i = lse(logits_i) − logits_i[y_i] (kernels::log_softmax_rows) in
// (row, position) order, correct the targets whose argmax is y_i, a row all right when every scored
// target of it is. Counts are whole numbers far below 2^53, exact in double.
//
// Internal to the library: src/train includes it (models ← train), tests include it from src/.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/text.h"
#include "tfm/models/model.h"

namespace tfm::detail {

// What is scored: `count` batches in a fixed order, batch k built by make(k). Targets equal to
// `ignore_id` are padding and not scored (−1: every target is scored).
struct ScoreBatches {
  int64_t count = 0;
  std::function<data::TokenBatch(int64_t k)> make;
  int32_t ignore_id = -1;
  // A target the vocabulary could not name (<unk>: a token unseen when it was built): its loss counts, but a
  // prediction of it is never correct, as the decoded text (<unk>) is never the token (−1: none).
  int32_t unk_id = -1;
};
// The pairs of `examples` in the batches of data::plan_eval (at most batch_size pairs each), laid out
// by the model's target layout; pad targets ignored. `examples` must outlive the result.
ScoreBatches pair_batches(const ModelConfig& config, const std::vector<data::Example>& examples, int64_t batch_size);
// A text's validation windows (data::validation_windows: the whole text, every token but the first a
// target once), at most batch_size windows a batch. Windows hold text only, no padding: every target
// is scored. `corpus` must outlive the result.
ScoreBatches window_batches(const data::TextCorpus& corpus, int64_t block_size, int64_t batch_size);

// The running sums, fed batch records in batch order.
struct ScoreSums {
  double loss_sum = 0;  // Σ loss_i, added one by one: batch, row, position order
  int64_t tokens = 0, correct = 0, rows = 0, rows_correct = 0;

  // Adds the batch record starting at rec[at] and moves `at` past it. Throws std::invalid_argument
  // when the record is cut short.
  void replay_batch(const std::vector<double>& rec, size_t& at);
  double mean_loss() const { return tokens ? loss_sum / static_cast<double>(tokens) : 0.0; }
};

// Part `part` of `parts` (throws std::invalid_argument unless 0 <= part < parts): its batches
// forwarded in eval mode (EvalModeGuard) under an InferenceMode scope of the caller's precision, each
// batch's record handed to `take` as soon as it is made (the vector is reused for the next batch).
void score_part(const Model& model, const ScoreBatches& batches, int part, int parts,
                const std::function<void(const std::vector<double>& record)>& take);
// The same part's records, concatenated: what a process sends to the others.
std::vector<double> score_part(const Model& model, const ScoreBatches& batches, int part, int parts);
// Every part's records (parts[p] = part p's) replayed in batch order. Throws std::invalid_argument
// when there are no parts or the records do not form a round-robin split.
ScoreSums replay_parts(const std::vector<std::vector<double>>& parts);
// The whole scoring in one process: part 0 of 1, each record replayed as it is made.
ScoreSums score(const Model& model, const ScoreBatches& batches);

}  // namespace tfm::detail
