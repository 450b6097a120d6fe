// src/data/vocab.cc — tokenization and Vocab (see tfm/data/vocab.h).
#include "tfm/data/vocab.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "quote.h"
#include "utf8.h"

namespace tfm::data {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

size_t utf8_length(const std::string& s, size_t i) {
  return tfm::utf8_length(reinterpret_cast<const uint8_t*>(s.data()), s.size(), i);
}

bool valid_utf8(const std::string& s) { return first_invalid_utf8(s) == s.size(); }

bool is_json_path(const std::string& path) { return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0; }

// The byte of a "<0xNN>" token, or -1 for any other token.
int byte_of(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

namespace {
// spm and gpt2-bpe need their files: they go through data::Tokenizer.
void needs_files(Tokenization t) {
  if (t == Tokenization::SPM)
    throw std::invalid_argument("spm tokenization needs its SentencePiece model (data::Tokenizer)");
  if (t == Tokenization::GPT2_BPE)
    throw std::invalid_argument("gpt2-bpe tokenization needs its vocabulary and merges files (data::Tokenizer)");
}
}  // namespace

namespace {
// Calls token(start, length) for each token of `text` (char / space / byte) in order: what tokenize
// makes and count_tokens counts. CHAR and SPACE throw std::invalid_argument at invalid UTF-8.
template <class F>
void for_each_token(const std::string& text, Tokenization t, F&& token) {
  needs_files(t);
  if (t == Tokenization::BYTE) {
    for (size_t i = 0; i < text.size(); ++i) token(i, size_t{1});
  } else if (t == Tokenization::CHAR) {
    for (size_t i = 0; i < text.size();) {
      const size_t n = utf8_length(text, i);
      if (n == 0) throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(i));
      token(i, n);
      i += n;
    }
  } else {  // SPACE: UTF-8 words, as CHAR reads UTF-8 (a vocabulary of the words stays text)
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_space(text[i])) ++i;
      const size_t start = i;
      while (i < text.size() && !is_space(text[i])) ++i;
      if (i == start) continue;
      const std::string_view word(text.data() + start, i - start);
      if (const size_t bad = first_invalid_utf8(word); bad < word.size())
        throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(start + bad));
      token(start, i - start);
    }
  }
}
}  // namespace

std::vector<std::string> tokenize(const std::string& text, Tokenization t) {
  std::vector<std::string> out;
  if (t == Tokenization::BYTE) out.reserve(text.size());
  for_each_token(text, t, [&](size_t start, size_t n) {
    if (t == Tokenization::BYTE) out.push_back(byte_token(static_cast<uint8_t>(text[start])));
    else out.emplace_back(text, start, n);
  });
  return out;
}

int64_t count_tokens(const std::string& text, Tokenization t) {
  int64_t n = 0;
  for_each_token(text, t, [&](size_t, size_t) { ++n; });
  return n;
}

std::string detokenize(const std::vector<std::string>& tokens, Tokenization t) {
  needs_files(t);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (t == Tokenization::SPACE && i > 0) out += ' ';
    const int b = t == Tokenization::BYTE ? byte_of(tokens[i]) : -1;
    if (b >= 0) out += static_cast<char>(b);
    else out += tokens[i];
  }
  return out;
}

std::string byte_token(uint8_t b) {
  static constexpr char hex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

Vocab byte_vocab() {
  std::vector<std::string> tokens;
  tokens.reserve(259);
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_token(static_cast<uint8_t>(b)));
  for (const char* special : {Vocab::PAD, Vocab::BOS, Vocab::EOS}) tokens.push_back(special);
  return Vocab::from_tokens(std::move(tokens));
}

Vocab build_vocab(const std::vector<std::vector<std::string>>& sequences, Tokenization t) {
  return t == Tokenization::BYTE ? byte_vocab() : Vocab::build(sequences);
}

Vocab build_vocab(const TokenCounts& counts, Tokenization t) {
  return t == Tokenization::BYTE ? byte_vocab() : Vocab::build(counts);
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sequences) {
  TokenCounts c;
  for (const auto& seq : sequences) c.add(seq);
  return build(c);
}

Vocab Vocab::build(const TokenCounts& counts) {
  std::vector<std::pair<std::string, int64_t>> order;
  for (const auto& [tok, n] : counts.counts())
    if (tok != PAD && tok != BOS && tok != EOS && tok != UNK) order.emplace_back(tok, n);  // never twice
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> tokens = {PAD, BOS, EOS, UNK};
  for (auto& [tok, n] : order) tokens.push_back(tok);
  return from_tokens(std::move(tokens));
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const std::string& t = v.tokens_[i];
    if (t.empty()) throw std::invalid_argument("vocabulary entry " + std::to_string(i) + " is empty");
    if (!v.index_.emplace(t, static_cast<int32_t>(i)).second)
      throw std::invalid_argument("vocabulary entry " + std::to_string(i) + " " + quote_name(t) + " appears twice");
  }
  const auto find = [&](const char* s) { auto it = v.index_.find(s); return it == v.index_.end() ? -1 : it->second; };
  v.pad_ = find(PAD);
  v.bos_ = find(BOS);
  v.eos_ = find(EOS);
  v.unk_ = find(UNK);
  // GPT-2's one special: both ends of a document.
  const int32_t endoftext = find(ENDOFTEXT);
  if (v.bos_ < 0) v.bos_ = endoftext;
  if (v.eos_ < 0) v.eos_ = endoftext;
  return v;
}

Vocab Vocab::load(const std::string& path) {
  const std::string text = io::read_file(path);
  std::vector<std::string> tokens;
  if (is_json_path(path)) {
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      if (!j.is_array()) throw std::invalid_argument("expected a JSON array of token strings, got a " + std::string(j.type_name()));
      for (size_t i = 0; i < j.size(); ++i) {
        if (!j[i].is_string())
          throw std::invalid_argument("vocabulary entry " + std::to_string(i) + " is a " + j[i].type_name() + ", not a string");
        tokens.push_back(j[i].get<std::string>());
      }
      return from_tokens(std::move(tokens));
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(path + ": not valid JSON: " + escape_text(e.what(), kMaxMessage));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": " + e.what());
    }
  }
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    tokens.emplace_back(text, start, end - start);
    start = end + 1;
  }
  // A file whose every line break is CR LF went through an editor or a transfer that rewrote tfm's LF endings
  // (the last line may have lost its break): drop the CR of each. tfm writes LF only, and a token "\r" of its
  // own is a line "\r" — which such a rewrite never leaves, since tokens are not empty — so a file with one is
  // read as it is.
  size_t breaks = 0, crlf = 0;
  for (size_t i = text.find('\n'); i != std::string::npos; i = text.find('\n', i + 1)) {
    ++breaks;
    if (i > 0 && text[i - 1] == '\r') ++crlf;
  }
  const bool lone_cr_token = std::find(tokens.begin(), tokens.end(), "\r") != tokens.end();
  if (breaks > 0 && crlf == breaks && !lone_cr_token) {
    const size_t terminated = text.back() == '\n' ? tokens.size() : tokens.size() - 1;
    for (size_t i = 0; i < terminated; ++i) tokens[i].pop_back();
  }
  try {
    return from_tokens(std::move(tokens));
  } catch (const std::invalid_argument& e) {
    // Entry i is on line i + 1.
    throw std::invalid_argument(path + ": " + e.what() + " (entry i is on line i+1)");
  }
}

bool Vocab::needs_json() const {
  return std::any_of(tokens_.begin(), tokens_.end(), [](const std::string& t) { return t.find('\n') != std::string::npos; });
}

void Vocab::save(const std::string& path) const {
  if (is_json_path(path)) {
    std::string text;
    try {
      text = nlohmann::json(tokens_).dump(0) + "\n";  // one entry a line: readable and diffable
    } catch (const nlohmann::json::exception&) {
      for (size_t i = 0; i < tokens_.size(); ++i)
        if (!valid_utf8(tokens_[i]))
          throw std::invalid_argument(path + ": vocabulary entry " + std::to_string(i) + " is not valid UTF-8, which JSON cannot hold");
      throw;
    }
    io::write_file_atomic(path, text);
    return;
  }
  std::string text;
  for (const auto& t : tokens_) {
    if (t.find('\n') != std::string::npos) throw std::invalid_argument(path + ": token contains a newline (a *.json vocabulary file holds any token)");
    text += t;
    text += '\n';
  }
  io::write_file_atomic(path, text);
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size())
    throw std::invalid_argument("token id " + std::to_string(id) + " outside the vocabulary of " +
                                std::to_string(size()));
  return tokens_[static_cast<size_t>(id)];
}

int32_t Vocab::id(const std::string& token) const {
  auto it = index_.find(token);
  if (it != index_.end()) return it->second;
  if (unk_ < 0) throw std::invalid_argument("token " + quote_name(token) + " is not in the vocabulary (which has no <unk>)");
  return unk_;
}

std::vector<int32_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) {
    const int32_t i = id(t);
    // A data word spelled like the padding or sequence marks would be read as one: masked out of attention
    // and loss (<pad>), or a sequence ending mid-target (<eos>). <unk> is the unknown token either way.
    if (i == pad_ || i == bos_ || i == eos_)
      throw std::invalid_argument("token " + quote_name(t) + " is the name of a special token (" +
                                  (i == pad_ ? "padding" : i == bos_ ? "sequence start" : "sequence end") +
                                  "), which the model would read as that, not as a word of the text");
    ids.push_back(i);
  }
  return ids;
}

std::vector<std::string> Vocab::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> out;
  for (int32_t id : ids) {
    if (id == eos_) break;
    if (id == pad_ || id == bos_) continue;
    out.push_back(token(id));
  }
  return out;
}

}  // namespace tfm::data
