// tests/train/metrics_test.cc — edit distance and the corpus figures, checked by hand.
#include "tfm/train/metrics.h"

#include <gtest/gtest.h>

namespace tfm::train {
namespace {

data::Tokens chars(const std::string& s) {
  data::Tokens t;
  for (char c : s) t.emplace_back(1, c);
  return t;
}

TEST(Metrics, EditDistanceByHand) {
  // kitten → sitting: substitute k→s, substitute e→i, insert g = 3.
  EXPECT_EQ(edit_distance(chars("kitten"), chars("sitting")), 3);
  EXPECT_EQ(edit_distance(chars(""), chars("abc")), 3);  // three insertions
  EXPECT_EQ(edit_distance(chars("abc"), chars("")), 3);  // three deletions
  EXPECT_EQ(edit_distance(chars("abc"), chars("abc")), 0);
  // "ab" vs "ba": two substitutions (or delete + insert) = 2, no transposition operation.
  EXPECT_EQ(edit_distance(chars("ab"), chars("ba")), 2);
}

TEST(Metrics, CorpusFiguresByHand) {
  Metrics m;
  // Example 1: "kitten" against "sitting": 3 edits; position-wise k/s ✗ i/i ✓ t/t ✓ t/t ✓ e/i ✗ n/n ✓
  // → 4 correct of 7 reference tokens; not exact.
  m.add(chars("kitten"), {chars("sitting")});
  // Example 2: "abc" with accepted answers "abd" and "abc": the closest is "abc" (distance 0) →
  // exact, 3 correct of 3, 0 edits.
  m.add(chars("abc"), {chars("abd"), chars("abc")});
  EXPECT_EQ(m.examples, 2);
  EXPECT_EQ(m.exact, 1);
  EXPECT_EQ(m.edits, 3);
  EXPECT_EQ(m.correct_tokens, 7);
  EXPECT_EQ(m.reference_tokens, 10);
  EXPECT_DOUBLE_EQ(m.token_accuracy(), 0.7);       // 7 / 10
  EXPECT_DOUBLE_EQ(m.token_error_rate(), 0.3);     // 3 / 10
  EXPECT_DOUBLE_EQ(m.sequence_accuracy(), 0.5);    // 1 / 2
  EXPECT_DOUBLE_EQ(m.sequence_error_rate(), 0.5);
  // Example 3: empty prediction against "xy": 2 deletions... of the reference, i.e. 2 insertions
  // needed; 0 correct. Totals: edits 5, ref tokens 12 → TER 5/12.
  m.add({}, {chars("xy")});
  EXPECT_DOUBLE_EQ(m.token_error_rate(), 5.0 / 12.0);
  const std::string j = m.to_json();
  for (const char* key : {"token_accuracy", "sequence_accuracy", "token_error_rate", "sequence_error_rate", "examples"})
    EXPECT_NE(j.find(std::string("\"") + key + "\""), std::string::npos) << j;
  EXPECT_THROW(m.add(chars("a"), {}), std::invalid_argument);
}

// The figures of a set's parts, added, are the whole set's: every count, BLEU's and chrF's statistics too.
TEST(Metrics, PartsAddUpToTheWhole) {
  Metrics whole, first, rest;
  for (Metrics* m : {&whole, &first}) {
    m->add(chars("kitten"), {chars("sitting")});
    m->add_text("kitten", {"sitting"});
  }
  for (Metrics* m : {&whole, &rest}) {
    m->add(chars("abc"), {chars("abd"), chars("abc")});
    m->add_text("abc", {"abd", "abc"});
    m->add({}, {chars("xy")});
    m->add_text("", {"xy"});
  }
  rest.truncated = whole.truncated = 1;
  first.add(rest);
  EXPECT_EQ(first.to_json(), whole.to_json());
  EXPECT_EQ(first.edits, 5);
}

TEST(Metrics, ClosestReferenceDecidesTokenAccuracy) {
  Metrics m;
  // "abcd" vs {"xbcd" (1 edit), "abcdef" (2 edits)}: the closest is "xbcd" → 3 of 4 correct.
  m.add(chars("abcd"), {chars("abcdef"), chars("xbcd")});
  EXPECT_EQ(m.edits, 1);
  EXPECT_EQ(m.correct_tokens, 3);
  EXPECT_EQ(m.reference_tokens, 4);
}

}  // namespace
}  // namespace tfm::train
