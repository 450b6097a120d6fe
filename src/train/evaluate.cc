// src/train/evaluate.cc — evaluation sets, decoded metrics and the teacher-forced figures
// (tfm/train/evaluate.h).
#include "tfm/train/evaluate.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "tfm/inference.h"
#include "tfm/train/comm.h"
#include "tfm/train/trainer.h"

namespace tfm::train {

EvalSet group_references(const std::vector<data::Tokens>& sources, const std::vector<data::Tokens>& targets) {
  if (sources.size() != targets.size()) throw std::invalid_argument("group_references: sources and targets differ in count");
  EvalSet set;
  std::map<data::Tokens, size_t> where;  // source → its entry
  for (size_t i = 0; i < sources.size(); ++i) {
    auto [it, fresh] = where.emplace(sources[i], set.sources.size());
    if (fresh) {
      set.sources.push_back(sources[i]);
      set.references.emplace_back();
    }
    set.references[it->second].push_back(targets[i]);
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

EvalSet tsv_eval_set(const data::TsvData& tsv) {
  std::vector<data::Tokens> s, t;
  for (const auto& p : tsv.pairs) s.push_back(p.src), t.push_back(p.tgt);
  return group_references(s, t);
}

EvalSet task_test_set(const TrainedModel& m, data::Task task, std::optional<uint64_t> seed, int64_t count) {
  if (m.src_vocab.tokens() != data::task_vocab().tokens())
    throw std::invalid_argument(m.dir + " was not trained on a built-in task (its vocabulary differs)");
  return task_eval_set(task, seed ? *seed : load_train_config(m.dir).seed, data::Split::TEST, count);
}

EvalSet tsv_test_set(const TrainedModel& m, const std::string& path, std::string* note) {
  data::TsvOptions opt;
  opt.src_tokens = m.src_tokens;
  opt.tgt_tokens = m.tgt_tokens;
  opt.max_tokens = load_train_config(m.dir).max_tokens;
  const data::TsvData d = data::read_tsv(path, opt);
  if (note) *note = d.problems.empty() ? std::string() : d.summary();
  return tsv_eval_set(d);
}

Metrics evaluate(const Model& model, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, const EvalSet& set,
                 int beam, int64_t batch_size, const std::function<std::string(const data::Tokens&)>& detokenize) {
  if (set.sources.size() != set.references.size())
    throw std::invalid_argument("evaluate: sources and references differ in count");
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(set.sources.size());
  for (const auto& s : set.sources) ids.push_back(src_vocab.encode(s));
  const auto pred = predict(model, tgt_vocab, ids, beam, batch_size);
  Metrics m;
  std::vector<std::string> ref_texts;
  for (size_t i = 0; i < set.sources.size(); ++i) {
    m.add(pred[i], set.references[i]);
    ref_texts.clear();
    for (const auto& r : set.references[i]) ref_texts.push_back(detokenize(r));
    m.add_text(detokenize(pred[i]), ref_texts);
  }
  return m;
}

Metrics evaluate(const TrainedModel& m, const EvalSet& set, int beam, int64_t batch_size,
                 const std::function<std::string(const data::Tokens&)>& detokenize) {
  return evaluate(*m.model, m.src_vocab, m.tgt_vocab, set, beam, batch_size, detokenize);
}

namespace {

// Visits every non-pad target of a batch in order. logits (B, T, V); per target
// loss_i = lse(logits_i) − logits_i[y_i], the lse taken around the row's maximum (the argmax, which
// the accuracies need too) in double: token(loss_i, argmax == y) for each target, row(all right)
// after each row.
template <class Token, class Row>
void scan_targets(const data::TokenBatch& b, const Tensor& logits, int32_t pad_id, Token&& token, Row&& row_end) {
  const int64_t V = logits.size(-1);
  const float* lp = logits.data();
  for (int64_t r = 0; r < b.B; ++r) {
    bool all = true;
    for (int64_t t = 0; t < b.T; ++t) {
      const int32_t y = b.tgt_out[static_cast<size_t>(r * b.T + t)];
      if (y == pad_id) continue;
      const float* row = lp + (r * b.T + t) * V;
      int64_t arg = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[arg]) arg = v;
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]) - row[arg]);
      const double loss = std::log(s) + row[arg] - row[y];
      token(loss, arg == y);
      all = all && arg == y;
    }
    row_end(all);
  }
}

// Teacher-forced sums over batches: the losses added one by one into a running double, in batch
// order and within a batch in (row, position) order.
struct TeacherForcedSums {
  double loss_sum = 0;
  int64_t tokens = 0, correct = 0, seqs = 0, seq_ok = 0;

  void add(const data::TokenBatch& b, const Tensor& logits, int32_t pad_id) {
    scan_targets(
        b, logits, pad_id,
        [&](double loss, bool ok) {
          loss_sum += loss;
          ++tokens;
          correct += ok;
        },
        [&](bool all) {
          ++seqs;
          seq_ok += all;
        });
  }
  TeacherForced result() const {
    TeacherForced r;
    r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
    r.token_accuracy = tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0;
    r.sequence_accuracy = seqs ? static_cast<double>(seq_ok) / static_cast<double>(seqs) : 0.0;
    return r;
  }
};

// Appends one batch's record to a part's (layout in evaluate.h): [n, correct, rows, rows all right,
// loss_1 … loss_n]. The counts are whole numbers far below 2^53, exact in double.
void record_batch(const data::TokenBatch& b, const Tensor& logits, int32_t pad_id, std::vector<double>& out) {
  const size_t head = out.size();
  out.insert(out.end(), 4, 0.0);
  double n = 0, correct = 0, rows = 0, rows_ok = 0;
  scan_targets(
      b, logits, pad_id,
      [&](double loss, bool ok) {
        out.push_back(loss);
        n += 1;
        correct += ok;
      },
      [&](bool all) {
        rows += 1;
        rows_ok += all;
      });
  out[head] = n, out[head + 1] = correct, out[head + 2] = rows, out[head + 3] = rows_ok;
}

void check_parts(int part, int parts) {
  if (parts < 1 || part < 0 || part >= parts)
    throw std::invalid_argument("teacher-forced evaluation: part " + std::to_string(part) + " of " +
                                std::to_string(parts) + " (expected 0 <= part < parts)");
}

// Seconds since construction.
struct Stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// Every rank's record gathered in rank order, then replayed. The ranks started their shares together
// (they left the step's exchange together) and the shares differ by one batch at most, so each
// waits for the others --comm-timeout plus twice the `share_seconds` its own share took: an
// evaluation however long does not trip the timeout, and a rank stopped or stuck during it is still
// detected.
TeacherForced gather_and_replay(Comm& comm, const std::vector<double>& mine, double share_seconds) {
  struct Grace {  // the timeout raised for the gather, restored however it ends
    Comm& c;
    const double saved;
    Grace(Comm& comm, double extra) : c(comm), saved(comm.timeout()) { c.set_timeout(saved + extra); }
    ~Grace() { c.set_timeout(saved); }
  } grace(comm, 2 * share_seconds);
  const int P = comm.size();
  const double n = static_cast<double>(mine.size());
  std::vector<double> sizes(static_cast<size_t>(P));
  comm.allgather(&n, 1, sizes.data(), /*timed=*/true);
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

}  // namespace

std::vector<double> teacher_forced_part(Model& model, const std::vector<data::Example>& examples, int64_t batch_size,
                                        int part, int parts) {
  check_parts(part, parts);
  InferenceMode scope;
  model.eval();
  const ModelConfig& m = model.config();
  data::BatchSettings bs;
  bs.batch_size = batch_size;
  const data::BatchPlan plan = data::plan_eval(examples, bs);
  std::vector<double> out;
  for (size_t k = static_cast<size_t>(part); k < plan.size(); k += static_cast<size_t>(parts)) {
    const data::TokenBatch b = data::make_batch(examples, plan[k], m.target_layout(), m.pad_id, m.bos_id, m.eos_id);
    record_batch(b, model.forward(b), m.pad_id, out);  // logits (B, T, V)
  }
  model.train();
  return out;
}

std::vector<double> teacher_forced_text_part(Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                             int64_t batch_size, int part, int parts) {
  check_parts(part, parts);
  InferenceMode scope;
  model.eval();
  std::vector<double> out;
  const int64_t batches = data::validation_batch_count(corpus, block_size, batch_size);
  for (int64_t k = part; k < batches; k += parts) {
    const data::TokenBatch b = data::validation_windows(corpus, block_size, batch_size, k);
    record_batch(b, model.forward(b), model.config().pad_id, out);  // logits (B, T, V)
  }
  model.train();
  return out;
}

TeacherForced teacher_forced_replay(const std::vector<std::vector<double>>& parts) {
  const size_t P = parts.size();
  if (P == 0) throw std::invalid_argument("teacher_forced_replay: no parts");
  std::vector<size_t> at(P, 0);
  TeacherForcedSums sums;
  // Batch k is part k % P's; the first part out of batches marks the end (shares differ by at most
  // one batch, earlier parts taking the extra ones).
  for (size_t k = 0;; ++k) {
    const std::vector<double>& rec = parts[k % P];
    size_t& i = at[k % P];
    if (i == rec.size()) break;
    if (rec.size() - i < 4) throw std::invalid_argument("teacher_forced_replay: a part's record is cut short");
    const double n = rec[i], correct = rec[i + 1], rows = rec[i + 2], rows_ok = rec[i + 3];
    i += 4;
    if (n < 0 || static_cast<double>(rec.size() - i) < n)
      throw std::invalid_argument("teacher_forced_replay: a part's record is cut short");
    const size_t end = i + static_cast<size_t>(n);
    for (; i < end; ++i) sums.loss_sum += rec[i];
    sums.tokens += static_cast<int64_t>(n);
    sums.correct += static_cast<int64_t>(correct);
    sums.seqs += static_cast<int64_t>(rows);
    sums.seq_ok += static_cast<int64_t>(rows_ok);
  }
  for (size_t p = 0; p < P; ++p)
    if (at[p] != parts[p].size())
      throw std::invalid_argument("teacher_forced_replay: part " + std::to_string(p) +
                                  " has more batches than the round-robin split gives it");
  return sums.result();
}

TeacherForced evaluate_teacher_forced(Model& model, const std::vector<data::Example>& examples, int64_t batch_size,
                                      Comm* comm) {
  if (comm && !comm->single()) {
    const Stopwatch share;
    const std::vector<double> mine = teacher_forced_part(model, examples, batch_size, comm->rank(), comm->size());
    return gather_and_replay(*comm, mine, share.seconds());
  }
  InferenceMode scope;  // float32, weights packed once for all batches
  model.eval();
  const ModelConfig& m = model.config();
  data::BatchSettings bs;
  bs.batch_size = batch_size;
  TeacherForcedSums sums;
  for (const auto& idx : data::plan_eval(examples, bs)) {
    const data::TokenBatch b = data::make_batch(examples, idx, m.target_layout(), m.pad_id, m.bos_id, m.eos_id);
    sums.add(b, model.forward(b), m.pad_id);  // logits (B, T, V)
  }
  model.train();
  return sums.result();
}

TeacherForced evaluate_teacher_forced_text(Model& model, const data::TextCorpus& corpus, int64_t block_size,
                                           int64_t batch_size, Comm* comm) {
  if (comm && !comm->single()) {
    const Stopwatch share;
    const std::vector<double> mine =
        teacher_forced_text_part(model, corpus, block_size, batch_size, comm->rank(), comm->size());
    return gather_and_replay(*comm, mine, share.seconds());
  }
  InferenceMode scope;
  model.eval();
  TeacherForcedSums sums;
  const int64_t batches = data::validation_batch_count(corpus, block_size, batch_size);
  for (int64_t k = 0; k < batches; ++k) {
    const data::TokenBatch b = data::validation_windows(corpus, block_size, batch_size, k);
    sums.add(b, model.forward(b), model.config().pad_id);  // logits (B, T, V)
  }
  model.train();
  return sums.result();
}

}  // namespace tfm::train
