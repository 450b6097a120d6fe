// tests/data/text_test.cc — LM text: encode/decode (char, byte), the vocabulary of a text file, the
// token corpus (compact storage, slices, the memory-mapped cache), windows (random, sequential,
// validation coverage) and the errors naming the file (empty, too small, bad UTF-8 with its offset).
#include "tfm/data/text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "test_util.h"
#include "tfm/data/tsv.h"

namespace tfm::data {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Text, CharEncodeDecodeRoundTripWithNewlineTabAndUnknown) {
  const std::string dir = testing::temp_dir("text");
  const std::string text = "ab\tb\n\xC3\xA9\xF0\x9F\x98\x80\nb";
  testing::spit(dir + "/t.txt", text);
  const Vocab v = build_text_vocab(dir + "/t.txt", Tokenization::CHAR);
  // specials, then b (3), \n (2), then count 1 in byte order: \t, a, é, 😀.
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "b", "\n", "\t", "a", "\xC3\xA9",
                                                  "\xF0\x9F\x98\x80"}));
  const auto ids = encode_text(v, Tokenization::CHAR, text);
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 4, 6, 4, 5, 8, 9, 5, 4}));
  EXPECT_EQ(decode_text(v, Tokenization::CHAR, ids), text);
  // An unknown character maps to <unk> and decodes to U+FFFD; specials decode to nothing.
  EXPECT_EQ(encode_text(v, Tokenization::CHAR, "az"), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(decode_text(v, Tokenization::CHAR, {1, 7, 3, 0, 2}), "a\xEF\xBF\xBD");
  EXPECT_THROW(decode_text(v, Tokenization::CHAR, {10}), std::invalid_argument);
  const std::string bad = error_of([&] { encode_text(v, Tokenization::CHAR, "ab\xC3"); });
  EXPECT_NE(bad.find("invalid UTF-8 at byte 2"), std::string::npos) << bad;
}

TEST(Text, ByteTokenizationIdsAreBytesSpecialsAfter) {
  const Vocab v = byte_vocab();
  ASSERT_EQ(v.size(), 259);
  EXPECT_EQ(v.token(10), "<0x0A>");
  EXPECT_EQ(v.token(255), "<0xFF>");
  EXPECT_EQ(v.pad_id(), 256);
  EXPECT_EQ(v.bos_id(), 257);
  EXPECT_EQ(v.eos_id(), 258);
  EXPECT_EQ(v.unk_id(), -1);
  const std::string text = "a\n\xFF\xC3";  // any bytes, not UTF-8
  EXPECT_EQ(encode_text(v, Tokenization::BYTE, text), (std::vector<int32_t>{97, 10, 255, 195}));
  EXPECT_EQ(decode_text(v, Tokenization::BYTE, {97, 257, 10, 255, 195}), text);
  // tokenize / detokenize (the TSV path) agree with the vocabulary.
  const auto toks = tokenize(text, Tokenization::BYTE);
  EXPECT_EQ(toks, (std::vector<std::string>{"<0x61>", "<0x0A>", "<0xFF>", "<0xC3>"}));
  EXPECT_EQ(detokenize(toks, Tokenization::BYTE), text);
  EXPECT_EQ(v.encode(toks), (std::vector<int32_t>{97, 10, 255, 195}));
  EXPECT_EQ(build_vocab({toks}, Tokenization::BYTE).tokens(), v.tokens());
  EXPECT_EQ(enum_from_name<Tokenization>("byte"), Tokenization::BYTE);
}

TEST(Text, CorpusIsCompactSlicesAndCaches) {
  const std::string dir = testing::temp_dir("text");
  testing::spit(dir + "/t.txt", "hello world\n");
  const Vocab v = build_text_vocab(dir + "/t.txt", Tokenization::CHAR);
  const TextCorpus c = TextCorpus::read(dir + "/t.txt", v, Tokenization::CHAR);
  ASSERT_EQ(c.size(), 12);
  EXPECT_EQ(c.bytes_per_token(), 2);
  EXPECT_EQ(c.hash(), text_file_hash(dir + "/t.txt"));
  const auto expect = encode_text(v, Tokenization::CHAR, "hello world\n");
  for (int64_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], expect[static_cast<size_t>(i)]) << i;
  const TextCorpus s = c.slice(6, 12);
  ASSERT_EQ(s.size(), 6);
  EXPECT_EQ(s[0], v.id("w"));
  EXPECT_THROW(c.slice(3, 13), std::out_of_range);
  // The cache: written, then mapped again with the same ids; a stale cache (other text) is rewritten.
  const TextCorpus a = TextCorpus::read(dir + "/t.txt", v, Tokenization::CHAR, dir + "/t.cache");
  const TextCorpus b = TextCorpus::read(dir + "/t.txt", v, Tokenization::CHAR, dir + "/t.cache");
  ASSERT_EQ(a.size(), 12);
  ASSERT_EQ(b.size(), 12);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(b[i], expect[static_cast<size_t>(i)]);
  testing::spit(dir + "/u.txt", "world");
  const TextCorpus u = TextCorpus::read(dir + "/u.txt", v, Tokenization::CHAR, dir + "/t.cache");
  ASSERT_EQ(u.size(), 5);
  EXPECT_EQ(u[0], v.id("w"));
  // A vocabulary above 65,536 entries stores int32.
  EXPECT_EQ(TextCorpus::from_ids({70000, 1}, 70001).bytes_per_token(), 4);
  EXPECT_EQ(TextCorpus::from_ids({70000, 1}, 70001)[0], 70000);
}

TEST(Text, ErrorsNameTheFile) {
  const std::string dir = testing::temp_dir("text");
  testing::spit(dir + "/empty.txt", "");
  testing::spit(dir + "/bad.txt", "abc\ndef\xE2\x82");
  testing::spit(dir + "/small.txt", "abcd");
  const std::string empty = error_of([&] { build_text_vocab(dir + "/empty.txt", Tokenization::CHAR); });
  EXPECT_EQ(empty, dir + "/empty.txt: file is empty (expected UTF-8 text)");
  const std::string bad = error_of([&] { build_text_vocab(dir + "/bad.txt", Tokenization::CHAR); });
  EXPECT_EQ(bad, dir + "/bad.txt: invalid UTF-8 at byte 7 (--tokens char reads UTF-8 text; --tokens byte reads any bytes)");
  EXPECT_NO_THROW(build_text_vocab(dir + "/bad.txt", Tokenization::BYTE));
  const std::string missing = error_of([&] { build_text_vocab(dir + "/none.txt", Tokenization::CHAR); });
  EXPECT_EQ(missing.rfind(dir + "/none.txt: ", 0), 0u) << missing;
  const Vocab v = build_text_vocab(dir + "/small.txt", Tokenization::CHAR);
  const TextCorpus c = TextCorpus::read(dir + "/small.txt", v, Tokenization::CHAR);
  EXPECT_NO_THROW(check_windows(c, 3));
  const std::string small = error_of([&] { check_windows(c, 4); });
  EXPECT_EQ(small, dir + "/small.txt: 4 tokens, too few for one window of block_size + 1 = 5 tokens (a smaller --block-size, "
                         "or a longer text)");
  EXPECT_THROW(check_windows(c, 4), DataError);
  const std::string bad_read = error_of([&] { TextCorpus::read(dir + "/bad.txt", v, Tokenization::CHAR); });
  EXPECT_NE(bad_read.find("bad.txt: invalid UTF-8 at byte 7"), std::string::npos) << bad_read;
}

// A language model's text in UTF-16, with or without its byte order mark, is said to be UTF-16 under the tokens that
// read UTF-8 (char, spm), not invalid UTF-8 at byte 0 or characters between NULs; byte tokens read any bytes.
TEST(Text, Utf16IsRefusedAsSuch) {
  const std::string dir = testing::temp_dir("text_u16");
  std::string le;
  for (char ch : std::string("To undo, type u.\nTo delete a line, type dd.\n")) le += std::string{ch, '\0'};
  testing::spit(dir + "/le.txt", le);
  testing::spit(dir + "/bom.txt", "\xFF\xFE" + le);
  const std::string tail = "; tfm reads UTF-8: convert it, e.g. iconv -f ";
  const std::string no_mark = dir +
                              "/le.txt: UTF-16LE text without a byte order mark (NUL bytes at odd offsets of "
                              "its start: the high bytes of ASCII characters in UTF-16LE)" +
                              tail + "UTF-16LE -t UTF-8";
  EXPECT_EQ(error_of([&] { build_text_vocab(dir + "/le.txt", Tokenization::CHAR); }), no_mark);
  EXPECT_EQ(error_of([&] { build_text_vocab(dir + "/bom.txt", Tokenization::CHAR); }),
            dir + "/bom.txt: UTF-16 text (it starts with the byte order mark FF FE)" + tail + "UTF-16 -t UTF-8");
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "a"});
  EXPECT_EQ(error_of([&] { TextCorpus::read(dir + "/le.txt", v, Tokenization::CHAR); }), no_mark);
  SpmOptions spm;
  spm.vocab_size = 20;
  EXPECT_EQ(error_of([&] { train_text_spm(dir + "/le.txt", spm); }), no_mark);
  EXPECT_EQ(TextCorpus::read(dir + "/le.txt", build_text_vocab(dir + "/le.txt", Tokenization::BYTE), Tokenization::BYTE)
                .size(),
            static_cast<int64_t>(le.size()));
}

// SentencePiece's normaliser turns bytes that are not UTF-8 into U+FFFD without a word, so a lossless
// model would train on and encode another text than the file's: spm refuses them as char does, naming
// the file and the byte (a prompt: its name), and so does tokenize (a TSV side, a translated line).
TEST(Text, SpmRefusesInvalidUtf8NamingTheFileAndByte) {
  const std::string dir = testing::temp_dir("text_spm");
  std::string good;
  for (int i = 0; i < 40; ++i) good += "line " + std::to_string(i) + " of a short text, caf\xC3\xA9 included\n";
  testing::spit(dir + "/good.txt", good);
  testing::spit(dir + "/bad.txt", "abc\ndef\xFFghi\n");
  SpmOptions o;
  o.vocab_size = 290;
  const Tokenizer tok = train_text_spm(dir + "/good.txt", o);
  const Vocab v = tok.vocab();
  EXPECT_EQ(decode_text(v, tok, encode_text(v, tok, good)), good);
  const std::string want = dir + "/bad.txt: invalid UTF-8 at byte 7 (--tokens spm reads UTF-8 text; --tokens byte reads any bytes)";
  EXPECT_EQ(error_of([&] { TextCorpus::read(dir + "/bad.txt", v, tok); }), want);
  EXPECT_THROW(TextCorpus::read(dir + "/bad.txt", v, tok), DataError);
  EXPECT_EQ(error_of([&] { train_text_spm(dir + "/bad.txt", o); }), want);
  EXPECT_EQ(error_of([&] { encode_text(v, tok, "ok\n\xC3(", "prompt.txt"); }),
            "prompt.txt: invalid UTF-8 at byte 3 (--tokens spm reads UTF-8 text; --tokens byte reads any bytes)");
  EXPECT_THROW(encode_text(v, tok, "\xC3(", "prompt.txt"), std::invalid_argument);
  EXPECT_EQ(error_of([&] { tok.tokenize("ab\xE2\x82"); }), "invalid UTF-8 at byte 2");
  EXPECT_THROW(tok.tokenize("ab\xE2\x82"), std::invalid_argument);
}

// SentencePiece writes a space as U+2581 "▁" inside its pieces, so a "▁" of the text itself came back
// as a space (sparklines "▁▂▃" lost their lowest bar): a lossless model encodes it as its three byte
// pieces, and every text decodes back to itself, piece by piece too.
TEST(Text, SpmKeepsALiteralLowerOneEighthBlock) {
  std::vector<std::string> lines;
  for (int i = 0; i < 40; ++i) lines.push_back("load " + std::to_string(i) + " \xE2\x96\x81\xE2\x96\x82\xE2\x96\x83 done");
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  SpmOptions o;
  o.vocab_size = 280;
  o.lossless = true;
  const Tokenizer tok = Tokenizer::from_spm_model(train_spm(views, o, "bars"), "bars");
  const Vocab v = tok.vocab();
  for (const std::string text : {"x\xE2\x96\x81y", "\xE2\x96\x81", "a \xE2\x96\x81\xE2\x96\x81 b\n\xE2\x96\x81\n", "load 7 \xE2\x96\x81\xE2\x96\x82\xE2\x96\x83 done"}) {
    const std::vector<int32_t> ids = encode_text(v, tok, text);
    EXPECT_EQ(decode_text(v, tok, ids), text);
    std::string piecewise;
    for (const int32_t id : ids) piecewise += decode_text(v, tok, {id});
    EXPECT_EQ(piecewise, text);
  }
  // A space still is the pieces' "▁": "x y" is not spelled with byte pieces.
  const std::vector<int32_t> ids = encode_text(v, tok, "load 7 done");
  for (const int32_t id : ids) EXPECT_NE(v.token(id).rfind("<0x", 0), 0u) << v.token(id);
}

// SentencePiece's trainer skips, without a word, every line longer than its max_sentence_length (4192
// bytes by default): a text of long lines (a paragraph a line, a minified file) trained a model on its
// few short lines, or failed with an empty reason when it had none. Every chosen line trains it.
TEST(Text, SpmTrainsOnLinesLongerThanSentencePiecesDefaultLimit) {
  const std::string license = testing::slurp("/usr/share/common-licenses/GPL-3");
  ASSERT_GT(license.size(), 30000u);
  std::string flat = license;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  std::string text;
  for (size_t i = 0; i + 6000 <= flat.size(); i += 6000) text += flat.substr(i, 6000) + "\n";
  const std::string dir = testing::temp_dir("text_spm_long");
  testing::spit(dir + "/long.txt", text);
  SpmOptions o;
  o.vocab_size = 400;
  const Tokenizer tok = train_text_spm(dir + "/long.txt", o);
  const Vocab v = tok.vocab();
  EXPECT_EQ(tok.tokenize(" License"), Tokens{"\xE2\x96\x81License"});  // a word learnt from the long lines
  EXPECT_EQ(decode_text(v, tok, encode_text(v, tok, text)), text);
  // One short line among long ones: the long ones count too (alone it allows at most 26 pieces).
  std::vector<std::string> lines = {"the GNU General Public License is free"};
  for (size_t i = 0; i + 6000 <= flat.size(); i += 6000) lines.push_back(flat.substr(i, 6000));
  SpmOptions small;
  small.vocab_size = 200;
  const std::vector<std::string_view> views(lines.begin(), lines.end());
  EXPECT_EQ(Tokenizer::from_spm_model(train_spm(views, small, "mixed"), "mixed").vocab().size(), 200);
}

std::vector<int32_t> iota_ids(int32_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  return ids;
}

TEST(Text, RandomWindowsAreShiftedPairsFromTheGenerator) {
  const TextCorpus c = TextCorpus::from_ids(iota_ids(50), 50);
  Generator g{7, 0};
  const TokenBatch b = random_windows(c, 8, 64, g);
  EXPECT_EQ(g.offset, 64u);  // one counter a row: a saved generator resumes the same draws
  ASSERT_EQ(b.B, 64);
  ASSERT_EQ(b.T, 8);
  ASSERT_EQ(b.S, 8);
  EXPECT_TRUE(b.tgt_in.empty());
  std::set<int32_t> starts;
  for (int64_t r = 0; r < b.B; ++r) {
    const int32_t s = b.src[static_cast<size_t>(r * 8)];
    starts.insert(s);
    EXPECT_LE(s, 50 - 8 - 1);
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(b.src[static_cast<size_t>(r * 8 + t)], s + t);
      EXPECT_EQ(b.tgt_out[static_cast<size_t>(r * 8 + t)], s + t + 1);
    }
  }
  EXPECT_GT(starts.size(), 20u);  // spread over the 42 positions
  Generator h{7, 0};
  EXPECT_EQ(random_windows(c, 8, 64, h).src, b.src);  // same generator state, same windows
  const TokenBatch next = random_windows(c, 8, 64, h);
  EXPECT_NE(next.src, b.src);
  // The starts alone draw the same (what a data-parallel rank uses to build only its rows), and the
  // targets counted over them are the batch's.
  Generator k{7, 0};
  const std::vector<int64_t> s = random_window_starts(c, 8, 64, k);
  EXPECT_EQ(k.offset, 64u);
  EXPECT_EQ(window_batch(c, s, 8).src, b.src);
  EXPECT_EQ(count_window_targets(c, s, 8, 0), count_target_tokens(b, 0));
  EXPECT_EQ(count_window_targets(c, s, 8, 9), count_target_tokens(b, 9));  // id 9 counted as the pad
  EXPECT_EQ(window_batch(c, sequential_window_starts(c, 8, 3, 1), 8).src, sequential_windows(c, 8, 3, 1).src);
}

TEST(Text, SequentialAndValidationWindowsCoverTheText) {
  const TextCorpus c = TextCorpus::from_ids(iota_ids(23), 23);  // 22 targets, block 5: 4 full windows + 2
  EXPECT_EQ(sequential_batch_count(c, 5, 3), 2);
  const TokenBatch s1 = sequential_windows(c, 5, 3, 1);
  ASSERT_EQ(s1.B, 1);  // window 3 only
  EXPECT_EQ(s1.src[0], 15);
  ASSERT_EQ(validation_batch_count(c, 5, 3), 3);
  std::vector<int32_t> targets;
  std::vector<int64_t> lengths;
  for (int64_t k = 0; k < validation_batch_count(c, 5, 3); ++k) {
    const TokenBatch b = validation_windows(c, 5, 3, k);
    lengths.push_back(b.T);
    for (int64_t i = 0; i < b.B * b.T; ++i) {
      EXPECT_EQ(b.tgt_out[static_cast<size_t>(i)], b.src[static_cast<size_t>(i)] + 1);
      targets.push_back(b.tgt_out[static_cast<size_t>(i)]);
    }
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{5, 5, 2}));
  std::vector<int32_t> all(22);
  for (int32_t i = 0; i < 22; ++i) all[static_cast<size_t>(i)] = i + 1;
  EXPECT_EQ(targets, all);  // every token but the first, once, in order
  // Exact multiple: no short window.
  EXPECT_EQ(validation_batch_count(TextCorpus::from_ids(iota_ids(21), 21), 5, 3), 2);
}

}  // namespace
}  // namespace tfm::data
