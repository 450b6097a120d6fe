// src/train/dataset.cc — the training run's data (src/train/dataset.h).
#include "train/dataset.h"

#include "tfm/data/tasks.h"
#include "tfm/data/tsv.h"

namespace tfm::train {

std::vector<data::Example> task_epoch(const TrainConfig& c, int64_t epoch) {
  std::vector<data::Example> out;
  out.reserve(static_cast<size_t>(c.task_train_size));
  for (int64_t i = 0; i < c.task_train_size; ++i) {
    auto t = data::make_task_example(*c.task, c.seed, data::Split::TRAIN, epoch * c.task_train_size + i);
    out.push_back({std::move(t.src), std::move(t.tgt)});
  }
  return out;
}

Dataset load_dataset(const TrainConfig& c, const data::Vocab* src_vocab, const data::Vocab* tgt_vocab) {
  Dataset ds;
  if (c.task) {
    ds.src_vocab = ds.tgt_vocab = data::task_vocab();
    for (auto& e : data::make_task_set(*c.task, c.seed, data::Split::VALID, c.task_valid_size))
      ds.valid.push_back({std::move(e.src), std::move(e.tgt)});
    // Every generated sequence counts, repeats included ("accuracy on 1,000 sequences").
    ds.valid_set = task_eval_set(*c.task, c.seed, data::Split::VALID, c.task_valid_size);
    return ds;
  }
  data::TsvOptions o;
  o.src_tokens = c.src_tokens;
  o.tgt_tokens = c.tgt_tokens;
  o.max_tokens = c.max_tokens;
  o.strict = c.strict;
  o.equal_lengths = !c.model.has_decoder();
  const data::TsvData train = data::read_tsv(c.train_path, o);
  const data::TsvData valid = data::read_tsv(c.valid_path, o);
  for (const auto* d : {&train, &valid})
    if (!d->problems.empty()) ds.notes.push_back(d->summary());
  if (src_vocab && tgt_vocab) {  // resuming or starting from a model directory: its vocabularies, never rebuilt
    ds.src_vocab = *src_vocab;
    ds.tgt_vocab = *tgt_vocab;
  } else {
    std::vector<data::Tokens> s, t;
    for (const auto& p : train.pairs) s.push_back(p.src), t.push_back(p.tgt);
    ds.src_vocab = data::build_vocab(s, c.src_tokens);
    ds.tgt_vocab = data::build_vocab(t, c.tgt_tokens);
  }
  // A token outside a given vocabulary without <unk> is an error naming where it is.
  const auto encode_side = [](const data::Vocab& v, const data::Tokens& t, const data::TsvData& d, int64_t line,
                               const char* side) {
    try {
      return v.encode(t);
    } catch (const std::invalid_argument& e) {
      throw data::DataError(d.path + ":" + std::to_string(line) + ": " + side + " " + e.what());
    }
  };
  const auto encode = [&](const data::TsvData& d, const data::TextPair& p) {
    return data::Example{encode_side(ds.src_vocab, p.src, d, p.line, "source"),
                         encode_side(ds.tgt_vocab, p.tgt, d, p.line, "target")};
  };
  for (const auto& p : train.pairs) ds.train.push_back(encode(train, p));
  for (const auto& p : valid.pairs) ds.valid.push_back(encode(valid, p));
  ds.valid_set = tsv_eval_set(valid);
  return ds;
}

}  // namespace tfm::train
