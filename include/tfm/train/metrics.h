// tfm/train/metrics.h — evaluation metrics for predicted token sequences.
//
// For each source the caller gives the prediction and every accepted reference (a source listed on
// several lines of a TSV file has several). Against the closest reference r* (least edit distance,
// first on ties):
//   exact            prediction equals some reference (not necessarily r*: equal means distance 0,
//                    so r* is then a matching one)
//   edits            Levenshtein distance(prediction, r*): insertions, deletions, substitutions
//   correct tokens   #{i < |r*| : i < |pred| and pred[i] = r*[i]}  (position-wise)
// Corpus figures (sums over examples, not means of ratios):
//   token_accuracy    = Σ correct / Σ |r*|
//   sequence_accuracy = #exact / #examples;  sequence_error_rate = 1 − sequence_accuracy
//   token_error_rate  = Σ edits / Σ |r*|     (can exceed 1 for long wrong predictions)
// On the text of prediction and references (add_text; the evaluation turns tokens into text with the
// target side's detokenizer), against all references at once, as sacreBLEU's defaults
// (tfm/train/text_metrics.h):
//   bleu  corpus BLEU, 13a tokenization, 4-grams, clipped counts, closest-length brevity penalty, 0–100
//   chrf  corpus chrF2: character 1..6-grams without whitespace, β = 2, 0–100
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfm/data/vocab.h"
#include "tfm/train/text_metrics.h"

namespace tfm::train {


// Levenshtein distance with unit costs, O(|a|·|b|) time, O(|b|) memory.
int64_t edit_distance(const data::Tokens& a, const data::Tokens& b);

struct Metrics {
  int64_t examples = 0, exact = 0, correct_tokens = 0, reference_tokens = 0, edits = 0;
  double token_accuracy() const;  // 0 when there are no reference tokens
  double sequence_accuracy() const;
  double sequence_error_rate() const { return examples ? 1.0 - sequence_accuracy() : 0.0; }
  double token_error_rate() const;
  // Predictions the decoder's length limit stopped without an end token (predict's count; evaluate sets it):
  // the front ends say that --max-len raises the limit.
  int64_t truncated = 0;
  // Lines of the test file not scored (EvalSet::skipped; evaluate sets it): a score over fewer lines than the file's.
  int64_t skipped = 0;
  BleuStats bleu_stats;  // summed over add_text
  ChrfStats chrf_stats;
  double bleu() const { return bleu_stats.score(); }  // 0–100; 0 before any add_text
  double chrf() const { return chrf_stats.score(); }  // 0–100
  // Adds one example. Throws std::invalid_argument when `references` is empty.
  void add(const data::Tokens& prediction, const std::vector<data::Tokens>& references);
  // Adds the text of one example to the BLEU and chrF statistics (it does not count in `examples`).
  // Throws std::invalid_argument when `references` is empty.
  void add_text(const std::string& prediction, const std::vector<std::string>& references);
  // Adds the figures of another part of the set (every count above is a sum over examples): the parts' figures
  // added are those of the whole.
  void add(const Metrics& part);
  // {"token_accuracy":..,"sequence_accuracy":..,"token_error_rate":..,"sequence_error_rate":..,"examples":..,
  //  "bleu":..,"chrf":..,"truncated":..,"skipped":..}
  std::string to_json() const;
};

}  // namespace tfm::train
