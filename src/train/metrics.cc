// src/train/metrics.cc — edit distance and corpus metrics (see tfm/train/metrics.h).
#include "tfm/train/metrics.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tfm::train {

// Wagner–Fischer: row[j] = distance(a[0..i), b[0..j)), updated one i at a time:
//   d(i, j) = min(d(i−1, j) + 1, d(i, j−1) + 1, d(i−1, j−1) + [a[i−1] ≠ b[j−1]]).
int64_t edit_distance(const data::Tokens& a, const data::Tokens& b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diag = row[0];  // d(i−1, j−1)
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t up = row[j];  // d(i−1, j)
      row[j] = std::min({up + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

double Metrics::token_accuracy() const {
  return reference_tokens ? static_cast<double>(correct_tokens) / static_cast<double>(reference_tokens) : 0.0;
}
double Metrics::sequence_accuracy() const {
  return examples ? static_cast<double>(exact) / static_cast<double>(examples) : 0.0;
}
double Metrics::token_error_rate() const {
  return reference_tokens ? static_cast<double>(edits) / static_cast<double>(reference_tokens) : 0.0;
}

void Metrics::add(const data::Tokens& prediction, const std::vector<data::Tokens>& references) {
  if (references.empty()) throw std::invalid_argument("metrics: an example needs at least one reference");
  size_t best = 0;
  int64_t best_d = edit_distance(prediction, references[0]);
  for (size_t r = 1; r < references.size() && best_d > 0; ++r) {
    const int64_t d = edit_distance(prediction, references[r]);
    if (d < best_d) best = r, best_d = d;
  }
  const data::Tokens& ref = references[best];
  int64_t correct = 0;
  for (size_t i = 0; i < ref.size() && i < prediction.size(); ++i) correct += prediction[i] == ref[i];
  ++examples;
  exact += best_d == 0;
  edits += best_d;
  correct_tokens += correct;
  reference_tokens += static_cast<int64_t>(ref.size());
}

void Metrics::add_text(const std::string& prediction, const std::vector<std::string>& references) {
  bleu_stats.add(prediction, references);
  chrf_stats.add(prediction, references);
}

void Metrics::add(const Metrics& part) {
  examples += part.examples;
  exact += part.exact;
  correct_tokens += part.correct_tokens;
  reference_tokens += part.reference_tokens;
  edits += part.edits;
  truncated += part.truncated;
  skipped += part.skipped;
  bleu_stats += part.bleu_stats;
  chrf_stats += part.chrf_stats;
}

std::string Metrics::to_json() const {
  nlohmann::ordered_json j;
  j["token_accuracy"] = token_accuracy();
  j["sequence_accuracy"] = sequence_accuracy();
  j["token_error_rate"] = token_error_rate();
  j["sequence_error_rate"] = sequence_error_rate();
  j["examples"] = examples;
  j["bleu"] = bleu();
  j["chrf"] = chrf();
  j["truncated"] = truncated;
  j["skipped"] = skipped;
  return j.dump();
}

}  // namespace tfm::train
