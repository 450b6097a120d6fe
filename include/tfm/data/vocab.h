// tfm/data/vocab.h — tokenization (char / space) and vocabularies.
//
// A Vocab maps token strings to ids. Vocabularies built from a training file start with the four
// specials <pad>=0, <bos>=1, <eos>=2, <unk>=3, then the file's tokens by decreasing frequency (ties:
// byte order), so the same file always gives the same ids. The built-in tasks use their own
// layout (tfm/data/tasks.h) where the special ids differ; a Vocab therefore stores where its
// specials are instead of assuming 0..3. Saved as one token per line (line i = id i); on load the
// specials are found by their spelling.
//
// To add a tokenization: a Tokenization enumerator and its name, a case in tokenize/detokenize, and a
// case in tests/data/vocab_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tfm/enum_names.h"

namespace tfm::data {

// A sequence of tokens (strings), as read from text or decoded.
using Tokens = std::vector<std::string>;

enum class Tokenization { CHAR, SPACE };

// CHAR: every UTF-8 code point is a token (throws std::invalid_argument on invalid UTF-8).
// SPACE: maximal runs of non-whitespace (space, tab, \r, \n, \v, \f separate).
std::vector<std::string> tokenize(const std::string& text, Tokenization t);
// Inverse for well-formed text: CHAR concatenates, SPACE joins with one space.
std::string detokenize(const std::vector<std::string>& tokens, Tokenization t);

class Vocab {
 public:
  static constexpr const char* PAD = "<pad>";
  static constexpr const char* BOS = "<bos>";
  static constexpr const char* EOS = "<eos>";
  static constexpr const char* UNK = "<unk>";

  Vocab() = default;
  // Specials 0..3, then every token of `sequences` by decreasing count, ties in byte order.
  static Vocab build(const std::vector<std::vector<std::string>>& sequences);
  // Exactly these tokens in this order; specials found by spelling (<pad> is required).
  static Vocab from_tokens(std::vector<std::string> tokens);
  // One token per line. Throws naming the file and line on an empty token or a duplicate.
  static Vocab load(const std::string& path);
  void save(const std::string& path) const;  // atomic (temporary file + rename)

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& token(int32_t id) const;  // throws on out-of-range ids
  // Unknown tokens map to <unk>; a vocabulary without <unk> throws naming the token.
  int32_t id(const std::string& token) const;
  bool contains(const std::string& token) const { return index_.count(token) != 0; }
  std::vector<int32_t> encode(const std::vector<std::string>& tokens) const;
  // Stops at the first <eos>; drops <pad> and <bos>.
  std::vector<std::string> decode(const std::vector<int32_t>& ids) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  int32_t pad_id() const { return pad_; }
  int32_t bos_id() const { return bos_; }  // -1 when absent
  int32_t eos_id() const { return eos_; }  // -1 when absent
  int32_t unk_id() const { return unk_; }  // -1 when absent

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t pad_ = -1, bos_ = -1, eos_ = -1, unk_ = -1;
};

}  // namespace tfm::data

namespace tfm {
template <>
struct EnumNames<data::Tokenization> {
  static constexpr const char* noun = "tokenization";
  static constexpr std::array<std::pair<data::Tokenization, std::string_view>, 2> names{
      {{data::Tokenization::CHAR, "char"}, {data::Tokenization::SPACE, "space"}}};
};
}  // namespace tfm
