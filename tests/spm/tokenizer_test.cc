// Tests of data::Tokenizer and train_spm (tfm/data/tokenizer.h): the char / space / byte kinds are
// the vocab.h functions unchanged; SentencePiece models train deterministically, carry tfm's
// specials, round-trip text, and their errors name the file.
#include "tfm/data/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "tfm/data/text.h"

namespace tfm::data {
namespace {

std::vector<std::string> gpl_lines() {
  std::ifstream f("/usr/share/common-licenses/GPL-3");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(line);
  return out;
}

std::vector<std::string_view> views(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

// A fresh directory, removed after the last test (testing::temp_dir).
std::string temp_dir(const std::string& name) { return testing::temp_dir("spm_" + name); }

TEST(Tokenizer, NonSpmKindsAreTheVocabFunctions) {
  for (Tokenization t : {Tokenization::CHAR, Tokenization::SPACE, Tokenization::BYTE}) {
    const Tokenizer tok(t);
    const std::string text = "héllo  wörld\n";
    EXPECT_EQ(tok.tokenize(text), tokenize(text, t));
    EXPECT_EQ(tok.detokenize(tokenize(text, t)), detokenize(tokenize(text, t), t));
    EXPECT_TRUE(tok == t);
    EXPECT_FALSE(tok.is_spm());
  }
  EXPECT_THROW(tokenize("x", Tokenization::SPM), std::invalid_argument);
  // The Tokenizer overloads pick the tokenizer's own functions.
  const Tokenizer space(Tokenization::SPACE);
  EXPECT_EQ(detokenize(Tokens{"a", "b"}, space), "a b");
  EXPECT_EQ(tokenize("a b", space), (Tokens{"a", "b"}));
  EXPECT_THROW(Tokenizer(Tokenization::SPM).tokenize("x"), std::invalid_argument);
}

TEST(Tokenizer, TrainedModelHasTfmSpecialsAndRoundTrips) {
  const auto lines = gpl_lines();
  ASSERT_GT(lines.size(), 500u);
  for (SpmType type : {SpmType::UNIGRAM, SpmType::BPE}) {
    SpmOptions o;
    o.vocab_size = 300;
    o.type = type;
    const Tokenizer tok = Tokenizer::from_spm_model(train_spm(views(lines), o, "GPL-3"), "GPL-3");
    const Vocab v = tok.vocab();
    EXPECT_EQ(v.size(), 300);
    EXPECT_EQ(v.pad_id(), 0);
    EXPECT_EQ(v.bos_id(), 1);
    EXPECT_EQ(v.eos_id(), 2);
    EXPECT_EQ(v.unk_id(), 3);
    const std::string s = "the GNU General Public License is a free, copyleft license";
    const Tokens pieces = tok.tokenize(s);
    EXPECT_LT(pieces.size(), s.size());  // subwords, not characters
    EXPECT_EQ(pieces[0].rfind("\xE2\x96\x81", 0), 0u) << pieces[0];  // the dummy prefix "▁"
    EXPECT_EQ(tok.detokenize(pieces), s);
    for (const auto& p : pieces) EXPECT_NE(v.id(p), v.unk_id()) << p;
  }
}

TEST(Tokenizer, LosslessModelKeepsEveryCharacter) {
  const auto lines = gpl_lines();
  SpmOptions o;
  o.vocab_size = 400;
  o.lossless = true;
  const Tokenizer tok = Tokenizer::from_spm_model(train_spm(views(lines), o, "GPL-3"), "GPL-3");
  EXPECT_TRUE(tok.vocab().contains("<0x0A>"));
  for (const std::string s : {"  indented\ttab  two spaces ", "é ü ∑ 漢字", "The Program"}) {
    const Tokens pieces = tok.tokenize(s);
    EXPECT_EQ(tok.detokenize(pieces), s);
    for (const auto& p : pieces) EXPECT_NE(tok.vocab().id(p), 3) << p;  // byte fallback: no <unk>
  }
  EXPECT_EQ(tok.tokenize("The")[0].rfind("\xE2\x96\x81", 0), std::string::npos);  // no dummy prefix
}

TEST(Tokenizer, TrainingIsDeterministicAndSamplesEvenly) {
  const auto lines = gpl_lines();
  SpmOptions o;
  o.vocab_size = 250;
  const std::string a = train_spm(views(lines), o, "GPL-3");
  const std::string b = train_spm(views(lines), o, "GPL-3");
  EXPECT_EQ(a, b);
  o.max_lines = 100;
  const std::string c = train_spm(views(lines), o, "GPL-3");
  EXPECT_NE(a, c);  // fewer lines, another model
  // max_lines of the non-empty lines, evenly spaced, equal training on exactly those lines.
  std::vector<std::string> nonempty, chosen;
  for (const auto& l : lines)
    if (!l.empty()) nonempty.push_back(l);
  for (size_t i = 0; i < 100; ++i) chosen.push_back(nonempty[i * nonempty.size() / 100]);
  o.max_lines = 1000000;
  EXPECT_EQ(train_spm(views(chosen), o, "chosen"), c);
}

TEST(Tokenizer, VocabularyTooLargeNamesDataAndSizes) {
  const std::vector<std::string> lines = {"a tiny text", "with few words"};
  SpmOptions o;
  o.vocab_size = 5000;
  try {
    train_spm(views(lines), o, "tiny.tsv (source side)");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tiny.tsv (source side)"), std::string::npos) << m;
    EXPECT_NE(m.find("5000"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.find("./src/"), std::string::npos) << m;
  }
  EXPECT_THROW(train_spm(views(std::vector<std::string>{"", ""}), o, "empty"), std::invalid_argument);
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  const std::string d = temp_dir("load");
  const std::string missing = d + "/missing.model";
  try {
    Tokenizer::load_spm(missing);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  const std::string corrupt = d + "/corrupt.model";
  std::ofstream(corrupt) << "this is not a protobuf \x01\x02\x03";
  try {
    Tokenizer::load_spm(corrupt);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(corrupt), std::string::npos) << e.what();
  }
  // A valid model whose pieces are saved and loaded back gives the same tokenizer.
  SpmOptions o;
  o.vocab_size = 200;
  const std::string model = train_spm(views(gpl_lines()), o, "GPL-3");
  const std::string good = d + "/good.model";
  std::ofstream(good, std::ios::binary) << model;
  const Tokenizer t = Tokenizer::load_spm(good);
  EXPECT_EQ(t.spm_model(), model);
  EXPECT_EQ(t.spm_name(), good);
  // Truncated: corrupt too.
  std::ofstream(corrupt, std::ios::binary) << model.substr(0, model.size() / 2);
  EXPECT_THROW(Tokenizer::load_spm(corrupt), std::runtime_error);
  std::filesystem::remove_all(d);
}

// SentencePiece walks a model's normalization trie unchecked as it tokenizes, so a damaged cell crashed the process at
// the first character that reached it, long after the load. Every byte of a model set to 0xff (or 0x7f) in turn, in
// steps (of 613 bytes; 1,839 under the sanitizers, which took two minutes over the 613: each damaged model runs the
// same load and tokenization): each damaged model is refused at load, or tokenizes every character NFKC rewrites
// (and a sample of the rest) without crashing; some are refused for their charsmap.
TEST(Tokenizer, DamagedNormalizationTableIsRefusedAtLoad) {
  SpmOptions o;
  o.vocab_size = 200;
  const std::string model = train_spm(views(gpl_lines()), o, "GPL-3");
  std::string text;  // code points U+00A0..U+FFFD outside the surrogates, as UTF-8
  for (uint32_t cp = 0xA0; cp < 0xFFFE; cp += 3) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    if (cp < 0x800) {
      text += static_cast<char>(0xC0 | cp >> 6);
    } else {
      text += static_cast<char>(0xE0 | cp >> 12);
      text += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    }
    text += static_cast<char>(0x80 | (cp & 0x3F));
  }
  int refused_charsmap = 0, loaded = 0;
  for (size_t at = 0; at < model.size(); at += tfm::testing::kSanitized ? 1839 : 613) {
    std::string bad = model;
    bad[at] = static_cast<char>(bad[at] == '\xff' ? 0x7f : 0xff);
    try {
      const Tokenizer t = Tokenizer::from_spm_model(bad, "damaged");
      ++loaded;
      t.tokenize(text);  // must not crash
    } catch (const std::exception& e) {
      refused_charsmap += std::string(e.what()).find("precompiled charsmap is damaged") != std::string::npos;
    }
  }
  EXPECT_GT(refused_charsmap, 0);
  EXPECT_GT(loaded, 0);  // most single bytes (a piece's score, a rule's replacement text) leave a loadable model
}

// Lines without a space: Chinese prose (2000 lines of 15 words and a full stop, no space), or an index with
// tab-separated fields (as Vim's tags file).
std::vector<std::string> lines_without_spaces(bool chinese) {
  const char* zh[] = {"自由", "软件", "许可", "证书", "程序", "修改", "分发",
                      "版本", "作者", "用户", "的",   "和",   "是",   "在"};
  const char* en[] = {"license", "program", "source",  "version", "author", "user",      "modify",
                      "copy",    "free",    "work",    "patent",  "notice", "warranty",  "object",
                      "code",    "network", "library", "section", "terms",  "conditions"};
  tfm::testing::Rng r(3);
  std::vector<std::string> out;
  for (int i = 0; i < 2000; ++i) {
    std::string line;
    if (chinese) {
      for (int k = 0; k < 15; ++k) line += zh[r.uniform_int(0, 13)];
      line += "\u3002";  // 。
    } else {
      const std::string tag = std::string(en[r.uniform_int(0, 19)]) + "-" + en[r.uniform_int(0, 19)];
      line = tag + "\t" + en[r.uniform_int(0, 19)] + ".txt\t/*" + tag + "*";
    }
    out.push_back(line);
  }
  return out;
}

// A text without a space gives SentencePiece's trainer no "▁" (its pieces' space) to count: a lossless model must hold
// the piece all the same, or a space of another text goes to byte fallback as the three bytes of "▁" and comes back as
// the character "▁". Likewise for a text whose spaces are rarer than the trainer's character coverage (0.9995 of the
// characters: one space in ~60,000 characters falls outside it). Each kind of model, each text: "▁" is a piece, and
// spaces (runs of them, at either end, beside a newline) come back as they were, through tokenize / detokenize and
// through the language model's encode_text / decode_text (which refuses a model that is not lossless).
TEST(Tokenizer, LosslessModelOfATextWithoutSpacesKeepsSpaces) {
  std::vector<std::string> rare = lines_without_spaces(true);
  rare[1000] = "\u81ea\u7531 \u8f6f\u4ef6";  // "自由 软件": the text's one space
  for (const auto& lines : {lines_without_spaces(true), lines_without_spaces(false), rare}) {
    for (SpmType type : {SpmType::UNIGRAM, SpmType::BPE}) {
      SpmOptions o;
      o.vocab_size = 300;  // ~29 characters, "▁", 256 bytes and 4 specials: 290
      o.type = type;
      o.lossless = true;
      const Tokenizer tok = Tokenizer::from_spm_model(train_spm(views(lines), o, "no-space"), "no-space");
      const Vocab v = tok.vocab();
      const std::string where = lines[1000] + " (" + std::string(enum_name(type)) + ")";
      EXPECT_TRUE(v.contains("\xE2\x96\x81")) << where;
      for (const std::string s : {"a  b ", " \u81ea\u7531  \u8f6f\u4ef6\t", "   "})
        EXPECT_EQ(tok.detokenize(tok.tokenize(s)), s) << where;
      std::string back;
      try {
        back = decode_text(v, tok, encode_text(v, tok, "a  b \n", "sample"));
      } catch (const std::invalid_argument& e) {
        back = e.what();
      }
      EXPECT_EQ(back, "a  b \n") << where;
    }
  }
  // The same from a file, as `tfm train --text zh.txt --tokens spm --vocab-size 300` trains and encodes it.
  const std::string d = temp_dir("nospace");
  {
    std::ofstream f(d + "/zh.txt", std::ios::binary);
    for (const std::string& line : lines_without_spaces(true)) f << line << "\n";
  }
  SpmOptions o;
  o.vocab_size = 300;
  const Tokenizer tok = train_text_spm(d + "/zh.txt", o);
  const Vocab v = tok.vocab();
  EXPECT_GT(TextCorpus::read(d + "/zh.txt", v, tok).size(), 0);
  EXPECT_EQ(decode_text(v, tok, encode_text(v, tok, "a  b \n", "prompt")), "a  b \n");
  std::filesystem::remove_all(d);
}

// Language-model text: line by line with "<0x0A>" for each newline; decoding (one id at a time, as
// generate prints) gives the text back exactly, and the corpus of a file holds the same ids.
TEST(Tokenizer, TextEncodingKeepsNewlinesAndDecodesPieceByPiece) {
  const std::string d = temp_dir("text");
  SpmOptions o;
  o.vocab_size = 400;
  const Tokenizer tok = train_text_spm("/usr/share/common-licenses/GPL-3", o);
  const Vocab v = tok.vocab();
  const std::string text = "  The GNU General\n\nPublic License,\tversion 3 \u00e9\n";
  const std::vector<int32_t> ids = encode_text(v, tok, text, "sample");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.id("<0x0A>")), 3);
  EXPECT_EQ(decode_text(v, tok, ids), text);
  std::string streamed;
  for (int32_t id : ids) streamed += decode_text(v, tok, {id});
  EXPECT_EQ(streamed, text);
  std::ofstream(d + "/t.txt", std::ios::binary) << text;
  const TextCorpus c = TextCorpus::read(d + "/t.txt", v, tok);
  ASSERT_EQ(c.size(), static_cast<int64_t>(ids.size()));
  for (int64_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], ids[static_cast<size_t>(i)]) << i;
  // A model without byte pieces cannot encode a newline: the error names the text and the model.
  const Tokenizer plain =
      Tokenizer::from_spm_model(train_spm(views(gpl_lines()), SpmOptions{.vocab_size = 200}, "GPL-3"), "plain.model");
  try {
    encode_text(plain.vocab(), plain, "a\nb", "prompt");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("plain.model"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(d);
}

// A language model's SentencePiece model given from outside (--spm-model) must give its text back as it was:
// one trained with spm_train's defaults (a space before every line, runs of spaces collapsed, NFKC) is
// refused by name, with the flag that fixes it, before it encodes anything; so is one trained with tfm's flags on a
// text without a space, whose pieces have no "▁" (SentencePiece's alphabet is its text's characters).
TEST(Tokenizer, ALanguageModelRefusesAModelThatIsNotLossless) {
  const std::string d = tfm::testing::temp_dir("spm_lossy");
  {
    std::ofstream f(d + "/t.txt", std::ios::binary);
    for (const std::string& line : gpl_lines()) f << line << "\n";
    std::ofstream zh(d + "/zh.txt", std::ios::binary);
    for (const std::string& line : lines_without_spaces(true)) zh << line << "\n";
  }
  const auto model = [&](const std::string& name, const std::string& flags, const std::string& text = "t.txt") {
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + d + "/" + text + " --model_prefix=" + d + "/" + name +
        " --vocab_size=400 --byte_fallback=true --pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3 --pad_piece=<pad>"
        " --bos_piece=<bos> --eos_piece=<eos> --unk_piece=<unk> --minloglevel=100 " +
        flags);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return Tokenizer::load_spm(d + "/" + name + ".model");
  };
  const std::string lossless =
      "--add_dummy_prefix=false --remove_extra_whitespaces=false --normalization_rule_name=identity";
  const std::string tfms_own =
      " (tfm's own: --add_dummy_prefix=false --remove_extra_whitespaces=false --normalization_rule_name=identity "
      "--byte_fallback=true --required_chars=\u2581)";
  const Tokenizer good = model("good", lossless);
  EXPECT_EQ(decode_text(good.vocab(), good, encode_text(good.vocab(), good, " a  b\n\xEF\xAC\x81 ", "t")),
            " a  b\n\xEF\xAC\x81 ");
  const std::pair<std::string, std::string> lossy[] = {
      {"--remove_extra_whitespaces=false --normalization_rule_name=identity", "--add_dummy_prefix=false"},
      {"--add_dummy_prefix=false --normalization_rule_name=identity", "--remove_extra_whitespaces=false"},
      {"--add_dummy_prefix=false --remove_extra_whitespaces=false", "--normalization_rule_name=identity"}};
  for (const auto& [flags, fix] : lossy) {
    const Tokenizer t = model("lossy", flags);
    try {
      encode_text(t.vocab(), t, "hello", "text.txt");
      ADD_FAILURE() << flags << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("text.txt: " + d + "/lossy.model ", 0), 0u) << what;
      EXPECT_NE(what.find("; train it with " + fix + tfms_own), std::string::npos) << what;
    }
  }
  // tfm's flags on a text without a space: no piece "▁", a space would come back as the character "▁".
  const Tokenizer no_space = model("no_space", lossless, "zh.txt");
  ASSERT_FALSE(no_space.vocab().contains("\u2581"));
  try {
    encode_text(no_space.vocab(), no_space, "hello", "text.txt");
    ADD_FAILURE() << "a model without the piece \u2581 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "text.txt: " + d +
                  "/no_space.model has no piece \u2581 (SentencePiece's space), so a space comes "
                  "back as the character \u2581; train it with --required_chars=\u2581, on a text "
                  "that holds a space" +
                  tfms_own);
  }
  // ... and the advice works: the same text with --required_chars=▁ gives a model that keeps spaces.
  const Tokenizer required = model("required", lossless + " --required_chars=\u2581", "zh.txt");
  EXPECT_EQ(decode_text(required.vocab(), required, encode_text(required.vocab(), required, "a  b \n", "t")),
            "a  b \n");
  // A model tfm trained is named after its text ("<text> (its SentencePiece model)"): a message names it as that,
  // never calling the text itself the SentencePiece model.
  const Tokenizer named =
      Tokenizer::from_spm_model(model("lossy", lossy[0].first).spm_model(), d + "/t.txt (its SentencePiece model)");
  try {
    encode_text(named.vocab(), named, "hello", "text.txt");
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("text.txt: " + d + "/t.txt (its SentencePiece model) adds a space before every line", 0), 0u)
        << what;
    EXPECT_EQ(what.find("SentencePiece model " + d), std::string::npos) << what;
  }
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace tfm::data
