// tests/data/tsv_test.cc — the TSV reader: pairs, skipped lines with their numbers, --strict.
#include "tfm/data/tsv.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "tfm/data/vocab.h"

namespace tfm::data {
namespace {

TsvOptions char_opts() { return TsvOptions{}; }

TEST(Tsv, ReadsPairsAndStripsCrlf) {
  const TsvData d = parse_tsv("ab\tba\r\nxyz\tzyx\n", "t.tsv", char_opts());
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.lines, 2);
  EXPECT_EQ(d.pairs[0].tgt, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(d.pairs[1].line, 2);
  EXPECT_TRUE(d.problems.empty());
}

// CR-only line ends (old Mac files) make one line of the file: said as such, not as a line of several tabs.
TEST(Tsv, CarriageReturnInsideALineIsNamed) {
  const TsvData d = parse_tsv(
      "ab\tba\rcd\tdc\rx\ty\n"
      "ef\tfe\n",
      "mac.tsv", char_opts());
  ASSERT_EQ(d.pairs.size(), 1u);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_EQ(d.problems[0].line, 1);
  EXPECT_NE(d.problems[0].what.find("a carriage return inside it"), std::string::npos) << d.problems[0].what;
}

// A leading UTF-8 byte order mark is not a character of the first source (U+FEFF would enter the vocabulary).
TEST(Tsv, ByteOrderMarkIsDropped) {
  const TsvData d = parse_tsv("\xEF\xBB\xBF" "ab\tba\n\xEF\xBB\xBFx\ty\n", "t.tsv", char_opts());
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[0].src, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.pairs[1].src, (std::vector<std::string>{"\xEF\xBB\xBF", "x"}));  // only the file's first one
}

// A UTF-16 file (its byte order mark FF FE or FE FF) is said to be one, not read as lines full of NULs.
TEST(Tsv, Utf16IsRefusedAsSuch) {
  const std::string le(
      "\xFF\xFE"
      "a\0\t\0b\0\n\0",
      10),
      be("\xFE\xFF"
         "\0a\0\t\0b\0\n",
         10);
  for (const std::string& text : {le, be}) {
    try {
      parse_tsv(text, "u16.tsv", char_opts());
      ADD_FAILURE() << "UTF-16 read";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("u16.tsv: UTF-16 text (it starts with the byte order mark ") +
                                           (text[0] == '\xFF' ? "FF FE" : "FE FF") +
                                           "); tfm reads UTF-8: convert it, e.g. iconv -f UTF-16 -t UTF-8");
    }
  }
  const std::string dir = testing::temp_dir("tsv_u16");
  testing::spit(dir + "/u16.tsv", le);
  EXPECT_THROW(read_tsv_sides(dir + "/u16.tsv"), DataError);
}

// UTF-16 without a byte order mark (iconv -t UTF-16LE, Python's .encode("utf-16-le")) is said to be UTF-16, not read
// as UTF-8 pairs of NUL-interleaved tokens: ASCII's NUL high bytes fill every second byte. A first line in another
// script (no NUL in its code units) does not hide it. UTF-8 lines holding NUL characters are read as such.
TEST(Tsv, Utf16WithoutByteOrderMarkIsRefused) {
  const auto utf16 = [](const std::string& ascii, bool le) {  // ASCII text in UTF-16LE or UTF-16BE
    std::string out;
    for (char ch : ascii) out += le ? std::string{ch, '\0'} : std::string{'\0', ch};
    return out;
  };
  const std::string pairs = "ab\tAH B\ncd\tK D\n";
  for (const bool le : {true, false}) {
    const std::string form = le ? "UTF-16LE" : "UTF-16BE";
    const std::string want = "u16.tsv: " + form + " text without a byte order mark (NUL bytes at " +
                             (le ? "odd" : "even") + " offsets of its start: the high bytes of ASCII characters in " +
                             form + "); tfm reads UTF-8: convert it, e.g. iconv -f " + form + " -t UTF-8";
    try {
      parse_tsv(utf16(pairs, le), "u16.tsv", char_opts());
      ADD_FAILURE() << form << " read";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  // Devanagari नमस्ते (U+0928 U+092E U+0938 U+094D U+0924 U+0947) before the ASCII of the line, in UTF-16LE.
  const std::string hindi("\x28\x09\x2E\x09\x38\x09\x4D\x09\x24\x09\x47\x09", 12);
  EXPECT_THROW(parse_tsv(hindi + utf16("\tnamaste\nab\tba\n", true), "u16.tsv", char_opts()), DataError);
  // Words of another script between ASCII separators, in UTF-16BE: Hebrew שלום (U+05E9 U+05DC U+05D5 U+05DD).
  const std::string shalom("\x05\xE9\x05\xDC\x05\xD5\x05\xDD", 8);
  std::string hebrew;
  for (int i = 0; i < 40; ++i) hebrew += shalom + utf16(i % 2 ? "\n" : "\t", false) + shalom + utf16(" ", false);
  EXPECT_THROW(parse_tsv(hebrew, "u16.tsv", char_opts()), DataError);
  const std::string dir = testing::temp_dir("tsv_u16_nobom");
  testing::spit(dir + "/u16.tsv", utf16(pairs, true));
  EXPECT_THROW(read_tsv(dir + "/u16.tsv", char_opts()), DataError);
  EXPECT_THROW(read_tsv_sides(dir + "/u16.tsv"), DataError);
  // UTF-8 with NUL characters: in a few lines, or even opening each of the first lines, it is UTF-8.
  const std::string nuls(
      "a\0b\tc\0\n\0x\ty\n"
      "ab\tba\n",
      18);
  EXPECT_EQ(parse_tsv(nuls, "nul.tsv", char_opts()).pairs.size(), 3u);
  const TsvData d = parse_tsv(std::string("\0a\t\0b\n", 6) + "cd\tdc\n", "nul.tsv", char_opts());
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[0].src, (std::vector<std::string>{std::string(1, '\0'), "a"}));
}

// The sides an spm model trains on are the lines parse_tsv reads: the mark is not text there either.
// Byte tokens read any bytes: a file whose sides are both bytes is never taken for UTF-16, though its NULs sit at odd
// offsets as UTF-16LE's do (with or without a leading FF FE); a side read as UTF-8 (char, space, spm) refuses it.
TEST(Tsv, ByteSidesReadAnyBytesNulsIncluded) {
  std::string text;
  for (int i = 0; i < 8; ++i) text += std::string("a\0b\0\t\0c\0d\0e\n", 12);  // NUL at every odd offset but 11
  TsvOptions bytes;
  bytes.src_tokens = bytes.tgt_tokens = Tokenization::BYTE;
  for (const std::string& t : {text, "\xFF\xFE" + text}) {
    const TsvData d = parse_tsv(t, "bytes.tsv", bytes);
    ASSERT_EQ(d.pairs.size(), 8u);
    EXPECT_TRUE(d.problems.empty());
    EXPECT_EQ(d.pairs[1].src, (Tokens{"<0x61>", "<0x00>", "<0x62>", "<0x00>"}));
  }
  for (const Tokenization side : {Tokenization::CHAR, Tokenization::SPACE}) {
    TsvOptions mixed = bytes;
    mixed.tgt_tokens = side;  // one side read as UTF-8 is enough
    try {
      parse_tsv(text, "bytes.tsv", mixed);
      ADD_FAILURE() << "UTF-16LE read under " << enum_name(side);
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("bytes.tsv: UTF-16LE text without a byte order mark", 0), 0u) << e.what();
    }
  }
}

TEST(Tsv, SidesDropTheByteOrderMarkAndCrlf) {
  const std::string dir = testing::temp_dir("tsv_sides");
  testing::spit(dir + "/bom.tsv", "\xEF\xBB\xBF" "ab\tba\r\nno tab\r\n \tx\r\ncd\tdc");
  const TsvSides s = read_tsv_sides(dir + "/bom.tsv");
  EXPECT_EQ(s.src, (std::vector<std::string>{"ab", "cd"}));
  EXPECT_EQ(s.tgt, (std::vector<std::string>{"ba", "dc"}));
}

// A bound on a side's code points leaves out the lines past it (either side), counting code points, not bytes.
TEST(Tsv, SidesPastTheBoundAreLeftOut) {
  const std::string dir = testing::temp_dir("tsv_sides_long");
  testing::spit(dir + "/long.tsv", "ab\tba\n" + std::string(9, 'a') + "\tb\nx\t" + std::string(9, 'y') +
                                       "\n\u00e9\u00e9\u00e9\u00e9\tz\n");
  const TsvSides all = read_tsv_sides(dir + "/long.tsv");
  EXPECT_EQ(all.src.size(), 4u);
  const TsvSides s = read_tsv_sides(dir + "/long.tsv", 8);  // "éééé" is 8 bytes, 4 code points
  EXPECT_EQ(s.src, (std::vector<std::string>{"ab", "\u00e9\u00e9\u00e9\u00e9"}));
  EXPECT_EQ(s.tgt, (std::vector<std::string>{"ba", "z"}));
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

// An spm side that is not UTF-8 is a malformed line, as under char tokens (SentencePiece alone would
// read the bad bytes as U+FFFD); training the model skips such lines.
TEST(Tsv, SpmSideWithInvalidUtf8IsMalformed) {
  std::vector<std::string> lines;
  for (int i = 0; i < 40; ++i) lines.push_back("the pair number " + std::to_string(i) + " of words");
  lines.push_back("bad \xFF\xFE bytes");
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  SpmOptions so;
  so.vocab_size = 33;
  const Tokenizer spm = Tokenizer::from_spm_model(train_spm(views, so, "lines"), "lines.model");
  const Vocab pieces = spm.vocab();
  for (const auto& p : pieces.tokens()) EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "a U+FFFD piece";
  TsvOptions o;
  o.src_tokens = o.tgt_tokens = spm;
  const TsvData d = parse_tsv("the pair\tof words\nw\xFFords\tthe pair\n", "s.tsv", o);
  ASSERT_EQ(d.pairs.size(), 1u);
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_EQ(d.problems[0].line, 2);
  EXPECT_EQ(d.problems[0].what, "malformed line: invalid UTF-8 at byte 1 (in the source)");
}

// A tokenizer's byte offset counts from the start of its side: the message says which side, so
// "byte 1" of a target is not read as byte 1 of the line.
TEST(Tsv, InvalidUtf8NamesItsSide) {
  const TsvData d = parse_tsv("abc\tx\xFFy\nq\xC3\tz\nok\tko\n", "u.tsv", char_opts());
  ASSERT_EQ(d.problems.size(), 2u);
  EXPECT_EQ(d.problems[0].what, "malformed line: invalid UTF-8 at byte 1 (in the target)");
  EXPECT_EQ(d.problems[1].what, "malformed line: invalid UTF-8 at byte 1 (in the source)");
  TsvOptions strict = char_opts();
  strict.strict = true;
  try {
    parse_tsv("abc\tx\xFFy\n", "u.tsv", strict);
    FAIL() << "strict accepted invalid UTF-8";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "u.tsv:1: malformed line: invalid UTF-8 at byte 1 (in the target) (--strict)");
  }
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

// max_src_tokens (tfm eval's bound, the model's max_len) makes a longer source over-long whatever max_tokens allows
// (here the default 256 for the 300-character target): skipped and listed, or with strict the error at its line.
TEST(Tsv, SourceOverTheModelsMaxLenIsOverLong) {
  TsvOptions o = char_opts();
  o.max_src_tokens = 5;
  const std::string text = "ab\tba\nabcdef\tfedcba\nabcde\t" + std::string(300, 'x') + "\n";
  const TsvData d = parse_tsv(text, "e.tsv", o);
  ASSERT_EQ(d.pairs.size(), 1u);
  ASSERT_EQ(d.problems.size(), 2u);
  EXPECT_EQ(d.problems[0].line, 2);
  EXPECT_EQ(d.problems[0].what, "over-long source: 6 tokens, more than the model's max_len 5");
  EXPECT_EQ(d.problems[1].what, "over-long line: 300 tokens, the limit is 256");
  o.max_tokens = 1000;
  EXPECT_EQ(parse_tsv(text, "e.tsv", o).pairs.size(), 2u);  // the target is not bound by it
  o.strict = true;
  try {
    parse_tsv(text, "e.tsv", o);
    FAIL() << "strict accepted an over-long source";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "e.tsv:2: over-long source: 6 tokens, more than the model's max_len 5 (--strict)");
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
