// tests/train/text_metrics_test.cc — 13a tokenization, corpus BLEU and chrF (tfm/train/text_metrics.h).
//
// Hand-computed cases first (the arithmetic in the comments), then the cross-check against an independent
// implementation: tests/fixtures/bleu/bleu.json, written by tests/gen/gen_bleu.py from perturbed lines of
// /usr/share/common-licenses, holds each text's tokenization by a Python re-statement of 13a and each
// corpus's BLEU by Debian's python3-nltk (corpus_bleu with NIST smoothing, method3 = sacreBLEU's "exp";
// see the script for why the two agree on these cases), with nltk's per-order match counts. A live test
// draws a fresh sample with a clock seed when /usr/bin/python3 has nltk.
//
// Tolerance against nltk: 1e-9 relative. Both compute BP·exp(mean of ln p_n) in double from the same
// integer counts; nltk works on the 0–1 scale with fsum and ×100 at the end, tfm in percent, so they differ
// by a few ulps (~1e-15), far below 1e-9, while any counting difference moves the score by more than 1e-4.
#include "tfm/train/text_metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tfm/train/metrics.h"

namespace tfm::train {
namespace {

using Refs = std::vector<std::string>;

// ---- 13a -------------------------------------------------------------------------------------------

TEST(Tokenize13a, PunctuationIsSplitOff) {
  EXPECT_EQ(tokenize_13a("Hello, world."), "Hello , world .");
  EXPECT_EQ(tokenize_13a("(x)[y]{z}"), "( x ) [ y ] { z }");
  EXPECT_EQ(tokenize_13a("a/b\\c|d~e^f_g`h"), "a / b \\ c | d ~ e ^ f _ g ` h");
  EXPECT_EQ(tokenize_13a("$5 100% @home #1 !!"), "$ 5 100 % @ home # 1 ! !");
  // The apostrophe and the hyphen are not in rule 1's class.
  EXPECT_EQ(tokenize_13a("it's o'clock, well-known"), "it's o'clock , well-known");
  EXPECT_EQ(tokenize_13a(""), "");
  EXPECT_EQ(tokenize_13a("  \t "), "");
}

TEST(Tokenize13a, PeriodsAndCommasStayBetweenDigits) {
  // Rule 2 splits "." / "," after a non-digit, rule 3 before a non-digit: "1,000.50" and "3.14" keep
  // theirs (digits on both sides), "3.14," loses the trailing comma.
  EXPECT_EQ(tokenize_13a("1,000.50 and 3.14, then"), "1,000.50 and 3.14 , then");
  EXPECT_EQ(tokenize_13a(".5 5. 5.5 ,5 5,"), ". 5 5 . 5.5 , 5 5 ,");
  EXPECT_EQ(tokenize_13a("3.14.15"), "3.14.15");
  EXPECT_EQ(tokenize_13a("1,a a,1 9.é"), "1 , a a , 1 9 . é");
  EXPECT_EQ(tokenize_13a("U.S.A. e.g."), "U . S . A . e . g .");
  // Matches do not overlap: in "a..b" rule 2 takes "a." and cannot start again at the second ".",
  // which rule 3 then splits before "b" → "a . . b"; likewise "x.,y".
  EXPECT_EQ(tokenize_13a("a..b"), "a . . b");
  EXPECT_EQ(tokenize_13a("x.,y"), "x . , y");
  EXPECT_EQ(tokenize_13a("..."), ". . .");
}

TEST(Tokenize13a, DashesSplitOnlyAfterADigit) {
  EXPECT_EQ(tokenize_13a("2-3 or 10-"), "2 - 3 or 10 -");
  // "5--6": rule 4 takes "5-", the second "-" follows a "-", not a digit → "5 - -6".
  EXPECT_EQ(tokenize_13a("e-mail -5 5- 5--6 é-9-"), "e-mail -5 5 - 5 - -6 é-9 -");
}

TEST(Tokenize13a, EscapesNewlinesAndSkipped) {
  // &quot; → ", &amp; → & (one pass: "&amp;quot;" becomes "&quot;", which is not unescaped again and then
  // splits at "&" and ";"), &lt; &gt; → < >; an unknown entity stays.
  EXPECT_EQ(tokenize_13a("&quot;quoted&quot; &amp;quot; &lt;b&gt; &unknown;"),
            "\" quoted \" & quot ; < b > & unknown ;");
  EXPECT_EQ(tokenize_13a("<skipped>a<skipped>b"), "ab");
  EXPECT_EQ(tokenize_13a("co-\nop line\nbreak"), "coop line break");
  EXPECT_EQ(tokenize_13a("x-\n-\ny"), "xy");
}

TEST(Tokenize13a, UnicodeWhitespaceSeparatesAndOtherCodePointsPass) {
  // Python's str.split() whitespace: no-break space, ideographic space, thin space, \v \f \r, U+001C.
  EXPECT_EQ(tokenize_13a("no\u00a0break\u3000ideographic\u2009thin"), "no break ideographic thin");
  EXPECT_EQ(tokenize_13a("tab\there\x0bv\x0c" "f\rcr\x1c" "fs"), "tab here v f cr fs");
  EXPECT_EQ(tokenize_13a("A—B «C» naïve é."), "A—B «C» naïve é .");
}

// ---- BLEU ------------------------------------------------------------------------------------------

TEST(Bleu, SmoothingOfAMissingOrder) {
  // "a b c d e" against "a b c x e":
  //   1-grams a b c d e: a b c e match → 4/5 → p1 = 80
  //   2-grams ab bc cd de: ab bc → 2/4 → p2 = 50
  //   3-grams abc bcd cde: abc → 1/3 → p3 = 100/3
  //   4-grams abcd bcde: none → first zero order, k = 1: p4 = 100/(2·2) = 25
  //   lengths 5 and 5 → BP = 1; BLEU = (80·50·(100/3)·25)^(1/4) ≈ 42.73
  BleuStats s;
  s.add("a b c d e", {"a b c x e"});
  EXPECT_EQ(s.matches, (std::array<int64_t, 4>{4, 2, 1, 0}));
  EXPECT_EQ(s.totals, (std::array<int64_t, 4>{5, 4, 3, 2}));
  EXPECT_NEAR(s.score(), std::pow(80.0 * 50 * (100.0 / 3) * 25, 0.25), 1e-12);
}

TEST(Bleu, ClippingAgainstSeveralReferences) {
  // "the" ×7 against "the cat is on the mat" and "there is a cat on the mat": "the" occurs at most twice
  // in one reference → 1-grams 2/7; "the the" never → 0/6, 0/5, 0/4 smoothed with k = 1, 2, 3:
  // p = 200/7, 100/(2·6), 100/(4·5), 100/(8·4). Lengths 6 and 7: the closest to 7 is 7 → BP = 1.
  BleuStats s;
  s.add("the the the the the the the", {"the cat is on the mat", "there is a cat on the mat"});
  EXPECT_EQ(s.matches, (std::array<int64_t, 4>{2, 0, 0, 0}));
  EXPECT_EQ(s.ref_len, 7);
  const double expected =
      std::exp((std::log(200.0 / 7) + std::log(100.0 / 12) + std::log(100.0 / 20) + std::log(100.0 / 32)) / 4);
  EXPECT_NEAR(s.score(), expected, 1e-12 * expected);
}

TEST(Bleu, BrevityPenaltyAndTheClosestReferenceLength) {
  // 5 words against references of 4 and 6 words: both 1 away, the shorter wins → r = 4, BP = 1.
  BleuStats tie;
  tie.add("a b c d e", {"a b c d e f", "a b c d"});
  EXPECT_EQ(tie.ref_len, 4);
  // Against 7 and 8 words: r = 7 > c = 5 → BP = exp(1 − 7/5); every n-gram matches (the hypothesis is
  // a prefix) → BLEU = 100·exp(−0.4).
  BleuStats bp;
  bp.add("a b c d e", {"a b c d e f g", "a b c d e f g h"});
  EXPECT_EQ(bp.ref_len, 7);
  EXPECT_NEAR(bp.score(), 100 * std::exp(1.0 - 7.0 / 5.0), 1e-12);
}

TEST(Bleu, EmptyHypothesesAndMissingOrders) {
  BleuStats empty;
  empty.add("", {"a b c d"});
  EXPECT_EQ(empty.hyp_len, 0);
  EXPECT_EQ(empty.ref_len, 4);
  EXPECT_EQ(empty.score(), 0.0);  // nothing matches
  // With a perfect second sentence: c = 0 + 4, r = 2 + 4 (the empty one's only reference has 2 words),
  // precisions 100 → BLEU = 100·exp(1 − 6/4).
  BleuStats two;
  two.add("", {"x y"});
  two.add("a b c d", {"a b c d"});
  EXPECT_NEAR(two.score(), 100 * std::exp(-0.5), 1e-12);
  // Three words: no 4-gram in the whole corpus → 0, as sacreBLEU (no smoothing of an empty order).
  BleuStats three;
  three.add("a b c", {"a b c"});
  EXPECT_EQ(three.totals[3], 0);
  EXPECT_EQ(three.score(), 0.0);
  // No match at all → 0.
  EXPECT_EQ(corpus_bleu({"w x y z"}, {{"a b c d"}}), 0.0);
  EXPECT_NEAR(corpus_bleu({"the cat sat on the mat ."}, {{"the cat sat on the mat."}}), 100.0, 1e-12);
  EXPECT_THROW(BleuStats().add("a", {}), std::invalid_argument);
  EXPECT_THROW(corpus_bleu({"a"}, {}), std::invalid_argument);
}

TEST(Bleu, StatisticsOfBatchesAdd) {
  const std::vector<std::string> h = {"a b c d e", "the the the the", "x y z w v", "1,000 people came."};
  const std::vector<Refs> r = {{"a b c x e"}, {"the cat on the mat"}, {"x y z", "x y q w v u"}, {"1,000 people came ."}};
  BleuStats all, first, second;
  for (size_t i = 0; i < h.size(); ++i) all.add(h[i], r[i]);
  for (size_t i = 0; i < 2; ++i) first.add(h[i], r[i]);
  for (size_t i = 2; i < h.size(); ++i) second.add(h[i], r[i]);
  first += second;
  EXPECT_EQ(first.matches, all.matches);
  EXPECT_EQ(first.totals, all.totals);
  EXPECT_EQ(first.hyp_len, all.hyp_len);
  EXPECT_EQ(first.ref_len, all.ref_len);
  EXPECT_EQ(first.score(), all.score());
  EXPECT_EQ(corpus_bleu(h, r), all.score());
}

// ---- chrF ------------------------------------------------------------------------------------------

TEST(Chrf, ByHand) {
  // "abc" vs "abd": order 1 {a,b,c} vs {a,b,d}: 2 of 3 each way; order 2 {ab,bc} vs {ab,bd}: 1 of 2;
  // order 3 {abc} vs {abd}: 0 of 1; orders 4–6: none. Effective orders 1–3:
  // P = R = (2/3 + 1/2 + 0)/3 = 7/18; F2 = 5PR/(4P + R) = 7/18 → 38.89.
  ChrfStats s;
  s.add("abc", {"abd"});
  EXPECT_EQ(s.hyp, (std::array<int64_t, 6>{3, 2, 1, 0, 0, 0}));
  EXPECT_EQ(s.match, (std::array<int64_t, 6>{2, 1, 0, 0, 0, 0}));
  EXPECT_NEAR(s.score(), 100.0 * 7 / 18, 1e-12);

  // Whitespace is removed: "a b" vs "ab c" are "ab" vs "abc". Order 1: hyp 2, ref 3, match 2 → P 1,
  // R 2/3; order 2: {ab} vs {ab,bc} → P 1, R 1/2; order 3: the hypothesis has none (ref 1) → not
  // effective. P = 1, R = (2/3 + 1/2)/2 = 7/12; F2 = 5·(7/12)/(4 + 7/12) = 35/55 = 7/11 → 63.64.
  ChrfStats w;
  w.add("a b", {"ab c"});
  EXPECT_EQ(w.hyp, (std::array<int64_t, 6>{2, 1, 0, 0, 0, 0}));
  EXPECT_EQ(w.ref, (std::array<int64_t, 6>{3, 2, 1, 0, 0, 0}));
  EXPECT_NEAR(w.score(), 100.0 * 7 / 11, 1e-12);

  // A reference shorter than the order zeroes the hypothesis count: "abcd" vs "ab": order 1 hyp 4,
  // ref 2, match 2; order 2 hyp 3, ref 1, match 1; order 3: the reference has no 3-gram → hyp 0, not 2.
  // P = (2/4 + 1/3)/2 = 5/12, R = (1 + 1)/2 = 1; F2 = 5·(5/12)/(4·5/12 + 1) = 25/32 → 78.125.
  ChrfStats z;
  z.add("abcd", {"ab"});
  EXPECT_EQ(z.hyp, (std::array<int64_t, 6>{4, 3, 0, 0, 0, 0}));
  EXPECT_NEAR(z.score(), 78.125, 1e-12);

  ChrfStats same, none;
  same.add("ab", {"ab"});
  EXPECT_NEAR(same.score(), 100.0, 1e-12);
  none.add("", {"abc"});  // no effective order
  EXPECT_EQ(none.score(), 0.0);
}

TEST(Chrf, CorpusAveragesOrdersOfSummedCounts) {
  // "ab"/"ab" (orders 1, 2: 2/2/2, 1/1/1) plus "abc"/"abd" (3/3/2, 2/2/1, 1/1/0): summed 5/5/4, 3/3/2,
  // 1/1/0 → P = R = (4/5 + 2/3 + 0)/3 = 22/45 → 48.89, not the mean of the sentence scores
  // ((100 + 38.89)/2 = 69.44).
  ChrfStats a, b;
  a.add("ab", {"ab"});
  b.add("abc", {"abd"});
  a += b;
  EXPECT_NEAR(a.score(), 100.0 * 22 / 45, 1e-12);
  EXPECT_NEAR(corpus_chrf({"ab", "abc"}, {{"ab"}, {"abd"}}), 100.0 * 22 / 45, 1e-12);
}

TEST(Chrf, BestReferencePerSentence) {
  // "abc" against "xyz" (chrF 0) and "abd" (38.89): the counts are "abd"'s.
  ChrfStats best, alone;
  best.add("abc", {"xyz", "abd"});
  alone.add("abc", {"abd"});
  EXPECT_EQ(best.ref, alone.ref);
  EXPECT_EQ(best.match, alone.match);
  EXPECT_EQ(best.score(), alone.score());
  // "ab" against "ab" (100) and "abab" (order 1: ref 4, match 2 → R 1/2 < 1): "ab" is chosen whether it
  // comes first or second.
  ChrfStats first, second;
  first.add("ab", {"ab", "abab"});
  second.add("ab", {"abab", "ab"});
  EXPECT_EQ(first.ref, second.ref);
  EXPECT_EQ(first.ref[0], 2);
  EXPECT_THROW(ChrfStats().add("a", {}), std::invalid_argument);
}

TEST(Chrf, CodePointsNotBytes) {
  // "café" vs "cafe" as code points: order 1 3/4, order 2 {ca,af,fé} vs {ca,af,fe} 2/3, order 3 1/2,
  // order 4 0/1 (4 effective orders) → P = R = (3/4 + 2/3 + 1/2 + 0)/4 = 23/48 → 47.92. As bytes
  // ("é" is 2) the counts would be 5 and 4 in order 1.
  ChrfStats s;
  s.add("café", {"cafe"});
  EXPECT_EQ(s.hyp[0], 4);
  EXPECT_NEAR(s.score(), 100.0 * 23 / 48, 1e-12);
  // The no-break space is whitespace (Python's), so it is removed like a space.
  EXPECT_NEAR(corpus_chrf({"ca\u00a0fé"}, {{"cafe"}}), 100.0 * 23 / 48, 1e-12);
}

TEST(TextMetrics, MetricsCarriesBleuAndChrf) {
  Metrics m;
  m.add({"a", "b"}, {{"a", "b"}});
  m.add_text("a b c d e", {"a b c x e"});
  EXPECT_EQ(m.examples, 1);  // add_text does not count examples
  EXPECT_NEAR(m.bleu(), std::pow(80.0 * 50 * (100.0 / 3) * 25, 0.25), 1e-12);
  EXPECT_EQ(m.chrf(), corpus_chrf({"a b c d e"}, {{"a b c x e"}}));
  const auto j = nlohmann::json::parse(m.to_json());
  EXPECT_EQ(j.at("bleu").get<double>(), m.bleu());
  EXPECT_EQ(j.at("chrf").get<double>(), m.chrf());
  EXPECT_EQ(j.at("examples").get<int>(), 1);
}

// ---- against nltk (tests/gen/gen_bleu.py) ------------------------------------------------------------

void check_against_nltk(const nlohmann::json& f) {
  ASSERT_EQ(f.at("format"), "tfm-bleu");
  ASSERT_EQ(f.at("version"), 1);
  ASSERT_GT(f.at("tokenize").size(), 100u);
  for (const auto& t : f.at("tokenize")) {
    const std::string text = t.at("text");
    EXPECT_EQ(tokenize_13a(text), t.at("tokens").get<std::string>()) << "text: " << text;
  }
  ASSERT_GE(f.at("corpora").size(), 9u);
  for (const auto& c : f.at("corpora")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto hyps = c.at("hypotheses").get<std::vector<std::string>>();
    const auto refs = c.at("references").get<std::vector<Refs>>();
    ASSERT_EQ(hyps.size(), refs.size());
    BleuStats s;
    for (size_t i = 0; i < hyps.size(); ++i) s.add(hyps[i], refs[i]);
    EXPECT_EQ(s.hyp_len, c.at("hyp_len").get<int64_t>());
    EXPECT_EQ(s.ref_len, c.at("ref_len").get<int64_t>());
    EXPECT_EQ(s.matches, (c.at("matches").get<std::array<int64_t, 4>>()));
    EXPECT_EQ(s.totals, (c.at("totals").get<std::array<int64_t, 4>>()));
    const double expected = c.at("bleu");
    EXPECT_GT(expected, 0.0);
    EXPECT_NEAR(s.score(), expected, 1e-9 * expected);
  }
}

TEST(BleuNltk, Fixture) {
  std::ifstream in(std::string(TFM_SOURCE_DIR) + "/tests/fixtures/bleu/bleu.json");
  ASSERT_TRUE(in) << "tests/fixtures/bleu/bleu.json missing";
  check_against_nltk(nlohmann::json::parse(in));
}

// A fresh draw. Seed from the clock (printed), or TFM_BLEU_SEED to reproduce.
TEST(BleuNltk, LiveSample) {
  if (testing::run_command("/usr/bin/python3 -c 'import nltk.translate.bleu_score' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import nltk (Debian: python3-nltk)";
  if (!std::filesystem::is_directory("/usr/share/common-licenses")) GTEST_SKIP() << "no /usr/share/common-licenses";
  uint64_t seed = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  if (const char* e = std::getenv("TFM_BLEU_SEED")) seed = std::stoull(e);
  std::cout << "live sample seed " << seed << " (reproduce: TFM_BLEU_SEED=" << seed << ")\n";
  const std::string dir = testing::temp_dir("bleu_live");
  const std::string out = dir + "/bleu.json";
  std::string log;
  ASSERT_EQ(testing::run_command("/usr/bin/python3 '" + std::string(TFM_SOURCE_DIR) + "/tests/gen/gen_bleu.py' --seed " +
                                     std::to_string(seed) + " --out '" + out + "'",
                                 &log),
            0)
      << "seed " << seed << ": generator failed:\n" << log;
  std::ifstream in(out);
  SCOPED_TRACE("seed " + std::to_string(seed));
  check_against_nltk(nlohmann::json::parse(in));
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfm::train
