// tfm/data/tsv.h — reading `source<TAB>target` pair files.
//
// Every line is checked; a bad line never crashes the reader. Problems, each with its 1-based line
// number: blank line (empty or whitespace only), malformed (no tab, more than one tab, an empty side,
// invalid UTF-8 under char or spm tokenization, source/target lengths differ when equal lengths are
// required), over-long (more than max_tokens tokens on a side, or a source of more than max_src_tokens;
// char, space and byte sides are counted before their tokens are made, so a huge line costs its bytes
// only). By default bad lines are skipped and listed in TsvData::problems; with strict the first one
// throws DataError "<path>:<line>: <what>". A file without a single usable pair always throws (an empty
// training file is never a silent no-op). A trailing "\r" (CRLF files) is removed before checking, and a
// UTF-8 byte order mark at the start of the file is not text. A file with a side read as UTF-8
// (reads_utf8: char, space, spm) throws DataError when it is UTF-16 (utf16_text); a file whose sides are
// both read as bytes (byte, gpt2-bpe) may hold any bytes, NULs included.
//
// To add a check: a branch in parse_tsv's per-line loop that calls its `problem(...)` helper, and a
// case in tests/data/tsv_test.cc.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tfm/data/tokenizer.h"
#include "tfm/data/vocab.h"

namespace tfm::data {

// Every data-file error (missing, empty, strict-mode bad line): one line, starting with the path.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TsvOptions {
  Tokenizer src_tokens = Tokenization::CHAR;  // an spm side needs its model (Tokenizer::load_spm)
  Tokenizer tgt_tokens = Tokenization::CHAR;
  int64_t max_tokens = 256;    // per side
  // The model's max_len (the positions a source can have): a source of more tokens is over-long whatever
  // max_tokens allows, and its problem names that bound (tfm eval: targets of any length, sources up to max_len).
  int64_t max_src_tokens = std::numeric_limits<int64_t>::max();
  bool strict = false;         // first problem throws
  bool equal_lengths = false;  // arch "encoder": one target token per source token
  // false: a side whose tokenizer has no vocabulary (char, space, byte) keeps only its text (TextPair::src_text,
  // tgt_text), for the caller to tokenize when it needs the tokens: a big file's char tokens, 32-byte strings
  // each, would cost some 30 times the file.
  bool keep_tokens = true;
};

struct TextPair {
  std::vector<std::string> src, tgt;  // tokens (empty for a side kept as text only: TsvOptions::keep_tokens)
  std::string src_text;               // the source as the file has it
  std::string tgt_text;               // the target as the file has it (what a translation is scored against)
  int64_t line = 0;                   // 1-based line number in the file
};

struct TsvProblem {
  int64_t line = 0;
  std::string what;  // "blank line", "malformed line: no tab between source and target", ...
};

struct TsvData {
  std::string path;
  std::vector<TextPair> pairs;
  std::vector<TsvProblem> problems;  // skipped lines, in file order
  int64_t lines = 0;                 // lines read (a final line without "\n" counts)
  // "<path>: skipped 2 of 10 lines (line 3: blank line; line 7: ...)" — at most 5 listed.
  std::string summary() const;
};

TsvData read_tsv(const std::string& path, const TsvOptions& options);
// The raw text of each side of every line that has one tab and a non-blank side each (what an spm
// model of a side trains on), in file order: the lines parse_tsv reads (a leading byte order mark
// and each line's trailing "\r" dropped); DataError naming the file when it cannot be read. With
// max_side_chars > 0, a line with a side of more code points is left out: the caller chooses the bound so that such
// a pair is all but surely over-long whatever model it trains (a SentencePiece piece holds at most
// kSpmMaxPieceChars code points, tokenizer.h; normalization may still collapse runs of spaces), parse_tsv then
// skipping it; it would only cost the trainer time (a junk line of megabytes: hours) and shape the vocabulary.
struct TsvSides {
  std::vector<std::string> src, tgt;
};
TsvSides read_tsv_sides(const std::string& path, int64_t max_side_chars = 0);
// The same on text already in memory; `name` stands for the path in messages.
TsvData parse_tsv(const std::string& text, const std::string& name, const TsvOptions& options);

}  // namespace tfm::data
