// tfm/train/text_metrics.h — corpus BLEU and chrF on text, as sacreBLEU 2.x computes them with its
// defaults (BLEU: tokenize 13a, 4-grams, smooth "exp", closest reference length; chrF: chrF2, character
// 6-grams, no word n-grams, whitespace excluded). Scores are 0–100.
//
// Both keep corpus-level sufficient statistics: add() one sentence at a time, `+=` to combine the
// statistics of separate batches, score() at the end (a corpus score is computed from the summed counts,
// not averaged over sentences).
//
// BLEU. Hypothesis and references are cut by rstrip (Python's whitespace) and tokenize_13a, then split
// at spaces into words. For n = 1..4:
//   total_n   = #n-grams of the hypothesis
//   matches_n = Σ over its distinct n-grams g of min(count_hyp(g), max over references count_ref(g))
// hyp_len = #words of the hypothesis; ref_len = #words of the reference whose length is closest to
// hyp_len (the shorter one on a tie). Over the corpus, with the sums c = Σ hyp_len, r = Σ ref_len:
//   BP = 1 if c ≥ r, exp(1 − r/c) if 0 < c < r, 0 if c = 0
//   p_n = 100·matches_n/total_n; where matches_n = 0, p_n = 100/(2^k·total_n), k counting such orders
//         from 1 ("exp" smoothing, mteval-v13a's)
//   BLEU = BP·exp(Σ_n ln(p_n) / 4)
// and BLEU = 0 when no n-gram matches at all, or when some total_n = 0 (fewer than n words in every
// hypothesis).
//
// chrF. Whitespace (Python's str.split set) is removed from hypothesis and reference, which are then
// sequences of Unicode code points (invalid UTF-8 bytes count one code point each). For n = 1..6:
//   hyp_n   = #character n-grams of the hypothesis, taken as 0 when the reference has none of order n
//   ref_n   = #character n-grams of the reference
//   match_n = Σ over distinct n-grams g of min(count_hyp(g), count_ref(g))
// From (summed) counts, over the "effective" orders E = {n : hyp_n > 0 and ref_n > 0}:
//   P = mean over E of match_n/hyp_n,  R = mean over E of match_n/ref_n   (P = R = 0 when E is empty)
//   chrF = 100·(1 + β²)·P·R / (β²·P + R), β = 2, and 0 when P + R = 0.
// That is, precision and recall are averaged over the orders before one F-score is taken (sacreBLEU's
// default; its eps_smoothing variant averages per-order F-scores instead). With several references a
// sentence contributes the counts of the reference whose own sentence-level chrF is highest (the first on
// a tie).
//
// To add a text metric: a statistics struct here with add(hypothesis, references), += and score(), a
// field and accessor in Metrics (tfm/train/metrics.h) with its key in Metrics::to_json, and hand-computed
// cases in tests/train/text_metrics_test.cc.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::train {

// sacreBLEU's "13a" tokenizer (mteval-v13a's): removes "<skipped>" and "-\n", turns "\n" into a space,
// unescapes &quot; &amp; &lt; &gt; (in that order, one pass each), then on " line ":
//   1. spaces around each of { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
//   2. "x." / "x," → "x . " / "x , " where x is not an ASCII digit
//   3. "." / "," followed by a non-digit y → " . y" / " , y"
//   4. "d-" → "d - " where d is an ASCII digit
// (each a left-to-right pass over non-overlapping matches, as Python's re.sub), and finally joins the
// words (split at Python's whitespace) with single spaces. Works on UTF-8 bytes; only ASCII characters
// are ever matched, so the result is the same as on code points.
std::string tokenize_13a(std::string_view line);

struct BleuStats {
  static constexpr int kOrder = 4;
  int64_t hyp_len = 0, ref_len = 0;        // Σ words of the hypotheses, Σ closest reference lengths
  std::array<int64_t, kOrder> matches{};   // clipped n-gram matches, n = 1..4
  std::array<int64_t, kOrder> totals{};    // hypothesis n-grams, n = 1..4

  // Adds one sentence (raw text; tokenized here). Throws std::invalid_argument when `references` is
  // empty.
  void add(std::string_view hypothesis, const std::vector<std::string>& references);
  BleuStats& operator+=(const BleuStats& o);
  double score() const;  // 0–100
};

struct ChrfStats {
  static constexpr int kOrder = 6;
  static constexpr double kBeta = 2;
  std::array<int64_t, kOrder> hyp{}, ref{}, match{};  // character n-gram counts, n = 1..6

  // Adds one sentence with the counts of its best reference. Throws std::invalid_argument when
  // `references` is empty.
  void add(std::string_view hypothesis, const std::vector<std::string>& references);
  ChrfStats& operator+=(const ChrfStats& o);
  double score() const;  // 0–100
};

// One corpus at once: hypotheses[i] against references[i]. Throw std::invalid_argument when the counts
// differ or a reference list is empty.
double corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references);
double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references);

}  // namespace tfm::train
