// tfm/data/bpe.h — GPT-2's byte-level BPE tokenizer (OpenAI's encoder.py; tiktoken's "gpt2"
// encoding; Hugging Face's GPT2Tokenizer), loaded from its two files:
//   vocabulary  encoder.json / vocab.json: a JSON object token → id whose ids are 0..V−1, each once;
//   merges      vocab.bpe / merges.txt: one merge "a b" a line, best (lowest rank) first; a first line
//               starting with "#version" (e.g. "#version: 0.2") is a header and skipped.
//
// Encoding text (UTF-8) into ids, as GPT-2 defines it:
//   1. Pre-tokenize: cut the text into pieces with GPT-2's pattern (matched left to right, each piece
//      starting where the last ended, so the pieces tile the text)
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      — English contractions, a letter run, a number run or a run of other symbols (each with at most
//      one leading space), then whitespace: a run of whitespace before a non-space leaves its last
//      character to start the next piece (" ?\p{L}+" takes it), a trailing run is one piece.
//      \p{L} / \p{N} are Unicode's letter / number categories (PCRE2 in UTF + UCP mode); \s is
//      Unicode's White_Space property, as in Python's `regex` module and Rust's `regex` (tiktoken).
//      Bytes that are not UTF-8 (a text that ends or was cut inside a character: generate's output,
//      or the decoding of a text's first ids) are read too: each maximal run of valid UTF-8 is cut
//      with the pattern as a text of its own, and each maximal run of bytes that start no valid
//      UTF-8 sequence is one piece. So valid UTF-8 text is cut as ever, and the bytes of a run merge
//      with one another in step 3 (a cut emoji's "\xF0\x9F" is GPT-2's one token "ðŁ", not two), as
//      in tiktoken's _encode_bytes, which merges the bytes from the first invalid one as one
//      sequence; tiktoken's sequence also takes the last piece before them and all the text after,
//      so its ids for such text can differ from these (decode gives the same bytes back from either).
//   2. Each piece's UTF-8 bytes become byte tokens: byte b is the one-character token
//      bytes_to_unicode(b) — the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves, the other
//      68 bytes are U+0100.. in byte order (space → "Ġ" U+0120, newline → "Ċ" U+010A).
//   3. Ranked merges: repeatedly take the adjacent pair of symbols whose merge has the lowest rank
//      (its line among the merges) and merge every occurrence of that pair, left to right without
//      overlap, into the merged symbol; stop when no adjacent pair has a merge. The symbols' ids are
//      the piece's ids. (tfm keeps the pairs in a heap: O(n log n) in a piece's n bytes, where
//      rescanning them after every merge is O(n²) — a long run of letters is a single piece.)
// A piece's ids depend only on its bytes, so they are cached (word → ids, up to kBpeCacheEntries
// words; copies of a ByteLevelBpe share the cache, guarded by a mutex, so encode is safe to call
// from several threads).
//
// Decoding maps each id to its token's bytes (each character through the inverse table; a token
// holding a character outside the table, such as an added special, contributes its own UTF-8) and
// concatenates them: decode(encode(x)) == x for every string of bytes x. A sequence of ids cut
// inside a character decodes to bytes that are not valid UTF-8, which encode reads back (step 1).
//
// Special tokens ("<|endoftext|>") are ordinary vocabulary entries here: encode never produces them
// from text (tiktoken's encode_ordinary), and find() gives their ids.
//
// Unicode version: \p{L} and \p{N} follow the tables of the PCRE2 library tfm runs with (Debian
// bookworm's 10.42: Unicode 14.0). A letter or digit assigned in Unicode 15 or later (Kawi, Nag
// Mundari, CJK Extensions H and I, Egyptian Hieroglyphs Extended-A, ...) is unassigned there, so it
// joins the pieces of "other" symbols instead of the letters or digits beside it, and its ids differ
// from those of a tokenizer with newer tables (npm tiktoken 1.0.22 differs on 9,392 code points).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::data {

// Words whose ids the cache keeps; later new words are encoded each time (the results are the same).
inline constexpr size_t kBpeCacheEntries = 100000;

class ByteLevelBpe {
 public:
  // Reads the two files. Throws std::runtime_error naming the file when it cannot be read, and
  // std::invalid_argument with one line "<file>: ..." / "<file>:<line>: ..." when it is not valid:
  //   a vocabulary that is not a JSON object of string → integer, whose ids do not cover 0..V−1 once
  //   each, that holds an empty token or lacks one of the 256 byte tokens;
  //   a merges line that is not two symbols separated by one space, a symbol or a merge result that
  //   is not in the vocabulary, a merge given twice.
  static ByteLevelBpe load(const std::string& vocab_path, const std::string& merges_path);
  // The two files' contents, as read (what load parses; a data::Tokenizer keeps them to save them).
  // Throws std::runtime_error naming the file that cannot be read.
  struct Files {
    std::string vocab_json, merges;
  };
  static Files read_files(const std::string& vocab_path, const std::string& merges_path);
  // The same from the files' contents; the names stand for the files in messages.
  static ByteLevelBpe from_strings(std::string_view vocab_json, const std::string& vocab_name,
                                   std::string_view merges, const std::string& merges_name);

  // Text → ids: UTF-8, and any bytes that are not (step 1 above). Throws std::invalid_argument only
  // for a piece longer than 2^31 − 1 bytes.
  std::vector<int32_t> encode(std::string_view text) const;
  // The same ids handed to emit a piece at a time (ids[0, n) of each piece, in order), for a caller
  // that stores them otherwise (tfm/data/text.h: a compact array): the pieces are matched as they are
  // encoded, so a text costs no more than its ids (not a record of every piece besides them).
  void encode(std::string_view text, const std::function<void(const int32_t* ids, size_t n)>& emit) const;
  // Ids → the bytes they stand for. Throws std::invalid_argument naming an id outside 0..V−1.
  std::string decode(const std::vector<int32_t>& ids) const;
  // Step 1 alone: the pieces of `text` (views into it), which concatenate to `text` (any bytes).
  std::vector<std::string_view> pretokenize(std::string_view text) const;

  int64_t vocab_size() const;
  int64_t num_merges() const;
  // The vocabulary's spelling of a token ("Ġthe"), and a spelling's id (nullopt when absent).
  const std::string& token(int32_t id) const;  // throws std::invalid_argument
  std::optional<int32_t> find(std::string_view token) const;

  // GPT-2's bytes_to_unicode(b) as UTF-8 ("Ġ" for a space).
  static std::string byte_symbol(uint8_t b);

 private:
  ByteLevelBpe() = default;  // only the loaders make one
  struct Impl;
  std::shared_ptr<Impl> impl_;  // read-only after loading except its cache (mutex-guarded)
};

}  // namespace tfm::data
