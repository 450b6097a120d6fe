// tests/data/vocab_test.cc — tokenization (char by code point, space by runs) and vocabularies
// (order, save/load, errors).
#include "tfm/data/vocab.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace tfm::data {
namespace {

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
  // Words are UTF-8, as CHAR reads it: a Latin-1 byte would make a vocabulary no UTF-8 reader takes.
  try {
    tokenize("caf\xE9 au lait", Tokenization::SPACE);
    ADD_FAILURE() << "Latin-1 taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "invalid UTF-8 at byte 3");
  }
  EXPECT_EQ(tokenize("caf\xC3\xA9", Tokenization::SPACE), (std::vector<std::string>{"caf\xC3\xA9"}));
}

// count_tokens is tokenize's size, with its errors, for every kind without a model.
TEST(Tokenize, CountTokensIsTheTokenizersCount) {
  for (Tokenization t : {Tokenization::CHAR, Tokenization::SPACE, Tokenization::BYTE})
    for (const std::string text : {"", "  ", "a", "  the  cat\tsat \r\n", "a\xC3\xB1\xE2\x82\xAC\xF0\x9F\x98\x80 x"})
      EXPECT_EQ(count_tokens(text, t), static_cast<int64_t>(tokenize(text, t).size())) << enum_name(t) << " " << text;
  EXPECT_THROW(count_tokens("ab\xC3", Tokenization::CHAR), std::invalid_argument);
  EXPECT_EQ(count_tokens("ab\xC3", Tokenization::BYTE), 3);
  EXPECT_THROW(count_tokens("x", Tokenization::SPM), std::invalid_argument);
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
  // Specials may be absent (a language model's vocabulary needs no <pad>); GPT-2's <|endoftext|> is bos and eos.
  { std::ofstream(dir + "/nopad.txt") << "a\nb\n"; }
  const Vocab nopad = Vocab::load(dir + "/nopad.txt");
  EXPECT_EQ(nopad.pad_id(), -1);
  EXPECT_EQ(nopad.unk_id(), -1);
  EXPECT_THROW(nopad.id("c"), std::invalid_argument);
  { std::ofstream(dir + "/gpt2.txt") << "a\n<|endoftext|>\nb\n"; }
  const Vocab gpt2 = Vocab::load(dir + "/gpt2.txt");
  EXPECT_EQ(gpt2.bos_id(), 1);
  EXPECT_EQ(gpt2.eos_id(), 1);
  EXPECT_EQ(gpt2.pad_id(), -1);
  EXPECT_EQ(gpt2.decode({0, 2, 1, 0}), (std::vector<std::string>{"a", "b"}));
}

// A one-a-line file rewritten with CR LF endings (every line) loads as the LF file; a token "\r" of tfm's own
// (a line "\r" among LF lines) stays "\r", also after the file's rewrite to CR LF.
TEST(Vocab, CrLfFileLoadsAsTheLfFile) {
  const std::string dir = testing::temp_dir("vocab");
  { std::ofstream(dir + "/crlf.txt", std::ios::binary) << "<pad>\r\n<bos>\r\n<eos>\r\n<unk>\r\nx\r\ny\r\n"; }
  const Vocab v = Vocab::load(dir + "/crlf.txt");
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "x", "y"}));
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.unk_id(), 3);
  const Vocab cr = Vocab::build({{"a", "\r", "a"}});
  cr.save(dir + "/cr.txt");
  EXPECT_EQ(Vocab::load(dir + "/cr.txt").tokens(), cr.tokens());
  std::string rewritten;
  for (const std::string& t : cr.tokens()) rewritten += t + "\r\n";
  { std::ofstream(dir + "/cr_crlf.txt", std::ios::binary) << rewritten; }
  EXPECT_EQ(Vocab::load(dir + "/cr_crlf.txt").tokens(), cr.tokens());
  // Some lines only: tokens as they are (a CR is a character like any other).
  { std::ofstream(dir + "/mixed.txt", std::ios::binary) << "<pad>\na\r\nb\n"; }
  EXPECT_EQ(Vocab::load(dir + "/mixed.txt").tokens(), (std::vector<std::string>{"<pad>", "a\r", "b"}));
  // The last line without its break (as Windows editors leave it).
  { std::ofstream(dir + "/crlf_open.txt", std::ios::binary) << "<pad>\r\nx\r\ny"; }
  EXPECT_EQ(Vocab::load(dir + "/crlf_open.txt").tokens(), (std::vector<std::string>{"<pad>", "x", "y"}));
  // An LF file of tfm's whose one token is "\r" (a vocabulary without specials) reads as it is.
  { std::ofstream(dir + "/lone_cr.txt", std::ios::binary) << "\r\n"; }
  EXPECT_EQ(Vocab::load(dir + "/lone_cr.txt").tokens(), (std::vector<std::string>{"\r"}));
  { std::ofstream(dir + "/lone_cr2.txt", std::ios::binary) << "\r\na\n"; }
  EXPECT_EQ(Vocab::load(dir + "/lone_cr2.txt").tokens(), (std::vector<std::string>{"\r", "a"}));
}

TEST(Vocab, JsonFileHoldsAnyCodePointAndTxtFilesKeepLoading) {
  const std::string dir = testing::temp_dir("vocab");
  const Vocab v = Vocab::build({{"\n", "\t", "a", "\r", "\"", "\\", "\x01", "\xF0\x9F\x98\x80", "\xC2\x85"}});
  EXPECT_TRUE(v.needs_json());
  v.save(dir + "/v.json");
  EXPECT_EQ(Vocab::load(dir + "/v.json").tokens(), v.tokens());
  EXPECT_EQ(testing::slurp(dir + "/v.json").find('\t'), std::string::npos);  // escaped by JSON
  try {
    v.save(dir + "/v.txt");
    FAIL() << "a newline token saved one a line";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/v.txt: token contains a newline"), std::string::npos) << e.what();
  }
  const Vocab w = Vocab::build({{"x", "y"}});
  EXPECT_FALSE(w.needs_json());
  w.save(dir + "/w.txt");
  EXPECT_EQ(testing::slurp(dir + "/w.txt"), "<pad>\n<bos>\n<eos>\n<unk>\nx\ny\n");  // the one-a-line format, unchanged
  EXPECT_EQ(Vocab::load(dir + "/w.txt").tokens(), w.tokens());
  { std::ofstream(dir + "/dup.json") << "[\"<pad>\", \"a\", \"a\"]"; }
  try {
    Vocab::load(dir + "/dup.json");
    FAIL() << "duplicate accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/dup.json: vocabulary entry 2 'a' appears twice");
  }
  { std::ofstream(dir + "/obj.json") << "{\"a\": 1}"; }
  EXPECT_THROW(Vocab::load(dir + "/obj.json"), std::invalid_argument);
  { std::ofstream(dir + "/num.json") << "[\"<pad>\", 3]"; }
  EXPECT_THROW(Vocab::load(dir + "/num.json"), std::invalid_argument);
  { std::ofstream(dir + "/trunc.json") << "[\"<pad>\", "; }
  EXPECT_THROW(Vocab::load(dir + "/trunc.json"), std::invalid_argument);
  // A token JSON cannot hold (invalid UTF-8, possible with space tokenization) is refused by name.
  const Vocab bad = Vocab::build({{"\xFF"}});
  try {
    bad.save(dir + "/bad.json");
    FAIL() << "invalid UTF-8 saved as JSON";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/bad.json: vocabulary entry 4 is not valid UTF-8, which JSON cannot hold");
  }
}

}  // namespace
}  // namespace tfm::data
