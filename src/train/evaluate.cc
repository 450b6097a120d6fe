// src/train/evaluate.cc — evaluation sets, decoded metrics and the teacher-forced figures
// (tfm/train/evaluate.h).
#include "tfm/train/evaluate.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include "tfm/inference.h"
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

// Teacher-forced sums over batches. logits (B, T, V); per target loss_i = lse(logits_i) − logits_i[y_i],
// the lse taken around the row's maximum (the argmax, which the accuracies need too) in double.
struct TeacherForcedSums {
  double loss_sum = 0;
  int64_t tokens = 0, correct = 0, seqs = 0, seq_ok = 0;

  void add(const data::TokenBatch& b, const Tensor& logits, int32_t pad_id) {
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
        loss_sum += std::log(s) + row[arg] - row[y];
        ++tokens;
        correct += arg == y;
        all = all && arg == y;
      }
      ++seqs;
      seq_ok += all;
    }
  }
  TeacherForced result() const {
    TeacherForced r;
    r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
    r.token_accuracy = tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0;
    r.sequence_accuracy = seqs ? static_cast<double>(seq_ok) / static_cast<double>(seqs) : 0.0;
    return r;
  }
};

}  // namespace

TeacherForced evaluate_teacher_forced(Model& model, const std::vector<data::Example>& examples, int64_t batch_size) {
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
                                           int64_t batch_size) {
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
