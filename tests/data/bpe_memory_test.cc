// tests/data/bpe_memory_test.cc — what encoding a text with GPT-2's BPE (tfm/data/bpe.h) costs in
// memory: a language model's text (tfm/data/text.h) costs its token array, not a record of every
// pre-tokenizer piece besides it.
//
// Method: the heap counted (tests/data/heap_counter.h: the peak a call adds, exact on every
// machine). The vocabulary is the 256 byte tokens and no merges, so each byte of the text is one
// token and a token count is a byte count.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/heap_counter.h"
#include "test_util.h"
#include "tfm/data/bpe.h"
#include "tfm/data/text.h"

namespace tfm::data {
namespace {

// The 256 byte tokens, no merges.
Tokenizer bytes_only_bpe() {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[ByteLevelBpe::byte_symbol(static_cast<uint8_t>(b))] = b;
  return Tokenizer::from_gpt2_bpe(v.dump(), "vocab.json", "#version: 0.2\n", "merges.txt");
}

// " a" a million times: a million pieces " a" of two tokens each. The corpus keeps 2 bytes a token
// (a vocabulary of 256); encoding may add a growing array of the ids, but not the pieces besides them
// (16 bytes each as views, with their vector's doublings), which took 14+ bytes a token before.
TEST(BpeMemory, TextCorpusCostsItsTokensNotThePieces) {
  const std::string dir = testing::temp_dir("bpe_memory");
  const size_t pieces = 1000000, tokens = 2 * pieces;
  std::string text;
  for (size_t i = 0; i < pieces; ++i) text += " a";
  testing::spit(dir + "/t.txt", text);
  text = std::string();
  const Tokenizer bpe = bytes_only_bpe();
  const Vocab vocab = bpe.vocab();
  TextCorpus corpus;
  const int64_t added = testing::heap::peak_added([&] { corpus = TextCorpus::read(dir + "/t.txt", vocab, bpe); });
  ASSERT_EQ(corpus.size(), static_cast<int64_t>(tokens));
  EXPECT_EQ(corpus[0], ' ');
  EXPECT_EQ(corpus[1], 'a');
  EXPECT_EQ(corpus.bytes_per_token(), 2);
  EXPECT_LT(static_cast<double>(added) / static_cast<double>(tokens), 6.0) << added << " bytes at the peak";
  std::filesystem::remove_all(dir);
}

// encode(text) itself: its ids (4 bytes a token, with the vector's growth) and no pieces.
TEST(BpeMemory, EncodeKeepsNoPieces) {
  const Tokenizer bpe = bytes_only_bpe();
  std::string text;
  for (size_t i = 0; i < 1000000; ++i) text += " a";
  std::vector<int32_t> ids;
  const int64_t added = testing::heap::peak_added([&] { ids = bpe.bpe().encode(text); });
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_LT(static_cast<double>(added) / static_cast<double>(ids.size()), 10.0) << added << " bytes at the peak";
}

}  // namespace
}  // namespace tfm::data
