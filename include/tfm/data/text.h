// tfm/data/text.h — plain text for language models: encoding text to ids and back, a corpus of
// token ids stored once, and the windows a language model trains and is evaluated on.
//
// A TextCorpus holds a text file's token ids as one compact array (uint16 when the vocabulary has
// at most 65,536 entries, else int32). The text itself is read through a memory map and never
// copied, so a file of a few hundred MB costs its token array only (2 bytes a token for char or
// byte tokens); with a cache path the array lives in a file and is memory-mapped too.
//
// Windows (nanoGPT's get_batch): a window is block_size + 1 consecutive tokens; the model reads the
// first block_size (src, (B, T)) and predicts the last block_size (tgt_out, (B, T)), one target per
// position (TargetLayout::PER_POSITION, S = T = block_size).
//   random      B start positions uniform in [0, size − block_size − 1], drawn from the run's
//               Generator (counters taken with Generator::take, so a saved generator resumes exactly).
//   sequential  batch k of an epoch: windows k·B .. k·B + B − 1 of the corpus cut at multiples of
//               block_size (the last batch of an epoch may have fewer rows).
//   validation  the whole text in consecutive windows at multiples of block_size: every token but the
//               first is a target exactly once; the last window is shorter when block_size does not
//               divide size − 1.
//
// To add a tokenization for text: its case in encode_text / decode_text, build_text_vocab and the
// encoding loop of TextCorpus::read, and tests in tests/data/text_test.cc (spm: tests/spm/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/data/batching.h"
#include "tfm/data/tokenizer.h"
#include "tfm/data/vocab.h"
#include "tfm/random.h"

namespace tfm::data {

// Text → ids: CHAR maps each code point to its id (an unknown one to <unk>; a vocabulary without
// <unk> throws std::invalid_argument naming it), invalid UTF-8 throws std::invalid_argument naming
// the byte offset; BYTE maps each byte to the id of byte_token(b). SPACE: tokenize + Vocab::encode.
// SPM: each line's pieces (an unknown one <unk>), the piece "<0x0A>" for each newline (a model
// without it throws naming `source` and the model, as does a model that would not give a text back:
// no piece "▁", a dummy prefix, spaces collapsed, NFKC) and the byte pieces of each "▁" (U+2581, the
// pieces' space); invalid UTF-8 throws naming its byte offset, as under CHAR (SentencePiece would
// read it as U+FFFD). `source` names the text in messages ("prompt.txt: invalid UTF-8 at byte 3
// ..."). GPT2_BPE: the BPE's ids of the whole text
// (tfm/data/bpe.h). A Tokenization converts to its Tokenizer.
std::vector<int32_t> encode_text(const Vocab& vocab, const Tokenizer& t, const std::string& text,
                                 const std::string& source = "text");
// Ids → text: each token's text (a byte token its byte, <unk> U+FFFD), <pad>, <bos> and <eos>
// dropped; SPACE joins tokens with one space. Throws std::invalid_argument for an id outside the
// vocabulary. BYTE output may end inside a UTF-8 sequence when the ids do. SPM: piece by piece, a
// byte piece its byte and "▁" a space (SentencePiece's own decoding for the lossless models of
// tfm/data/tokenizer.h, and it works on one id at a time, as generation prints). GPT2_BPE: the bytes
// of the BPE's tokens (one id at a time may end inside a UTF-8 sequence; ids past the BPE's, the rows
// of a padded vocabulary, add nothing).
std::string decode_text(const Vocab& vocab, const Tokenizer& t, const std::vector<int32_t>& ids);

// The vocabulary of a text file: CHAR gives <pad>, <bos>, <eos>, <unk>, then every code point of
// the file by decreasing count (ties in byte order), as Vocab::build; BYTE gives byte_vocab().
// Throws DataError (tfm/data/tsv.h) naming the file when it is empty, unreadable, or (CHAR) UTF-16
// (utf16_text, tfm/data/vocab.h) or not valid UTF-8, with the byte offset. SPACE is refused (a text's words are not a
// closed set), and SPM and GPT2_BPE too (their vocabulary is their files': Tokenizer::vocab).
Vocab build_text_vocab(const std::string& path, Tokenization t);
// A lossless SentencePiece model (tfm/data/tokenizer.h) trained on the lines of a text file (at most
// options.max_lines of them, evenly spaced). Throws DataError naming the file when it is unreadable,
// empty, UTF-16 (utf16_text) or not UTF-8; std::invalid_argument naming it for a vocabulary size the text cannot give
// (an option's value: train_spm's errors).
Tokenizer train_text_spm(const std::string& path, const SpmOptions& options);

// 64-bit FNV-1a of a file's bytes, as 16 hex digits: what a run remembers of its training text.
std::string text_file_hash(const std::string& path);

class TextCorpus {
 public:
  TextCorpus() = default;
  // Reads and encodes `path` (errors as build_text_vocab, DataError naming the file). With
  // `cache_path`, the ids are written there (atomically) and memory-mapped; a cache file written for
  // the same text (size and hash) and vocabulary is mapped without re-encoding.
  static TextCorpus read(const std::string& path, const Vocab& vocab, const Tokenizer& t, const std::string& cache_path = "");
  // Ids already in memory (tests, tools); `name` stands for the file in messages.
  static TextCorpus from_ids(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& name = "text");

  int64_t size() const { return size_; }
  int32_t operator[](int64_t i) const {
    const int64_t k = begin_ + i;
    return width_ == 2 ? reinterpret_cast<const uint16_t*>(base_)[k] : reinterpret_cast<const int32_t*>(base_)[k];
  }
  // Tokens [begin, end) sharing this corpus's storage (the valid-fraction split); `name` (if not
  // empty) replaces the name in messages.
  TextCorpus slice(int64_t begin, int64_t end, const std::string& name = "") const;
  const std::string& name() const { return name_; }  // the file it came from
  int64_t count(int32_t id) const;                   // how many of its tokens are `id` (e.g. <unk>)
  int bytes_per_token() const { return width_; }
  const std::string& hash() const { return hash_; }    // text_file_hash of the file ("" for from_ids)
  int64_t text_bytes() const { return text_bytes_; }   // bytes of the whole file

 private:
  std::shared_ptr<const void> owner_;  // the array's storage (a vector or a mapped cache file)
  const uint8_t* base_ = nullptr;
  int width_ = 2;
  int64_t begin_ = 0, size_ = 0;
  std::string name_, hash_;
  int64_t text_bytes_ = 0;
};

// Throws DataError "<name>: <n> tokens, too few for one window of block_size + 1 = <m> tokens ..."
// when the corpus cannot give one training window.
void check_windows(const TextCorpus& corpus, int64_t block_size);

// The batch of windows starting at `starts` with T inputs each: src (B, T), tgt_out (B, T).
TokenBatch window_batch(const TextCorpus& corpus, const std::vector<int64_t>& starts, int64_t T);
// count_target_tokens(window_batch(corpus, starts, T), pad_id) without building the batch.
int64_t count_window_targets(const TextCorpus& corpus, const std::vector<int64_t>& starts, int64_t T, int32_t pad_id);
// B random windows of block_size (nanoGPT's get_batch), drawing from `gen`; their starts alone.
TokenBatch random_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, Generator& gen);
std::vector<int64_t> random_window_starts(const TextCorpus& corpus, int64_t block_size, int64_t B, Generator& gen);
// Sequential mode: batches per epoch, and batch k of an epoch (and its starts alone).
int64_t sequential_batch_count(const TextCorpus& corpus, int64_t block_size, int64_t B);
TokenBatch sequential_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k);
std::vector<int64_t> sequential_window_starts(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k);
// Validation: the batches (at most B rows of full windows each, then the shorter last window alone)
// covering the whole corpus, in order.
int64_t validation_batch_count(const TextCorpus& corpus, int64_t block_size, int64_t B);
TokenBatch validation_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k);

}  // namespace tfm::data
