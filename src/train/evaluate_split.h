// src/train/evaluate_split.h — the pieces of the teacher-forced evaluation split over several
// processes (tfm/train/evaluate.h, evaluate_teacher_forced with a Comm), exposed to the tests, which
// run the parts in one process. Each is the scorer of src/models/scorer.h with the trainer's batches:
// a part's record holds, for each of its batches in order, [n, correct, rows, rows all right,
// loss_1 … loss_n] (layout and order in scorer.h); part `part` of `parts` holds batches part,
// part + parts, part + 2·parts, … and throws std::invalid_argument unless 0 <= part < parts. The ranks
// finish their parts apart: evaluation_grace is how long each gives the others.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tfm/train/evaluate.h"

namespace tfm::train {

// Part `part` of evaluate_teacher_forced(model, examples, batch_size)'s batches.
std::vector<double> teacher_forced_part(const Model& model, const std::vector<data::Example>& examples,
                                        int64_t batch_size, int part, int parts);
// Part `part` of evaluate_teacher_forced_text(model, corpus, block_size, batch_size)'s batches.
std::vector<double> teacher_forced_text_part(const Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                             int64_t batch_size, int part, int parts);
// The figures from every part's record (parts[r] = part r's), replayed in batch order: bitwise equal
// to the unsplit evaluation's. Throws std::invalid_argument when the records do not form a
// round-robin split.
TeacherForced teacher_forced_replay(const std::vector<std::vector<double>>& parts);

// The work of one part's batches, in the terms a forward's time is a sum of (each with a cost per unit
// that depends on the model and the machine, not on the batch): a constant per batch, B·S and B·T
// (linear layers, embeddings, the vocabulary's projection), B·S², B·T² and B·S·T (self- and
// cross-attention). A language model's and an encoder's batches leave some terms 0 (S = 0; T = S).
struct ShareWork {
  static constexpr int kTerms = 6;
  double terms[kTerms] = {};                  // {batches, Σ B·S, Σ B·T, Σ B·S², Σ B·T², Σ B·S·T}
  void add(int64_t B, int64_t S, int64_t T);  // one batch of B rows, S source and T target positions
};
// The grace the split evaluation's gather gives the other ranks beyond --comm-timeout (src/train/
// evaluate.cc): twice the seconds the longest of `shares` may take, estimated from the `own_seconds` that
// share `own` took by the largest ratio of any term of any share to the same term of share `own` (an
// upper bound of the ratio of their times, whatever each term costs); never less than twice own_seconds.
// nullopt when another share has work in a term share `own` has none of (share `own` empty: nothing to
// scale). Throws std::invalid_argument unless 0 <= own < shares.size().
std::optional<double> evaluation_grace(const std::vector<ShareWork>& shares, int own, double own_seconds);

}  // namespace tfm::train
