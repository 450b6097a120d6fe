// src/train/evaluate.cc — evaluation sets, decoded metrics and the teacher-forced figures
// (tfm/train/evaluate.h): the scorer of src/models/scorer.h on the trainer's batches, and for several
// processes the gather of its records (src/train/evaluate_split.h).
#include "tfm/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "models/scorer.h"
#include "quote.h"
#include "tfm/train/comm.h"
#include "tfm/train/trainer.h"
#include "train/evaluate_split.h"
#include "train/text_words.h"

namespace tfm::train {

EvalSet group_references(std::vector<data::Tokens> sources, std::vector<data::Tokens> targets,
                         std::vector<std::string> target_texts) {
  if (sources.size() != targets.size()) throw std::invalid_argument("group_references: sources and targets differ in count");
  const bool texts = !target_texts.empty();
  if (texts && target_texts.size() != targets.size())
    throw std::invalid_argument("group_references: targets and their texts differ in count");
  EvalSet set;
  // source → its entry; keyed by the entry's index (the source itself lives in set.sources, moved there once)
  const auto before = [&](size_t a, size_t b) { return set.sources[a] < set.sources[b]; };
  std::set<size_t, decltype(before)> entries(before);
  for (size_t i = 0; i < sources.size(); ++i) {
    set.sources.push_back(std::move(sources[i]));  // a candidate entry: kept if its source is new
    size_t entry = set.sources.size() - 1;
    if (auto [it, fresh] = entries.insert(entry); fresh) {
      set.references.emplace_back();
      if (texts) set.reference_texts.emplace_back();
    } else {
      entry = *it;
      set.sources.pop_back();
    }
    set.references[entry].push_back(std::move(targets[i]));
    if (texts) set.reference_texts[entry].push_back(std::move(target_texts[i]));
  }
  return set;
}

EvalSet task_eval_set(data::Task task, uint64_t seed, data::Split split, int64_t count) {
  const data::Vocab v = data::task_vocab();
  const auto strings = [&](const std::vector<int32_t>& ids) {
    data::Tokens t;
    for (int32_t id : ids) t.push_back(v.token(id));
    return t;
  };
  EvalSet set;
  for (const auto& e : data::make_task_set(task, seed, split, count)) {
    set.sources.push_back(strings(e.src));
    set.references.push_back({strings(e.tgt)});
  }
  return set;
}

EvalSet tsv_eval_set(data::TsvData tsv) {
  std::vector<data::Tokens> s, t;
  std::vector<std::string> texts;
  s.reserve(tsv.pairs.size()), t.reserve(tsv.pairs.size()), texts.reserve(tsv.pairs.size());
  for (auto& p : tsv.pairs)
    s.push_back(std::move(p.src)), t.push_back(std::move(p.tgt)), texts.push_back(std::move(p.tgt_text));
  tsv = data::TsvData();
  return group_references(std::move(s), std::move(t), std::move(texts));
}

namespace {
// The "train" section of m's config.json (the run that wrote it), its errors said of that file.
TrainConfig run_config(const TrainedModel& m) {
  try {
    return TrainConfig::from_json(m.train_json);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(model_dir::path(m.dir, model_dir::CONFIG) + ": " + e.what());
  }
}
}  // namespace

EvalSet task_test_set(const TrainedModel& m, data::Task task, std::optional<uint64_t> seed, int64_t count) {
  if (count < 1) throw std::invalid_argument("count (--count) must be ≥ 1 task sequences, got " + std::to_string(count));
  if (m.src_vocab.tokens() != data::task_vocab().tokens())
    throw std::invalid_argument(m.dir + " was not trained on a built-in task (its vocabulary differs)");
  return task_eval_set(task, seed ? *seed : run_config(m).seed, data::Split::TEST, count);
}

namespace {

// The code points of s as byte ranges [begin, end) with their values (next_code_point: a byte outside a valid UTF-8
// sequence is one range of its own, valued 0xDC00 + byte).
struct CodePoint {
  size_t begin, end;
  char32_t value;
};
std::vector<CodePoint> code_points(std::string_view s) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    const char32_t value = next_code_point(s, i);
    out.push_back({begin, i, value});
  }
  return out;
}

// The words of s (Python's s.split()) joined by single spaces. Two texts with the same words differ in whitespace
// only, which neither BLEU (13a words) nor chrF (characters without whitespace) sees.
std::string words(std::string_view s) { return join_words(split_words(s)); }

// `from` and `to` quoted around the part where they differ (the span from the first differing code point to the
// last), so that a change a terminal shows as nothing is seen: in that part every non-ASCII code point is written
// \u{hex} (NFD "e\u{301}" against NFC "\u{e9}", a no-break space "\u{a0}"); up to kContext code points on either
// side as they are, "..." where either text goes on.
std::pair<std::string, std::string> quote_difference(const std::string& from, const std::string& to) {
  constexpr size_t kContext = 16, kMaxChanged = 24;
  const std::vector<CodePoint> a = code_points(from), b = code_points(to);
  const auto same = [&](size_t i, size_t j) {
    return from.compare(a[i].begin, a[i].end - a[i].begin, to, b[j].begin, b[j].end - b[j].begin) == 0;
  };
  size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && same(prefix, prefix)) ++prefix;
  size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix && same(a.size() - 1 - suffix, b.size() - 1 - suffix))
    ++suffix;
  const auto quote = [&](const std::string& s, const std::vector<CodePoint>& c) {
    const size_t first = prefix > kContext ? prefix - kContext : 0, changed_end = c.size() - suffix;
    const size_t last = std::min(c.size(), changed_end + kContext);
    const auto bytes = [&](size_t i, size_t j) { return i < j ? s.substr(c[i].begin, c[j - 1].end - c[i].begin) : ""; };
    std::string out = "'";
    if (first > 0) out += "...";
    out += escape_text(bytes(first, prefix), kMaxQuoted);
    for (size_t i = prefix; i < changed_end; ++i) {
      if (i - prefix == kMaxChanged) {
        out += "...";
        break;
      }
      if (c[i].value < 0x80 || (c[i].value >= 0xDC80 && c[i].value <= 0xDCFF)) {
        out += escape_text(bytes(i, i + 1), kMaxQuoted);  // ASCII as it is (control bytes \xHH), a stray byte \xHH
      } else {
        char hex[16];
        std::snprintf(hex, sizeof hex, "\\u{%x}", static_cast<unsigned>(c[i].value));
        out += hex;
      }
    }
    out += escape_text(bytes(changed_end, last), kMaxQuoted);
    if (last < c.size()) out += "...";
    return out + "'";
  };
  return {quote(from, a), quote(to, b)};
}

}  // namespace

EvalSet tsv_test_set(const TrainedModel& m, const std::string& path, std::string* note, bool strict) {
  data::TsvOptions opt;
  opt.src_tokens = m.src_tokenizer;
  opt.tgt_tokens = m.tgt_tokenizer;
  // Every line the model can take is scored whatever its length (the training's --max-tokens filtered what the model
  // learned from, not what it is judged on): a target of any length, a source up to the model's max_len (a longer
  // one is skipped and noted as over-long, counted before its tokens are made, as any line the reader skips). A
  // char, space or byte side comes as its text only, tokenized here.
  opt.max_tokens = std::numeric_limits<int64_t>::max();
  opt.max_src_tokens = require_model(m).config().max_len;
  opt.keep_tokens = false;
  opt.strict = strict;
  // An encoder predicts one token per source token: a pair of unequal lengths is skipped (and noted), as training
  // skips it, rather than scored on the reference's length only.
  opt.equal_lengths = m.model->config().target_layout() == data::TargetLayout::PER_POSITION;
  data::TsvData d = data::read_tsv(path, opt);
  if (note) *note = d.problems.empty() ? std::string() : d.summary();
  int64_t changed = 0, first_line = 0, src_unknown = 0, tgt_unknown = 0, unknown_lines = 0, first_unknown = 0;
  std::string first_from, first_to;
  for (auto& p : d.pairs) {
    if (!m.src_tokenizer.has_vocab()) p.src = m.src_tokenizer.tokenize(p.src_text);  // the reader checked the text
    if (!m.tgt_tokenizer.has_vocab()) p.tgt = m.tgt_tokenizer.tokenize(p.tgt_text);
    std::vector<int32_t> ids;
    try {
      ids = m.src_vocab.encode(p.src);
    } catch (const std::invalid_argument& e) {
      throw data::DataError(path + ":" + std::to_string(p.line) + ": source " + e.what());
    }
    // Tokens the vocabularies lack: a source's are read as <unk>; a target's the model can never write.
    const auto s = std::count(ids.begin(), ids.end(), m.src_vocab.unk_id());
    const auto t = std::count_if(p.tgt.begin(), p.tgt.end(), [&](const std::string& token) {
      return !m.tgt_vocab.contains(token) || token == data::Vocab::UNK;
    });
    if (s + t > 0) {
      src_unknown += s, tgt_unknown += t;
      if (unknown_lines++ == 0) first_unknown = p.line;
    }
    // Targets the tokenizer changes beyond whitespace (spm's NFKC): the output can only ever be the changed form.
    const std::string as_tokens = data::detokenize(p.tgt, m.tgt_tokenizer);
    if (words(as_tokens) != words(p.tgt_text) && changed++ == 0)
      first_line = p.line, first_from = p.tgt_text, first_to = as_tokens;
  }
  if (note && unknown_lines > 0) {
    if (!note->empty()) *note += "\n";
    *note += path + ": " + std::to_string(src_unknown) + " source and " + std::to_string(tgt_unknown) +
             " target tokens are not in the model's vocabulary, on " + std::to_string(unknown_lines) + " of " +
             std::to_string(d.pairs.size()) + " lines (the first: line " + std::to_string(first_unknown) +
             "): a source reads them as <unk>, and a target holding one can never be matched";
  }
  if (note && changed > 0) {
    const auto [from, to] = quote_difference(first_from, first_to);
    if (!note->empty()) *note += "\n";
    *note += path + ": " + std::to_string(changed) + " of " + std::to_string(d.pairs.size()) +
             " targets change under the model's target tokenizer (line " + std::to_string(first_line) + ": " + from +
             " becomes " + to +
             "): BLEU and chrF score against the targets as written, which the output cannot reproduce; the "
             "token and sequence accuracies compare the tokenized forms";
  }
  const auto skipped = static_cast<int64_t>(d.problems.size());
  EvalSet set = tsv_eval_set(std::move(d));
  set.skipped = skipped;
  return set;
}

Metrics evaluate(const Model& model, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, const EvalSet& set,
                 const DecodeOptions& decode, int64_t batch_size,
                 const std::function<std::string(const data::Tokens&)>& detokenize) {
  if (set.sources.size() != set.references.size())
    throw std::invalid_argument("evaluate: sources and references differ in count");
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(set.sources.size());
  for (const auto& s : set.sources) ids.push_back(src_vocab.encode(s));
  Metrics m;
  m.skipped = set.skipped;
  const auto pred = predict(model, tgt_vocab, ids, decode, batch_size, 0, &m.truncated);
  std::vector<std::string> ref_texts;
  for (size_t i = 0; i < set.sources.size(); ++i) {
    m.add(pred[i], set.references[i]);
    if (!set.reference_texts.empty()) {
      m.add_text(detokenize(pred[i]), set.reference_texts[i]);
      continue;
    }
    ref_texts.clear();
    for (const auto& r : set.references[i]) ref_texts.push_back(detokenize(r));
    m.add_text(detokenize(pred[i]), ref_texts);
  }
  return m;
}

Metrics evaluate(const TrainedModel& m, const EvalSet& set, const DecodeOptions& decode, int64_t batch_size,
                 const std::function<std::string(const data::Tokens&)>& detokenize) {
  check_decode_options(m, decode);
  return evaluate(*m.model, m.src_vocab, m.tgt_vocab, set, decode, batch_size, detokenize);
}

namespace {

TeacherForced figures(const detail::ScoreSums& s) {
  TeacherForced r;
  r.loss = s.mean_loss();
  r.token_accuracy = s.tokens ? static_cast<double>(s.correct) / static_cast<double>(s.tokens) : 0.0;
  r.sequence_accuracy = s.rows ? static_cast<double>(s.rows_correct) / static_cast<double>(s.rows) : 0.0;
  return r;
}

// Seconds since construction.
struct Stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// Every rank's record gathered in rank order, then replayed. The ranks start their shares together
// (they left the step's exchange together) but finish them apart, by as much as the shares' work
// differs: a share may be a whole batch longer than another, its batches longer, or no batch at all
// (fewer batches than ranks). So the first gather, of the records' sizes, waits for the others
// --comm-timeout plus `grace` (twice the longest share's estimated time, evaluation_grace), or without a
// deadline when this rank cannot estimate it (no work of its own to time): no evaluation however long
// trips the timeout, and a rank stopped or stuck during it is still detected by the ranks that could
// estimate (rank 0 among them whenever any rank has work). The records' gather that follows finds the
// ranks together and keeps the plain timeout.
TeacherForced gather_and_replay(Comm& comm, const std::vector<double>& mine, std::optional<double> grace) {
  const int P = comm.size();
  const double n = static_cast<double>(mine.size());
  std::vector<double> sizes(static_cast<size_t>(P));
  comm.allgather(&n, 1, sizes.data(), /*timed=*/grace.has_value(),
                 "the evaluation's gather of record sizes (allgather)", grace.value_or(0));
  std::vector<int> counts(static_cast<size_t>(P)), displs(static_cast<size_t>(P));
  int total = 0;
  for (int r = 0; r < P; ++r) {
    if (sizes[static_cast<size_t>(r)] > static_cast<double>(std::numeric_limits<int>::max() - total))
      throw std::runtime_error("teacher-forced evaluation: the records of the ranks exceed 2^31 values");
    counts[static_cast<size_t>(r)] = static_cast<int>(sizes[static_cast<size_t>(r)]);
    displs[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<double> all(static_cast<size_t>(total));
  comm.allgatherv(mine.data(), static_cast<int>(mine.size()), all.data(), counts.data(), displs.data(), /*timed=*/true);
  std::vector<std::vector<double>> parts(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r)
    parts[static_cast<size_t>(r)].assign(all.begin() + displs[static_cast<size_t>(r)],
                                         all.begin() + displs[static_cast<size_t>(r)] + counts[static_cast<size_t>(r)]);
  return teacher_forced_replay(parts);
}

// The one evaluation: part 0 of 1 in one process, else this rank's part, gathered and replayed. Every
// rank sizes every part's batches (building a batch is cheap beside its forward) to estimate how long
// the others may take.
TeacherForced evaluate_batches(const Model& model, const detail::ScoreBatches& batches, Comm* comm) {
  if (!comm || comm->single()) return figures(detail::score(model, batches));
  const Stopwatch share;
  const std::vector<double> mine = detail::score_part(model, batches, comm->rank(), comm->size());
  const double seconds = share.seconds();
  std::vector<ShareWork> work(static_cast<size_t>(comm->size()));
  for (int64_t k = 0; k < batches.count; ++k) {
    const data::TokenBatch b = batches.make(k);
    work[static_cast<size_t>(k % comm->size())].add(b.B, b.S, b.T);
  }
  return gather_and_replay(*comm, mine, evaluation_grace(work, comm->rank(), seconds));
}

}  // namespace

std::vector<double> teacher_forced_part(const Model& model, const std::vector<data::Example>& examples,
                                        int64_t batch_size, int part, int parts) {
  return detail::score_part(model, detail::pair_batches(model.config(), examples, batch_size), part, parts);
}

std::vector<double> teacher_forced_text_part(const Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                             int64_t batch_size, int part, int parts) {
  return detail::score_part(model, detail::window_batches(corpus, block_size, batch_size), part, parts);
}

TeacherForced teacher_forced_replay(const std::vector<std::vector<double>>& parts) {
  return figures(detail::replay_parts(parts));
}

void ShareWork::add(int64_t B, int64_t S, int64_t T) {
  const double b = static_cast<double>(B), s = static_cast<double>(S), t = static_cast<double>(T);
  const double batch[kTerms] = {1, b * s, b * t, b * s * s, b * t * t, b * s * t};
  for (int i = 0; i < kTerms; ++i) terms[i] += batch[i];
}

std::optional<double> evaluation_grace(const std::vector<ShareWork>& shares, int own, double own_seconds) {
  if (own < 0 || own >= static_cast<int>(shares.size()))
    throw std::invalid_argument("evaluation_grace: share " + std::to_string(own) + " of " +
                                std::to_string(shares.size()) + " (expected 0 <= own < shares)");
  const ShareWork& mine = shares[static_cast<size_t>(own)];
  // A share's time is Σ_i c_i · terms[i] with c_i >= 0, so the ratio of two shares' times lies between
  // the smallest and the largest ratio of their terms: the largest bounds it from above.
  double longest = own_seconds;
  for (const ShareWork& other : shares)
    for (int i = 0; i < ShareWork::kTerms; ++i) {
      if (other.terms[i] == 0) continue;
      if (mine.terms[i] == 0) return std::nullopt;  // work of a kind this share has none of: no rate to scale
      longest = std::max(longest, own_seconds * other.terms[i] / mine.terms[i]);
    }
  return 2 * longest;
}

TeacherForced evaluate_teacher_forced(Model& model, const std::vector<data::Example>& examples, int64_t batch_size,
                                      Comm* comm, int32_t unk_id) {
  detail::ScoreBatches batches = detail::pair_batches(model.config(), examples, batch_size);
  batches.unk_id = unk_id;
  return evaluate_batches(model, batches, comm);
}

TeacherForced evaluate_teacher_forced_text(Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                           int64_t batch_size, Comm* comm, int32_t unk_id) {
  detail::ScoreBatches batches = detail::window_batches(corpus, block_size, batch_size);
  batches.unk_id = unk_id;
  return evaluate_batches(model, batches, comm);
}

}  // namespace tfm::train
