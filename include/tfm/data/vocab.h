// tfm/data/vocab.h — tokenization (char / space / byte) and vocabularies.
//
// A Vocab maps token strings to ids. Vocabularies built from a training file start with the four
// specials <pad>=0, <bos>=1, <eos>=2, <unk>=3, then the file's tokens by decreasing frequency (ties:
// byte order), so the same file always gives the same ids. The built-in tasks use their own
// layout (tfm/data/tasks.h) where the special ids differ; a Vocab therefore stores where its
// specials are instead of assuming 0..3. Any special may be absent: GPT-2's vocabulary
// (tfm/data/bpe.h) has no <pad> and no <unk>, and its one special "<|endoftext|>" is both <bos> and
// <eos> (found by that spelling when <bos> / <eos> are absent). A language model's windows never pad,
// so it needs no <pad>; what pads its batches (TSV pairs, the encoder and seq2seq families) refuses a
// vocabulary without one (ModelConfig::validate says why). The byte vocabulary (byte_vocab) is fixed: ids 0..255 are
// the bytes, spelled "<0x00>".."<0xFF>", then <pad>=256, <bos>=257, <eos>=258 (no <unk>: every byte
// is known).
//
// Two file formats, chosen by the file name: "*.json" holds a JSON array of the token strings
// (entry i = id i; JSON escapes any code point, newline and tab included), any other name one token
// per line (line i + 1 = id i; it cannot hold a token containing a newline). On load the specials are
// found by their spelling.
//
// To add a tokenization: a Tokenization enumerator and its name, a case in tokenize/detokenize, and a
// case in tests/data/vocab_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tfm/enum_names.h"

namespace tfm::data {

// A UTF-8 byte order mark (editors on Windows write one). Where a text file or stream starts, it marks the
// encoding and is not text: dropped there (TSV files, GPT-2 merges files, tfm translate's standard input).
inline constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
// UTF-16 text (what Windows calls "Unicode"): "" for a text that is not, else the message that says so (tfm reads
// UTF-8), for a file's reader to put after its name. Only the reader of a text read as UTF-8 asks (reads_utf8:
// char, space, spm; a TSV file when either side is): byte and gpt2-bpe tokens take any bytes, NULs at odd offsets
// included, so such a text is never refused as UTF-16. UTF-16 starts with its byte order mark, FF FE or FE FF,
// or, without one (iconv -t UTF-16LE, Python's .encode("utf-16-le")), holds NUL as the high byte of its ASCII
// characters (tab, newline, space, Latin letters): at odd offsets in UTF-16LE, even ones in UTF-16BE. So among the
// first 512 bytes, NUL at one parity more than 4 times as often as at the other, and at least twice: in at least
// half of the 2-byte code units (ASCII text), or in at least 8 and a sixteenth of them (words of another script
// between ASCII separators). UTF-8 text has NUL only as the character U+0000, at any offset (a text of NULs, at
// both parities, is not UTF-16).
inline std::string utf16_text(std::string_view head) {
  if (head.size() >= 2 && ((head[0] == '\xFF' && head[1] == '\xFE') || (head[0] == '\xFE' && head[1] == '\xFF')))
    return std::string("UTF-16 text (it starts with the byte order mark ") + (head[0] == '\xFF' ? "FF FE" : "FE FF") +
           "); tfm reads UTF-8: convert it, e.g. iconv -f UTF-16 -t UTF-8";
  const size_t units = std::min<size_t>(head.size(), 512) / 2;  // 2-byte code units looked at
  size_t nul[2] = {0, 0};                                       // NUL bytes at even, odd offsets
  for (size_t i = 0; i < 2 * units; ++i) nul[i % 2] += head[i] == '\0';
  for (const size_t high : {1, 0}) {  // the offset parity of an ASCII character's NUL: odd in UTF-16LE, even in BE
    const size_t n = nul[high];
    if (n < 2 || n <= 4 * nul[1 - high] || !(2 * n >= units || (n >= 8 && 16 * n >= units))) continue;
    const std::string form = high == 1 ? "UTF-16LE" : "UTF-16BE";
    return form + " text without a byte order mark (NUL bytes at " + (high == 1 ? "odd" : "even") +
           " offsets of its start: the high bytes of ASCII characters in " + form +
           "); tfm reads UTF-8: convert it, e.g. iconv -f " + form + " -t UTF-8";
  }
  return "";
}

// A sequence of tokens (strings), as read from text or decoded.
using Tokens = std::vector<std::string>;

enum class Tokenization { CHAR, SPACE, BYTE, SPM, GPT2_BPE };

// Whether t reads its text as UTF-8 (char, space and spm refuse invalid UTF-8; byte and gpt2-bpe read any bytes):
// a reader of such a text asks utf16_text.
inline bool reads_utf8(Tokenization t) {
  return t == Tokenization::CHAR || t == Tokenization::SPACE || t == Tokenization::SPM;
}

// CHAR: every UTF-8 code point is a token (throws std::invalid_argument on invalid UTF-8).
// SPACE: maximal runs of non-whitespace (space, tab, \r, \n, \v, \f separate), each UTF-8 (throws as CHAR).
// BYTE: every byte is a token, spelled byte_token(b) ("<0x0A>" for a newline); any bytes are accepted.
// SPM: a SentencePiece model's pieces; it needs the model, so it goes through data::Tokenizer
// (tfm/data/tokenizer.h) and these two functions throw std::invalid_argument for it.
// GPT2_BPE: GPT-2's byte-level BPE (tfm/data/bpe.h); it needs its two files, so it too goes through
// data::Tokenizer and these two functions throw for it.
std::vector<std::string> tokenize(const std::string& text, Tokenization t);
// tokenize(text, t).size() with the same errors, without making the tokens (a huge text's count is
// cheap: tfm/data/tsv.h refuses an over-long side by it).
int64_t count_tokens(const std::string& text, Tokenization t);
// Inverse for well-formed text: CHAR concatenates, SPACE joins with one space, BYTE turns each
// "<0xNN>" back into its byte (other tokens are copied as they are).
std::string detokenize(const std::vector<std::string>& tokens, Tokenization t);

// "<0xNN>" (upper-case hex), the spelling of byte b in the byte vocabulary.
std::string byte_token(uint8_t b);

// How often each token occurs in the sequences added (in byte order: Vocab::build's tie-break).
class TokenCounts {
 public:
  void add(const std::vector<std::string>& tokens) {
    for (const auto& t : tokens) ++counts_[t];
  }
  const std::map<std::string, int64_t>& counts() const { return counts_; }

 private:
  std::map<std::string, int64_t> counts_;
};

class Vocab {
 public:
  static constexpr const char* PAD = "<pad>";
  static constexpr const char* BOS = "<bos>";
  static constexpr const char* EOS = "<eos>";
  static constexpr const char* UNK = "<unk>";
  static constexpr const char* ENDOFTEXT = "<|endoftext|>";  // GPT-2's bos and eos (see above)

  Vocab() = default;
  // Specials 0..3, then every token of `sequences` by decreasing count, ties in byte order.
  static Vocab build(const std::vector<std::vector<std::string>>& sequences);
  // The same from the tokens' counts (TokenCounts::add over the sequences: a corpus need not be held to be counted).
  static Vocab build(const TokenCounts& counts);
  // Exactly these tokens in this order; specials found by spelling (any may be absent).
  static Vocab from_tokens(std::vector<std::string> tokens);
  // "*.json": a JSON array of strings; otherwise one token per line (a file whose every line ends in
  // CR LF, as an editor may rewrite it, reads as the LF file). Throws std::invalid_argument
  // naming the file and the entry (and its line) on an empty token, a duplicate or malformed JSON.
  static Vocab load(const std::string& path);
  // Atomic (temporary file + rename), in the format the name says; one token per line throws naming
  // the file when a token contains a newline (use a "*.json" name for those).
  void save(const std::string& path) const;
  // True when some token contains a newline, so only the JSON format can hold the vocabulary.
  bool needs_json() const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& token(int32_t id) const;  // throws on out-of-range ids
  // Unknown tokens map to <unk>; a vocabulary without <unk> throws naming the token.
  int32_t id(const std::string& token) const;
  bool contains(const std::string& token) const { return index_.count(token) != 0; }
  // Ids of data tokens: a token spelled like <pad>, <bos> or <eos> throws (the model would read it as the mark).
  std::vector<int32_t> encode(const std::vector<std::string>& tokens) const;
  // Stops at the first <eos>; drops <pad> and <bos>.
  std::vector<std::string> decode(const std::vector<int32_t>& ids) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  int32_t pad_id() const { return pad_; }  // -1 when absent
  int32_t bos_id() const { return bos_; }  // -1 when absent (may equal eos_id)
  int32_t eos_id() const { return eos_; }  // -1 when absent
  int32_t unk_id() const { return unk_; }  // -1 when absent

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t pad_ = -1, bos_ = -1, eos_ = -1, unk_ = -1;
};

// The fixed byte vocabulary: byte_token(0..255), then <pad>, <bos>, <eos>.
Vocab byte_vocab();
// A vocabulary for `sequences` tokenized with `t`: byte_vocab() for BYTE, else Vocab::build.
Vocab build_vocab(const std::vector<std::vector<std::string>>& sequences, Tokenization t);
Vocab build_vocab(const TokenCounts& counts, Tokenization t);

}  // namespace tfm::data

namespace tfm {
template <>
struct EnumNames<data::Tokenization> {
  static constexpr const char* noun = "tokenization";
  static constexpr std::array<std::pair<data::Tokenization, std::string_view>, 5> names{
      {{data::Tokenization::CHAR, "char"},
       {data::Tokenization::SPACE, "space"},
       {data::Tokenization::BYTE, "byte"},
       {data::Tokenization::SPM, "spm"},
       {data::Tokenization::GPT2_BPE, "gpt2-bpe"}}};
};
}  // namespace tfm
