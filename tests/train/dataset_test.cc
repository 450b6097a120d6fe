// tests/train/dataset_test.cc — src/train/dataset.cc: load_dataset for each kind of data (a built-in
// task, a pair of TSV files, a text for a language model), with vocabularies built from the data or
// given (resuming, --init-from), and task_epoch.
//
// Method: tiny files written by the test, small enough that the expected vocabularies, ids, splits
// and messages are worked out by hand in the comments; each is checked exactly. The library's own
// readers (data::read_tsv, build_text_vocab, make_task_set) are the oracle only where the dataset
// passes their results on (the skipped-line notes, the task's validation set).
#include "train/dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "test_util.h"
#include "tfm/data/tasks.h"
#include "tfm/data/text.h"
#include "tfm/data/tsv.h"
#include "tfm/models/model_dir.h"

namespace tfm::train {
namespace {

using data::Tokens;

// Runs f and returns the DataError's message ("(no DataError)" when none).
template <class F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const data::DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

std::vector<std::string> specials_then(std::initializer_list<const char*> tokens) {
  std::vector<std::string> v = {"<pad>", "<bos>", "<eos>", "<unk>"};
  v.insert(v.end(), tokens.begin(), tokens.end());
  return v;
}

// ---- built-in tasks ---------------------------------------------------------------------------------

TEST(LoadDataset, TaskUsesTheTaskVocabularyAndItsValidationSet) {
  TrainConfig c;
  c.task = data::Task::SORT;
  c.seed = 5;
  c.task_train_size = 30;
  c.task_valid_size = 12;
  const Dataset ds = load_dataset(c);
  EXPECT_EQ(ds.src_vocab.tokens(), data::task_vocab().tokens());
  EXPECT_EQ(ds.tgt_vocab.tokens(), data::task_vocab().tokens());
  EXPECT_TRUE(ds.train.empty()) << "a task's training examples come from task_epoch";
  EXPECT_TRUE(ds.notes.empty());
  const auto want = data::make_task_set(data::Task::SORT, 5, data::Split::VALID, 12);
  ASSERT_EQ(ds.valid.size(), 12u);
  ASSERT_EQ(ds.valid_set.sources.size(), 12u);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(ds.valid[i].src, want[i].src) << i;
    EXPECT_EQ(ds.valid[i].tgt, want[i].tgt) << i;
    // The decoded evaluation's set: the same sequence in the task's tokens, one reference each.
    ASSERT_EQ(ds.valid_set.references[i].size(), 1u);
    EXPECT_EQ(ds.valid_set.sources[i], ds.src_vocab.decode(want[i].src)) << i;
    EXPECT_EQ(ds.valid_set.references[i][0], ds.tgt_vocab.decode(want[i].tgt)) << i;
  }
  // Given vocabularies (a resumed task run passes the saved ones) change nothing for a task.
  const data::Vocab v = data::task_vocab();
  EXPECT_EQ(load_dataset(c, {&v, &v}).valid[3].src, want[3].src);
}

TEST(TaskEpoch, FreshExamplesEveryEpochAPureFunctionOfSeedAndEpoch) {
  TrainConfig c;
  c.task = data::Task::REVERSE;
  c.seed = 3;
  c.task_train_size = 25;
  const auto e0 = task_epoch(c, 0), e0b = task_epoch(c, 0), e1 = task_epoch(c, 1);
  ASSERT_EQ(e0.size(), 25u);
  ASSERT_EQ(e1.size(), 25u);
  size_t same_as_next_epoch = 0;
  for (size_t i = 0; i < e0.size(); ++i) {
    EXPECT_EQ(e0[i].src, e0b[i].src) << i;
    EXPECT_EQ(e0[i].tgt, e0b[i].tgt) << i;
    // Reverse: the target is the source backwards, in 1..19, length 3..15.
    EXPECT_EQ(e0[i].tgt, std::vector<int32_t>(e0[i].src.rbegin(), e0[i].src.rend())) << i;
    EXPECT_GE(e0[i].src.size(), 3u);
    EXPECT_LE(e0[i].src.size(), 15u);
    same_as_next_epoch += e0[i].src == e1[i].src;
  }
  EXPECT_LT(same_as_next_epoch, 3u) << "epoch 1 repeats epoch 0";
  // Another seed, other examples; the validation split is another draw again.
  c.seed = 4;
  size_t same_other_seed = 0;
  const auto f0 = task_epoch(c, 0);
  for (size_t i = 0; i < e0.size(); ++i) same_other_seed += e0[i].src == f0[i].src;
  EXPECT_LT(same_other_seed, 3u);
  c.seed = 3;
  const auto valid = data::make_task_set(data::Task::REVERSE, 3, data::Split::VALID, 25);
  size_t same_as_valid = 0;
  for (size_t i = 0; i < e0.size(); ++i) same_as_valid += e0[i].src == valid[i].src;
  EXPECT_LT(same_as_valid, 3u);
}

// ---- TSV files --------------------------------------------------------------------------------------

struct Files {
  std::string dir, train, valid;
};

// train.tsv (char tokens):
//   1 "ab\txy"     kept
//   2 ""           blank line
//   3 "abc\tzy"    lengths differ: skipped for an encoder (one target per source position), kept otherwise
//   4 "cab\tzzy"   kept
//   5 "no tab"     malformed
// valid.tsv: "ba\tyx", "q\tz" ('q' is not in the training file).
// Source tokens of the kept lines (encoder): a 2, b 2, c 1 → a, b, c (ties in byte order) after the
// four specials; target: x 1, y 2, z 2 → y, z, x.
Files tsv_files(const std::string& tag) {
  Files f;
  f.dir = testing::temp_dir(tag);
  f.train = f.dir + "/train.tsv";
  f.valid = f.dir + "/valid.tsv";
  testing::spit(f.train, "ab\txy\n\nabc\tzy\ncab\tzzy\nno tab\n");
  testing::spit(f.valid, "ba\tyx\nq\tz\n");
  return f;
}

TrainConfig tsv_config(const Files& f) {
  TrainConfig c;
  c.train_path = f.train;
  c.valid_path = f.valid;
  c.model.arch = Arch::ENCODER;
  return c;
}

TEST(LoadDataset, TsvBuildsTheVocabulariesFromTheTrainingFileAndNotesSkippedLines) {
  const Files f = tsv_files("ds_tsv");
  const TrainConfig c = tsv_config(f);
  const Dataset ds = load_dataset(c);
  EXPECT_EQ(ds.src_vocab.tokens(), specials_then({"a", "b", "c"}));
  EXPECT_EQ(ds.tgt_vocab.tokens(), specials_then({"y", "z", "x"}));
  ASSERT_EQ(ds.train.size(), 2u);
  EXPECT_EQ(ds.train[0].src, (std::vector<int32_t>{4, 5}));     // a b
  EXPECT_EQ(ds.train[0].tgt, (std::vector<int32_t>{6, 4}));     // x y
  EXPECT_EQ(ds.train[1].src, (std::vector<int32_t>{6, 4, 5}));  // c a b
  EXPECT_EQ(ds.train[1].tgt, (std::vector<int32_t>{5, 5, 4}));  // z z y
  ASSERT_EQ(ds.valid.size(), 2u);
  EXPECT_EQ(ds.valid[0].src, (std::vector<int32_t>{5, 4}));  // b a
  EXPECT_EQ(ds.valid[1].src, (std::vector<int32_t>{3}));     // q → <unk>
  EXPECT_EQ(ds.valid[1].tgt, (std::vector<int32_t>{5}));     // z
  ASSERT_EQ(ds.valid_set.sources.size(), 2u);
  EXPECT_EQ(ds.valid_set.sources[1], (Tokens{"q"}));  // the references keep the file's tokens
  EXPECT_EQ(ds.valid_set.references[0], (std::vector<Tokens>{{"y", "x"}}));
  // Two notes: the training file's lines 2, 3 and 5 skipped (valid.tsv has no bad line), and the validation
  // file's "q", which the training file never had.
  ASSERT_EQ(ds.notes.size(), 2u);
  data::TsvOptions o;
  o.equal_lengths = true;
  EXPECT_EQ(ds.notes[0], data::read_tsv(f.train, o).summary());
  EXPECT_EQ(ds.notes[0].rfind(f.train + ": skipped 3 of 5 lines", 0), 0u) << ds.notes[0];
  EXPECT_EQ(ds.notes[1], f.valid +
                             ": 1 source and 0 target tokens are not in the vocabulary and read as <unk>, on 1 "
                             "of 2 lines (the first: line 2)");
  std::filesystem::remove_all(f.dir);
}

TEST(LoadDataset, TsvForADecoderKeepsPairsOfDifferentLengths) {
  const Files f = tsv_files("ds_tsv_s2s");
  TrainConfig c = tsv_config(f);
  c.model.arch = Arch::SEQ2SEQ;
  const Dataset ds = load_dataset(c);
  ASSERT_EQ(ds.train.size(), 3u);  // line 3 kept: a 3, b 3, c 2; y 3, z 3, x 1
  EXPECT_EQ(ds.src_vocab.tokens(), specials_then({"a", "b", "c"}));
  EXPECT_EQ(ds.tgt_vocab.tokens(), specials_then({"y", "z", "x"}));
  EXPECT_EQ(ds.train[1].src, (std::vector<int32_t>{4, 5, 6}));  // a b c
  EXPECT_EQ(ds.train[1].tgt, (std::vector<int32_t>{5, 4}));     // z y
  ASSERT_EQ(ds.notes.size(), 2u);                               // and valid.tsv's <unk>
  EXPECT_EQ(ds.notes[0].rfind(f.train + ": skipped 2 of 5 lines", 0), 0u) << ds.notes[0];
  // Joint vocabulary of char tokens: one vocabulary of both sides' tokens (a, b, y, z 3 each; c 2; x 1).
  c.joint_vocab = true;
  const Dataset j = load_dataset(c);
  EXPECT_EQ(j.src_vocab.tokens(), specials_then({"a", "b", "y", "z", "c", "x"}));
  EXPECT_EQ(j.tgt_vocab.tokens(), j.src_vocab.tokens());
  EXPECT_EQ(j.train[0].tgt, (std::vector<int32_t>{9, 6}));  // x y
  // Byte tokens: the fixed byte vocabulary on both sides, whatever the file holds.
  c.joint_vocab = false;
  c.src_tokens = c.tgt_tokens = data::Tokenization::BYTE;
  const Dataset b = load_dataset(c);
  EXPECT_EQ(b.src_vocab.tokens(), data::byte_vocab().tokens());
  EXPECT_EQ(b.train[0].src, (std::vector<int32_t>{'a', 'b'}));
  std::filesystem::remove_all(f.dir);
}

TEST(LoadDataset, StrictTsvThrowsNamingTheFileAndLine) {
  const Files f = tsv_files("ds_strict");
  TrainConfig c = tsv_config(f);
  c.strict = true;
  EXPECT_EQ(data_error([&] { load_dataset(c); }), f.train + ":2: blank line (--strict)");
  testing::spit(f.train, "ab\txy\nabc\tzy\n");
  const std::string e = data_error([&] { load_dataset(c); });
  EXPECT_EQ(e.rfind(f.train + ":2: ", 0), 0u) << e;  // the lengths of an encoder's pair differ
  testing::spit(f.train, "ab\txy\n");
  testing::spit(f.valid, "ab\txy\nmissing tab\n");
  EXPECT_EQ(data_error([&] { load_dataset(c); }),
            f.valid + ":2: malformed line: no tab between source and target (--strict)");
  std::filesystem::remove_all(f.dir);
}

TEST(LoadDataset, GivenVocabulariesAreUsedAsTheyAre) {
  const Files f = tsv_files("ds_given");
  const TrainConfig c = tsv_config(f);
  // With <unk>: tokens they lack map to it; the vocabularies are not rebuilt from the file.
  const data::Vocab src = data::Vocab::from_tokens(specials_then({"b", "a"}));
  const data::Vocab tgt = data::Vocab::from_tokens(specials_then({"x", "y", "z", "w"}));
  const Dataset ds = load_dataset(c, {&src, &tgt});
  EXPECT_EQ(ds.src_vocab.tokens(), src.tokens());
  EXPECT_EQ(ds.tgt_vocab.tokens(), tgt.tokens());
  ASSERT_EQ(ds.train.size(), 2u);
  EXPECT_EQ(ds.train[0].src, (std::vector<int32_t>{5, 4}));     // a b
  EXPECT_EQ(ds.train[1].src, (std::vector<int32_t>{3, 5, 4}));  // c → <unk>, a, b
  EXPECT_EQ(ds.train[1].tgt, (std::vector<int32_t>{6, 6, 5}));  // z z y
  // Without <unk>: an error naming the file, the line, the side and the token.
  const data::Vocab src_closed = data::Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "a", "b", "c"});
  const data::Vocab tgt_closed = data::Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "x", "y"});
  EXPECT_EQ(data_error([&] { load_dataset(c, {&src_closed, &tgt_closed}); }),
            f.train + ":4: target token 'z' is not in the vocabulary (which has no <unk>)");
  const data::Vocab tgt_all = data::Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "x", "y", "z"});
  EXPECT_EQ(data_error([&] { load_dataset(c, {&src_closed, &tgt_all}); }),
            f.valid + ":2: source token 'q' is not in the vocabulary (which has no <unk>)");
  std::filesystem::remove_all(f.dir);
}

TEST(LoadDataset, SpmSideTrainsItsModelOrUsesTheSavedDirectorys) {
  // 60 lines of words over 9 letters: a source SentencePiece model of 20 pieces; character targets.
  const std::string d = testing::temp_dir("ds_spm");
  static const char* words[] = {"bad", "cab", "dab", "fade", "bead", "aced", "faced", "cage", "edge", "hedge"};
  testing::Rng r(1);
  std::string tsv;
  for (int i = 0; i < 60; ++i) {
    std::string s;
    for (int k = r.uniform_int(2, 5); k > 0; --k) s += std::string(s.empty() ? "" : " ") + words[r.uniform_int(0, 9)];
    tsv += s + "\t" + std::string(s.rbegin(), s.rend()) + "\n";
  }
  testing::spit(d + "/t.tsv", tsv);
  TrainConfig c;
  c.train_path = c.valid_path = d + "/t.tsv";
  c.model.arch = Arch::SEQ2SEQ;
  c.src_tokens = data::Tokenization::SPM;
  c.src_vocab_size = 20;
  const Dataset ds = load_dataset(c);
  ASSERT_TRUE(ds.src_tokenizer.is_spm());
  EXPECT_FALSE(ds.tgt_tokenizer.is_spm());
  EXPECT_EQ(ds.src_vocab.size(), 20);
  EXPECT_EQ(ds.src_vocab.tokens(), ds.src_tokenizer.vocab().tokens()) << "the spm side's vocabulary is its pieces";
  EXPECT_EQ(ds.train.size(), 60u);
  EXPECT_EQ(ds.train[0].src, ds.src_vocab.encode(ds.src_tokenizer.tokenize(tsv.substr(0, tsv.find('\t')))));
  // From a saved directory: its model, even though the config now asks for another size.
  model_dir::save_tokenizers(d, ds.src_tokenizer, ds.tgt_tokenizer);
  TrainConfig again = c;
  again.src_vocab_size = 22;
  const tfm::data::Tokenizer src_tok = tfm::data::Tokenizer::load_spm(model_dir::path(d, model_dir::SRC_SPM));
  const tfm::data::Tokenizer tgt_tok = ds.tgt_tokenizer;
  const Dataset saved = load_dataset(again, {&ds.src_vocab, &ds.tgt_vocab, &src_tok, &tgt_tok});
  EXPECT_EQ(saved.src_tokenizer.spm_model(), ds.src_tokenizer.spm_model());
  EXPECT_EQ(saved.src_vocab.size(), 20);
  EXPECT_EQ(saved.train[5].src, ds.train[5].src);
  // A saved vocabulary that is not the model's pieces is refused, naming the model.
  const std::string e = data_error([&] { load_dataset(again, {&ds.tgt_vocab, &ds.tgt_vocab, &src_tok, &tgt_tok}); });
  EXPECT_NE(e.find("its pieces are not the vocabulary saved beside it (20 pieces, " + std::to_string(ds.tgt_vocab.size()) +
                   " entries)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(d), std::string::npos) << e;
  std::filesystem::remove_all(d);
}

// ---- text for a language model ----------------------------------------------------------------------

// 125 characters: "0123456789abcdefghijklmnopqrstuvwxyz" cycled, newline every 25th.
std::string text125() {
  static const std::string alphabet = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string t;
  for (int i = 0; i < 125; ++i) t += (i % 25 == 24) ? '\n' : alphabet[static_cast<size_t>(i) % alphabet.size()];
  return t;
}

TrainConfig text_config(const std::string& path) {
  TrainConfig c;
  c.text_path = path;
  c.model.arch = Arch::DECODER;
  c.valid_fraction = 0.1;
  c.block_size = 8;
  return c;
}

std::vector<int32_t> ids_of(const data::TextCorpus& t) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < t.size(); ++i) v.push_back(t[i]);
  return v;
}

TEST(LoadDataset, TextSplitsOffTheLastValidFraction) {
  const std::string d = testing::temp_dir("ds_text");
  const std::string text = text125();
  testing::spit(d + "/t.txt", text);
  const Dataset ds = load_dataset(text_config(d + "/t.txt"));
  EXPECT_EQ(ds.tgt_vocab.tokens(), data::build_text_vocab(d + "/t.txt", data::Tokenization::CHAR).tokens());
  EXPECT_EQ(ds.src_vocab.tokens(), ds.tgt_vocab.tokens());
  EXPECT_TRUE(ds.train.empty() && ds.valid.empty() && ds.valid_set.sources.empty());
  // 0.1 · 125 = 12.5, rounded half away from zero: 13 tokens for validation, 112 for training.
  ASSERT_EQ(ds.text_train.size(), 112);
  ASSERT_EQ(ds.text_valid.size(), 13);
  EXPECT_EQ(ds.text_train.name(), d + "/t.txt (its first 112 tokens, for training)");
  EXPECT_EQ(ds.text_valid.name(), d + "/t.txt (its last 10% for validation)");
  const std::vector<int32_t> all = data::encode_text(ds.tgt_vocab, data::Tokenization::CHAR, text);
  ASSERT_EQ(all.size(), 125u);
  EXPECT_EQ(ids_of(ds.text_train), std::vector<int32_t>(all.begin(), all.begin() + 112));
  EXPECT_EQ(ids_of(ds.text_valid), std::vector<int32_t>(all.begin() + 112, all.end()));
  std::filesystem::remove_all(d);
}

TEST(LoadDataset, TextWithAValidationFileAndGivenVocabularies) {
  const std::string d = testing::temp_dir("ds_text_valid");
  testing::spit(d + "/t.txt", text125());
  testing::spit(d + "/v.txt", "abc!\n");  // '!' is not in t.txt
  TrainConfig c = text_config(d + "/t.txt");
  c.valid_text_path = d + "/v.txt";
  const Dataset ds = load_dataset(c);
  EXPECT_EQ(ds.text_train.size(), 125);  // the whole training file
  ASSERT_EQ(ds.text_valid.size(), 5);
  const data::Vocab& v = ds.tgt_vocab;
  EXPECT_EQ(ids_of(ds.text_valid), (std::vector<int32_t>{v.id("a"), v.id("b"), v.id("c"), v.unk_id(), v.id("\n")}));
  EXPECT_EQ(ds.text_valid.name(), d + "/v.txt");
  // Given (saved) vocabularies: used as they are, not rebuilt from the text.
  const data::Vocab given = data::Vocab::from_tokens(specials_then({"a", "b", "c", "!", "\n"}));
  const Dataset g = load_dataset(c, {&given, &given});
  EXPECT_EQ(g.tgt_vocab.tokens(), given.tokens());
  EXPECT_EQ(g.src_vocab.tokens(), given.tokens());
  EXPECT_EQ(ids_of(g.text_valid), (std::vector<int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(g.text_train[0], 3);  // '0' → <unk>
  // Byte tokens: the byte vocabulary, a token per byte.
  c.src_tokens = c.tgt_tokens = data::Tokenization::BYTE;
  const Dataset b = load_dataset(c);
  EXPECT_EQ(b.tgt_vocab.tokens(), data::byte_vocab().tokens());
  EXPECT_EQ(ids_of(b.text_valid), (std::vector<int32_t>{'a', 'b', 'c', '!', '\n'}));
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace tfm::train
