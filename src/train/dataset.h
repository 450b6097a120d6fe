// src/train/dataset.h — the training run's data: a built-in task, a pair of TSV files, or a text
// for a language model, encoded with the run's vocabularies. Internal to the trainer.
#pragma once

#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/text.h"
#include "tfm/data/tokenizer.h"
#include "tfm/data/vocab.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"
#include "tfm/train/evaluate.h"

namespace tfm::train {

struct Dataset {
  data::Vocab src_vocab, tgt_vocab;
  // The tokenizers of the two sides (spm ones with their models; text data: both the text's).
  data::Tokenizer src_tokenizer, tgt_tokenizer;
  std::vector<data::Example> train;  // TSV: the whole file; task: regenerated each epoch (task_epoch)
  std::vector<data::Example> valid;  // every validation pair (teacher-forced evaluation)
  EvalSet valid_set;                 // the validation sources with their references (decoded evaluation)
  std::vector<std::string> notes;    // skipped-line summaries for the user
  // Text data: the training and validation tokens (train, valid and valid_set stay empty). The
  // vocabulary is tgt_vocab (src_vocab is the same).
  data::TextCorpus text_train, text_valid;
};

// What a run resumed in or started from a model directory takes from it (TrainedModel's vocabularies
// and tokenizers, tfm/models/model_dir.h): they encode the data as they are, never rebuilt or retrained.
// Vocabularies alone (no tokenizers) serve a task or char / space / byte tokens.
struct SavedVocabs {
  const data::Vocab* src_vocab = nullptr;
  const data::Vocab* tgt_vocab = nullptr;
  const data::Tokenizer* src_tokenizer = nullptr;  // an spm side's model, when set
  const data::Tokenizer* tgt_tokenizer = nullptr;
};

// Reads (TSV) or generates (task) the data, with `saved`'s vocabularies and tokenizers when given.
// Otherwise the vocabularies are built from the training file (text data: from the text file, or
// byte_vocab()); an spm side trains its model on the training file's side (or loads the configured
// .model file) and its vocabulary is the model's pieces; with several processes (`comm`) rank 0 alone
// trains it and sends it to the others. A TSV token that a given vocabulary lacks maps to its <unk>, or
// without one throws DataError "<path>:<line>: ..." naming the token.
Dataset load_dataset(const TrainConfig& c, const SavedVocabs& saved = {}, Comm* comm = nullptr);

// A task's training examples for one epoch: fresh ones every epoch, a pure function of (seed, epoch).
std::vector<data::Example> task_epoch(const TrainConfig& c, int64_t epoch);

}  // namespace tfm::train
