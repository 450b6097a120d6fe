// src/train/dataset.cc — the training run's data (src/train/dataset.h).
#include "train/dataset.h"

#include <algorithm>
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
data::SpmOptions spm_options(const TrainConfig& c, int64_t vocab_size) {
  data::SpmOptions o;
  o.vocab_size = vocab_size;
  o.type = c.spm_type;
  o.max_lines = c.spm_max_lines;
  return o;
}

// A SentencePiece model trained once: by `build` in one process; under MPI by rank 0 alone, whose
// model (its .model bytes) every other rank receives, waiting without a deadline (training takes as
// long as it takes; a failure on rank 0 aborts the whole job). `name` is what build names it.
template <typename Build>
data::Tokenizer trained_once(Comm* comm, const std::string& name, const Build& build) {
  if (!comm || comm->single()) return build();
  std::string model;
  if (comm->rank() == 0) {
    data::Tokenizer t = build();
    model = t.spm_model();
    comm->broadcast(model, /*timed=*/false);
    return t;
  }
  comm->broadcast(model, /*timed=*/false);
  return data::Tokenizer::from_spm_model(std::move(model), name);
}

// A saved vocabulary must be its tokenizer's (both come from the same directory): a SentencePiece
// model's pieces, or a BPE's tokens (then possibly more: the padded rows of an imported model).
void check_tokenizer_vocab(const data::Vocab& v, const data::Tokenizer& t) {
  const data::Vocab own = t.vocab();
  const auto& a = own.tokens();
  const auto& b = v.tokens();
  const bool ok = t.is_bpe() ? b.size() >= a.size() && std::equal(a.begin(), a.end(), b.begin()) : a == b;
  if (!ok)
    throw data::DataError(t.name() + ": its " + (t.is_bpe() ? "tokens" : "pieces") +
                          " are not the vocabulary saved beside it (" + std::to_string(own.size()) + " " +
                          (t.is_bpe() ? "tokens" : "pieces") + ", " + std::to_string(v.size()) + " entries)");
}

void load_text(const TrainConfig& c, const SavedVocabs& saved, Comm* comm, Dataset& ds) {
  const data::Vocab* tgt_vocab = saved.tgt_vocab;
  if (c.tgt_tokens == data::Tokenization::SPM) {
    if (saved.tgt_tokenizer) ds.tgt_tokenizer = *saved.tgt_tokenizer;
    else if (!c.spm_model.empty()) ds.tgt_tokenizer = data::Tokenizer::load_spm(c.spm_model);
    else
      ds.tgt_tokenizer =
          trained_once(comm, c.text_path + " (its SentencePiece model)", [&] { return data::train_text_spm(c.text_path, spm_options(c, c.vocab_size)); });
    ds.tgt_vocab = ds.tgt_tokenizer.vocab();
    if (tgt_vocab) check_tokenizer_vocab(*tgt_vocab, ds.tgt_tokenizer);
  } else if (c.tgt_tokens == data::Tokenization::GPT2_BPE) {
    ds.tgt_tokenizer = saved.tgt_tokenizer ? *saved.tgt_tokenizer : data::Tokenizer::load_gpt2_bpe(c.bpe_vocab, c.bpe_merges);
    if (tgt_vocab) check_tokenizer_vocab(*tgt_vocab, ds.tgt_tokenizer);
    ds.tgt_vocab = tgt_vocab ? *tgt_vocab : ds.tgt_tokenizer.vocab();  // a saved one may be padded
  } else {
    ds.tgt_tokenizer = c.tgt_tokens;
    ds.tgt_vocab = tgt_vocab ? *tgt_vocab : data::build_text_vocab(c.text_path, c.tgt_tokens);
  }
  ds.src_tokenizer = ds.tgt_tokenizer;
  ds.src_vocab = ds.tgt_vocab;
  const auto cache = [&](const std::string& text) -> std::string {
    if (c.token_cache.empty()) return "";
    std::error_code ec;
    std::filesystem::create_directories(c.token_cache, ec);
    if (ec) throw data::DataError(c.token_cache + ": cannot create the token cache directory: " + ec.message());
    return (std::filesystem::path(c.token_cache) / (std::filesystem::path(text).filename().string() + ".tokens")).string();
  };
  const data::TextCorpus all = data::TextCorpus::read(c.text_path, ds.tgt_vocab, ds.tgt_tokenizer, cache(c.text_path));
  if (!c.valid_text_path.empty()) {
    ds.text_train = all;
    // A validation file of the training file's name caches beside it under another name.
    // Without a cache directory both names are "" and nothing is cached.
    const std::string vcache = !c.token_cache.empty() && cache(c.valid_text_path) == cache(c.text_path)
                                   ? cache(c.valid_text_path) + ".valid"
                                   : cache(c.valid_text_path);
    ds.text_valid = data::TextCorpus::read(c.valid_text_path, ds.tgt_vocab, ds.tgt_tokenizer, vcache);
  } else {
    const auto n = all.size();
    const auto valid = static_cast<int64_t>(std::llround(static_cast<double>(n) * c.valid_fraction));
    char pct[32];
    std::snprintf(pct, sizeof pct, "%g%%", 100 * c.valid_fraction);
    ds.text_train = all.slice(0, n - valid, c.text_path + " (its first " + std::to_string(n - valid) + " tokens, for training)");
    ds.text_valid = all.slice(n - valid, n, c.text_path + " (its last " + std::string(pct) + " for validation)");
  }
  // Tokens the vocabulary lacks read as <unk>: characters of a validation text (or, from a model directory's
  // vocabulary, of a training text) a char model never had. Said, as the figures then score <unk>.
  if (ds.tgt_vocab.unk_id() >= 0)
    for (const data::TextCorpus* t : {&ds.text_train, &ds.text_valid})
      if (const int64_t n = t->count(ds.tgt_vocab.unk_id()); n > 0)
        ds.notes.push_back(t->name() + ": " + std::to_string(n) + " of its " + std::to_string(t->size()) +
                           " tokens are not in the vocabulary and read as <unk>");
  data::check_windows(ds.text_train, c.block_size);
  if (ds.text_valid.size() < 2)
    throw data::DataError(ds.text_valid.name() + ": " + std::to_string(ds.text_valid.size()) +
                          " tokens, too few to validate on (at least 2: a token and its successor)");
}

// The TSV sides' tokenizers: a saved directory's models, the configured .model files, or models
// trained on the training file's sides (one on both with joint_vocab).
void tsv_tokenizers(const TrainConfig& c, const SavedVocabs& saved, Comm* comm, Dataset& ds) {
  ds.src_tokenizer = c.src_tokens;
  ds.tgt_tokenizer = c.tgt_tokens;
  const bool src_spm = c.src_tokens == data::Tokenization::SPM, tgt_spm = c.tgt_tokens == data::Tokenization::SPM;
  if (!src_spm && !tgt_spm) return;
  if (saved.src_tokenizer && saved.tgt_tokenizer) {
    ds.src_tokenizer = *saved.src_tokenizer;
    ds.tgt_tokenizer = *saved.tgt_tokenizer;
    return;
  }
  if (c.joint_vocab && !c.spm_model.empty()) {
    ds.src_tokenizer = ds.tgt_tokenizer = data::Tokenizer::load_spm(c.spm_model);
    return;
  }
  const bool need_lines = c.joint_vocab || (src_spm && c.src_spm_model.empty()) || (tgt_spm && c.tgt_spm_model.empty());
  // Sides past max_tokens pieces even at the longest piece, after NFKC has composed up to 4 code points into one
  // (the longest canonical decomposition of a character): their lines are, but for runs of spaces the model's
  // normalization collapses, skipped as over-long (parse_tsv), and left out of the model's training.
  const data::TsvSides sides =
      need_lines ? data::read_tsv_sides(c.train_path, c.max_tokens * data::kSpmMaxPieceChars * 4) : data::TsvSides{};
  const auto train = [&](const std::vector<std::string>& a, const std::vector<std::string>* b, int64_t size,
                         const std::string& what) {
    std::vector<std::string_view> lines(a.begin(), a.end());
    if (b) lines.insert(lines.end(), b->begin(), b->end());
    const std::string name = c.train_path + " (" + what + ")";
    return trained_once(comm, name, [&] {
      return data::Tokenizer::from_spm_model(data::train_spm(lines, spm_options(c, size), name), name);
    });
  };
  if (c.joint_vocab) {
    ds.src_tokenizer = ds.tgt_tokenizer = train(sides.src, &sides.tgt, c.vocab_size, "both sides, joint vocabulary");
    return;
  }
  if (src_spm)
    ds.src_tokenizer = c.src_spm_model.empty() ? train(sides.src, nullptr, c.src_vocab_size, "source side")
                                               : data::Tokenizer::load_spm(c.src_spm_model);
  if (tgt_spm)
    ds.tgt_tokenizer = c.tgt_spm_model.empty() ? train(sides.tgt, nullptr, c.tgt_vocab_size, "target side")
                                               : data::Tokenizer::load_spm(c.tgt_spm_model);
}

}  // namespace

Dataset load_dataset(const TrainConfig& c, const SavedVocabs& saved, Comm* comm) {
  const data::Vocab *src_vocab = saved.src_vocab, *tgt_vocab = saved.tgt_vocab;
  Dataset ds;
  if (c.text()) {
    load_text(c, saved, comm, ds);
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
  tsv_tokenizers(c, saved, comm, ds);
  data::TsvOptions o;
  o.src_tokens = ds.src_tokenizer;
  o.tgt_tokens = ds.tgt_tokenizer;
  o.max_tokens = c.max_tokens;
  o.strict = c.strict;
  o.equal_lengths = c.model.target_layout() == data::TargetLayout::PER_POSITION;
  // The files' tokens cost far more than their ids (a char token is a 32-byte string): the training file's sides
  // without a vocabulary of their own are kept as text and tokenized when counted and when encoded, its spm sides'
  // tokens are released as each pair is encoded, and the validation file is read once they are gone.
  o.keep_tokens = false;
  data::TsvData train = data::read_tsv(c.train_path, o);
  o.keep_tokens = true;
  if (!train.problems.empty()) ds.notes.push_back(train.summary());
  // A pair's tokens of one side: as read, or made from its text into `made` (TsvOptions::keep_tokens).
  data::Tokens made;
  const auto tokens = [&made](const data::Tokenizer& t, const data::Tokens& kept,
                              const std::string& text) -> const data::Tokens& {
    if (!kept.empty()) return kept;
    made = t.tokenize(text);
    return made;
  };
  if (src_vocab && tgt_vocab) {  // resuming or starting from a model directory: its vocabularies, never rebuilt
    ds.src_vocab = *src_vocab;
    ds.tgt_vocab = *tgt_vocab;
    if (ds.src_tokenizer.is_spm()) check_tokenizer_vocab(ds.src_vocab, ds.src_tokenizer);
    if (ds.tgt_tokenizer.is_spm()) check_tokenizer_vocab(ds.tgt_vocab, ds.tgt_tokenizer);
  } else if (c.joint_vocab && !ds.src_tokenizer.is_spm()) {  // one vocabulary of both sides' tokens
    data::TokenCounts both;
    for (const auto& p : train.pairs) {
      both.add(tokens(ds.src_tokenizer, p.src, p.src_text));
      both.add(tokens(ds.tgt_tokenizer, p.tgt, p.tgt_text));
    }
    ds.src_vocab = ds.tgt_vocab = data::build_vocab(both, c.src_tokens);
  } else {
    data::TokenCounts s, t;
    for (const auto& p : train.pairs) {
      if (!ds.src_tokenizer.is_spm()) s.add(tokens(ds.src_tokenizer, p.src, p.src_text));
      if (!ds.tgt_tokenizer.is_spm()) t.add(tokens(ds.tgt_tokenizer, p.tgt, p.tgt_text));
    }
    ds.src_vocab = ds.src_tokenizer.is_spm() ? ds.src_tokenizer.vocab() : data::build_vocab(s, c.src_tokens);
    ds.tgt_vocab = ds.tgt_tokenizer.is_spm() ? ds.tgt_tokenizer.vocab() : data::build_vocab(t, c.tgt_tokens);
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
  // Appends d's pairs, encoded, to `examples`; with `release`, each pair keeps only its line number once encoded.
  const auto encode = [&](data::TsvData& d, std::vector<data::Example>& examples, bool release) {
    examples.reserve(d.pairs.size());
    for (auto& p : d.pairs) {
      std::vector<int32_t> src =
          encode_side(ds.src_vocab, tokens(ds.src_tokenizer, p.src, p.src_text), d, p.line, "source");
      examples.push_back({std::move(src),
                          encode_side(ds.tgt_vocab, tokens(ds.tgt_tokenizer, p.tgt, p.tgt_text), d, p.line, "target")});
      if (release) {
        const int64_t line = p.line;
        p = data::TextPair();
        p.line = line;
      }
    }
  };
  // Tokens the vocabularies lack became <unk>: in the validation file, characters the training file never had; in
  // either, those an spm model left out (SentencePiece's character_coverage, 0.9995, drops the rarest).
  const auto note_unknown = [&](const data::TsvData& d, const std::vector<data::Example>& examples) {
    int64_t src_unk = 0, tgt_unk = 0, lines = 0, first = 0;
    for (size_t i = 0; i < examples.size(); ++i) {
      const data::Example& e = examples[i];
      const auto s = std::count(e.src.begin(), e.src.end(), ds.src_vocab.unk_id());
      const auto t = std::count(e.tgt.begin(), e.tgt.end(), ds.tgt_vocab.unk_id());
      if (s + t == 0) continue;
      src_unk += s, tgt_unk += t;
      if (lines++ == 0) first = d.pairs[i].line;
    }
    if (lines > 0)
      ds.notes.push_back(d.path + ": " + std::to_string(src_unk) + " source and " + std::to_string(tgt_unk) +
                         " target tokens are not in the vocabulary and read as <unk>, on " + std::to_string(lines) +
                         " of " + std::to_string(examples.size()) + " lines (the first: line " + std::to_string(first) +
                         ")" +
                         (ds.src_tokenizer.is_spm() || ds.tgt_tokenizer.is_spm()
                              ? "; an spm model leaves out the rarest characters of its training text"
                              : ""));
  };
  encode(train, ds.train, true);
  note_unknown(train, ds.train);
  train = data::TsvData();
  data::TsvData valid = data::read_tsv(c.valid_path, o);
  if (!valid.problems.empty()) ds.notes.push_back(valid.summary());
  encode(valid, ds.valid, false);
  note_unknown(valid, ds.valid);
  ds.valid_set = tsv_eval_set(std::move(valid));
  return ds;
}

}  // namespace tfm::train
