// src/train/evaluate_split.h — the pieces of the teacher-forced evaluation split over several
// processes (tfm/train/evaluate.h, evaluate_teacher_forced with a Comm), exposed to the tests, which
// run the parts in one process. Each is the scorer of src/models/scorer.h with the trainer's batches:
// a part's record holds, for each of its batches in order, [n, correct, rows, rows all right,
// loss_1 … loss_n] (layout and order in scorer.h); part `part` of `parts` holds batches part,
// part + parts, part + 2·parts, … and throws std::invalid_argument unless 0 <= part < parts.
#pragma once

#include <cstdint>
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

}  // namespace tfm::train
