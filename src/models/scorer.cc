// src/models/scorer.cc — the teacher-forced scorer: batches of pairs or windows, parts, records and
// their replay (src/models/scorer.h).
#include "models/scorer.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tfm/inference.h"

namespace tfm::detail {
namespace {

// Appends one batch's record (layout in scorer.h) for logits (B, T, V) against b.tgt_out (B, T).
void record_batch(const data::TokenBatch& b, const Tensor& logits, int32_t ignore_id, int32_t unk_id,
                  std::vector<double>& rec) {
  const int64_t V = logits.size(-1);
  if (logits.numel() != b.B * b.T * V)
    throw std::logic_error("scorer: logits of " + std::to_string(logits.numel()) + " values for a batch of (" +
                           std::to_string(b.B) + ", " + std::to_string(b.T) + ") targets and " + std::to_string(V) +
                           " classes");
  const size_t head = rec.size();
  rec.insert(rec.end(), 4, 0.0);
  double n = 0, correct = 0, rows_ok = 0;
  const float* lp = logits.data();
  // Every position's log-softmax statistics at once, rows in parallel (padding's too: cheaper than
  // gathering the targeted rows first).
  const int64_t rows = b.B * b.T;
  std::vector<double> lse(static_cast<size_t>(rows));
  std::vector<int64_t> argmax(static_cast<size_t>(rows));
  kernels::log_softmax_rows(lp, rows, V, lse.data(), argmax.data());
  for (int64_t r = 0; r < b.B; ++r) {
    bool all = true;
    for (int64_t t = 0; t < b.T; ++t) {
      const int32_t y = b.tgt_out[static_cast<size_t>(r * b.T + t)];
      if (y == ignore_id) continue;
      if (y < 0 || y >= V)
        throw std::invalid_argument("scorer: target id " + std::to_string(y) + " outside the " + std::to_string(V) +
                                    " classes of the logits");
      const int64_t i = r * b.T + t;
      rec.push_back(lse[static_cast<size_t>(i)] - static_cast<double>(lp[i * V + y]));
      n += 1;
      const bool right = argmax[static_cast<size_t>(i)] == y && y != unk_id;
      correct += right;
      all = all && right;
    }
    rows_ok += all;
  }
  rec[head] = n, rec[head + 1] = correct, rec[head + 2] = static_cast<double>(b.B), rec[head + 3] = rows_ok;
}

}  // namespace

ScoreBatches pair_batches(const ModelConfig& config, const std::vector<data::Example>& examples, int64_t batch_size) {
  data::BatchSettings bs;
  bs.batch_size = batch_size;
  auto plan = std::make_shared<const data::BatchPlan>(data::plan_eval(examples, bs));
  ScoreBatches out;
  out.count = static_cast<int64_t>(plan->size());
  out.ignore_id = config.pad_id;
  out.make = [&examples, plan, layout = config.target_layout(), pad = config.pad_id, bos = config.bos_id,
              eos = config.eos_id](int64_t k) {
    return data::make_batch(examples, (*plan)[static_cast<size_t>(k)], layout, pad, bos, eos);
  };
  return out;
}

ScoreBatches window_batches(const data::TextCorpus& corpus, int64_t block_size, int64_t batch_size) {
  ScoreBatches out;
  out.count = data::validation_batch_count(corpus, block_size, batch_size);
  out.make = [&corpus, block_size, batch_size](int64_t k) {
    return data::validation_windows(corpus, block_size, batch_size, k);
  };
  return out;
}

void ScoreSums::replay_batch(const std::vector<double>& rec, size_t& at) {
  if (rec.size() - at < 4) throw std::invalid_argument("scorer: a part's record is cut short");
  const double n = rec[at], n_correct = rec[at + 1], n_rows = rec[at + 2], n_rows_ok = rec[at + 3];
  at += 4;
  if (!(n >= 0) || static_cast<double>(rec.size() - at) < n)
    throw std::invalid_argument("scorer: a part's record is cut short");
  const size_t end = at + static_cast<size_t>(n);
  for (; at < end; ++at) loss_sum += rec[at];
  tokens += static_cast<int64_t>(n);
  correct += static_cast<int64_t>(n_correct);
  rows += static_cast<int64_t>(n_rows);
  rows_correct += static_cast<int64_t>(n_rows_ok);
}

void score_part(const Model& model, const ScoreBatches& batches, int part, int parts,
                const std::function<void(const std::vector<double>& record)>& take) {
  if (parts < 1 || part < 0 || part >= parts)
    throw std::invalid_argument("scorer: part " + std::to_string(part) + " of " + std::to_string(parts) +
                                " (expected 0 <= part < parts)");
  InferenceMode scope(InferenceMode::current_precision());  // no tape; weights packed once for all batches
  EvalModeGuard eval(model);
  std::vector<double> rec;
  for (int64_t k = part; k < batches.count; k += parts) {
    const data::TokenBatch b = batches.make(k);
    rec.clear();
    record_batch(b, model.forward(b), batches.ignore_id, batches.unk_id, rec);  // logits (B, T, V)
    take(rec);
  }
}

std::vector<double> score_part(const Model& model, const ScoreBatches& batches, int part, int parts) {
  std::vector<double> out;
  score_part(model, batches, part, parts, [&](const std::vector<double>& rec) { out.insert(out.end(), rec.begin(), rec.end()); });
  return out;
}

ScoreSums replay_parts(const std::vector<std::vector<double>>& parts) {
  const size_t P = parts.size();
  if (P == 0) throw std::invalid_argument("scorer: no parts to replay");
  std::vector<size_t> at(P, 0);
  ScoreSums sums;
  // Batch k is part k % P's; the first part out of batches marks the end (the shares differ by at most
  // one batch, the earlier parts taking the extra ones).
  for (size_t k = 0; at[k % P] < parts[k % P].size(); ++k) sums.replay_batch(parts[k % P], at[k % P]);
  for (size_t p = 0; p < P; ++p)
    if (at[p] != parts[p].size())
      throw std::invalid_argument("scorer: part " + std::to_string(p) +
                                  " has more batches than the round-robin split gives it");
  return sums;
}

ScoreSums score(const Model& model, const ScoreBatches& batches) {
  ScoreSums sums;
  score_part(model, batches, 0, 1, [&](const std::vector<double>& rec) {
    size_t at = 0;
    sums.replay_batch(rec, at);
  });
  return sums;
}

}  // namespace tfm::detail
