// tests/data/tsv_test.cc — the TSV reader's line-numbered reports, tokenization and vocabularies.
#include "tfm/data/tsv.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "tfm/data/vocab.h"

namespace tfm::data {
namespace {

TsvOptions char_opts() { return TsvOptions{}; }

TEST(Tokenize, CharSplitsCodePointsNotBytes) {
  // "añ€😀" is 1 + 2 + 3 + 4 bytes: four code points.
  const auto t = tokenize("a\xC3\xB1\xE2\x82\xAC\xF0\x9F\x98\x80", Tokenization::CHAR);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[1], "\xC3\xB1");
  EXPECT_EQ(t[3].size(), 4u);
  EXPECT_EQ(detokenize(t, Tokenization::CHAR), "a\xC3\xB1\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(Tokenize, CharRejectsInvalidUtf8) {
  EXPECT_THROW(tokenize("a\xC3", Tokenization::CHAR), std::invalid_argument);         // truncated
  EXPECT_THROW(tokenize("\xC0\xAF", Tokenization::CHAR), std::invalid_argument);      // overlong '/'
  EXPECT_THROW(tokenize("\xED\xA0\x80", Tokenization::CHAR), std::invalid_argument);  // surrogate
}

TEST(Tokenize, SpaceSplitsOnRuns) {
  const auto t = tokenize("  the  cat\tsat ", Tokenization::SPACE);
  EXPECT_EQ(t, (std::vector<std::string>{"the", "cat", "sat"}));
  EXPECT_EQ(detokenize(t, Tokenization::SPACE), "the cat sat");
  EXPECT_THROW(enum_from_name<Tokenization>("word"), std::invalid_argument);
}

TEST(Vocab, BuildOrdersSpecialsThenFrequencyThenBytes) {
  // counts: b 3, a 2, c 2 → a before c on the tie (byte order).
  const Vocab v = Vocab::build({{"b", "a", "c"}, {"b", "c", "a", "b"}});
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "b", "a", "c"}));
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.bos_id(), 1);
  EXPECT_EQ(v.eos_id(), 2);
  EXPECT_EQ(v.unk_id(), 3);
  EXPECT_EQ(v.id("zzz"), 3);
  EXPECT_EQ(v.encode({"a", "q"}), (std::vector<int32_t>{5, 3}));
  EXPECT_EQ(v.decode({1, 4, 5, 2, 6}), (std::vector<std::string>{"b", "a"}));  // drops bos, stops at eos
}

TEST(Vocab, SaveLoadRoundTripAndErrors) {
  const std::string dir = testing::temp_dir("vocab");
  const Vocab v = Vocab::build({{"x", "é", "x"}});
  v.save(dir + "/v.txt");
  const Vocab w = Vocab::load(dir + "/v.txt");
  EXPECT_EQ(w.tokens(), v.tokens());
  { std::ofstream(dir + "/dup.txt") << "<pad>\na\na\n"; }
  try {
    Vocab::load(dir + "/dup.txt");
    FAIL() << "duplicate accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dup.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("appears twice"), std::string::npos) << e.what();
  }
  { std::ofstream(dir + "/nopad.txt") << "a\nb\n"; }
  EXPECT_THROW(Vocab::load(dir + "/nopad.txt"), std::invalid_argument);
}

TEST(Tsv, ReadsPairsAndStripsCrlf) {
  const TsvData d = parse_tsv("ab\tba\r\nxyz\tzyx\n", "t.tsv", char_opts());
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.lines, 2);
  EXPECT_EQ(d.pairs[0].tgt, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(d.pairs[1].line, 2);
  EXPECT_TRUE(d.problems.empty());
}

TEST(Tsv, SkipsBadLinesWithLineNumbers) {
  TsvOptions o = char_opts();
  o.max_tokens = 5;
  const std::string text =
      "ab\tba\n"      // 1 ok
      "\n"            // 2 blank
      "no tab here\n" // 3 malformed
      "a\tb\tc\n"     // 4 two tabs
      "abcdefg\tx\n"  // 5 over-long (7 > 5)
      "\tx\n"         // 6 empty source
      "a\xC3\tb\n"    // 7 invalid UTF-8
      "cd\tdc";       // 8 ok, no final newline
  const TsvData d = parse_tsv(text, "bad.tsv", o);
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[1].line, 8);
  EXPECT_EQ(d.lines, 8);
  ASSERT_EQ(d.problems.size(), 6u);
  const int64_t lines[] = {2, 3, 4, 5, 6, 7};
  const char* what[] = {"blank", "no tab", "more than one tab", "over-long", "empty source", "invalid UTF-8"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(d.problems[i].line, lines[i]);
    EXPECT_NE(d.problems[i].what.find(what[i]), std::string::npos) << d.problems[i].what;
  }
  const std::string s = d.summary();
  EXPECT_NE(s.find("bad.tsv: skipped 6 of 8 lines (line 2: blank line"), std::string::npos) << s;
}

TEST(Tsv, StrictFailsAtTheFirstBadLine) {
  TsvOptions o = char_opts();
  o.strict = true;
  try {
    parse_tsv("ab\tba\ncd\tdc\nnotab\n", "s.tsv", o);
    FAIL() << "strict accepted a malformed line";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("s.tsv:3: malformed line", 0), 0u) << e.what();
  }
}

TEST(Tsv, EqualLengthsForEncoder) {
  TsvOptions o = char_opts();
  o.equal_lengths = true;
  const TsvData d = parse_tsv("ab\tba\nabc\tx\n", "e.tsv", o);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_EQ(d.problems[0].line, 2);
}

TEST(Tsv, EmptyFileAndNoUsableLinesAreErrors) {
  const std::string dir = testing::temp_dir("tsv");
  { std::ofstream(dir + "/empty.tsv"); }
  try {
    read_tsv(dir + "/empty.tsv", char_opts());
    FAIL() << "empty file accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("empty.tsv: file is empty"), std::string::npos) << e.what();
  }
  try {
    parse_tsv("\n\n  \n", "blank.tsv", char_opts());
    FAIL() << "all-blank file accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("blank.tsv: no usable pairs in 3 lines"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1: blank line"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_tsv(dir + "/missing.tsv", char_opts()), DataError);
}

}  // namespace
}  // namespace tfm::data
