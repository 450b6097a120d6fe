// src/train/dataset.cc — the training run's data (src/train/dataset.h).
#include "train/dataset.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

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

namespace {

// Text data: the vocabulary, the training tokens and the validation tokens (a file, or the last
// valid_fraction of the training file's tokens), each big enough for its windows.
void load_text(const TrainConfig& c, const data::Vocab* tgt_vocab, Dataset& ds) {
  ds.tgt_vocab = tgt_vocab ? *tgt_vocab : data::build_text_vocab(c.text_path, c.tgt_tokens);
  ds.src_vocab = ds.tgt_vocab;
  const auto cache = [&](const std::string& text) -> std::string {
    if (c.token_cache.empty()) return "";
    std::error_code ec;
    std::filesystem::create_directories(c.token_cache, ec);
    if (ec) throw data::DataError(c.token_cache + ": cannot create the token cache directory: " + ec.message());
    return (std::filesystem::path(c.token_cache) / (std::filesystem::path(text).filename().string() + ".tokens")).string();
  };
  const data::TextCorpus all = data::TextCorpus::read(c.text_path, ds.tgt_vocab, c.tgt_tokens, cache(c.text_path));
  if (!c.valid_text_path.empty()) {
    ds.text_train = all;
    // A validation file of the training file's name caches beside it under another name.
    const std::string vcache = cache(c.valid_text_path) == cache(c.text_path) ? cache(c.valid_text_path) + ".valid"
                                                                              : cache(c.valid_text_path);
    ds.text_valid = data::TextCorpus::read(c.valid_text_path, ds.tgt_vocab, c.tgt_tokens, vcache);
  } else {
    const auto n = all.size();
    const auto valid = static_cast<int64_t>(std::llround(static_cast<double>(n) * c.valid_fraction));
    char pct[32];
    std::snprintf(pct, sizeof pct, "%g%%", 100 * c.valid_fraction);
    ds.text_train = all.slice(0, n - valid, c.text_path + " (its first " + std::to_string(n - valid) + " tokens, for training)");
    ds.text_valid = all.slice(n - valid, n, c.text_path + " (its last " + std::string(pct) + " for validation)");
  }
  data::check_windows(ds.text_train, c.block_size);
  if (ds.text_valid.size() < 2)
    throw data::DataError(ds.text_valid.name() + ": " + std::to_string(ds.text_valid.size()) +
                          " tokens, too few to validate on (at least 2: a token and its successor)");
}

}  // namespace

Dataset load_dataset(const TrainConfig& c, const data::Vocab* src_vocab, const data::Vocab* tgt_vocab) {
  Dataset ds;
  if (c.text()) {
    load_text(c, tgt_vocab, ds);
    return ds;
  }
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
