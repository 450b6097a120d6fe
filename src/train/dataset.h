// src/train/dataset.h — the training run's data: a built-in task or a pair of TSV files, encoded
// with the run's vocabularies. Internal to the trainer.
#pragma once

#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/vocab.h"
#include "tfm/train/config.h"
#include "tfm/train/evaluate.h"

namespace tfm::train {

struct Dataset {
  data::Vocab src_vocab, tgt_vocab;
  std::vector<data::Example> train;  // TSV: the whole file; task: regenerated each epoch (task_epoch)
  std::vector<data::Example> valid;  // every validation pair (teacher-forced evaluation)
  EvalSet valid_set;                 // the validation sources with their references (decoded evaluation)
  std::vector<std::string> notes;    // skipped-line summaries for the user
};

// Reads (TSV) or generates (task) the data. Resuming (or starting from a model directory) passes the
// saved vocabularies, which are then used as they are; otherwise they are built from the training
// file. A TSV token that a given vocabulary lacks maps to its <unk>, or without one throws DataError
// "<path>:<line>: ..." naming the token.
Dataset load_dataset(const TrainConfig& c, const data::Vocab* src_vocab, const data::Vocab* tgt_vocab);

// A task's training examples for one epoch: fresh ones every epoch, a pure function of (seed, epoch).
std::vector<data::Example> task_epoch(const TrainConfig& c, int64_t epoch);

}  // namespace tfm::train
