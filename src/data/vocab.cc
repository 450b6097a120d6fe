// src/data/vocab.cc — tokenization and Vocab (see tfm/data/vocab.h).
#include "tfm/data/vocab.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "io/file_util.h"

namespace tfm::data {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

// Length of the UTF-8 sequence starting at s[i], or 0 if it is not a valid one (overlong forms,
// surrogates and values above U+10FFFF are rejected, as RFC 3629 requires).
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::vector<std::string> tokenize(const std::string& text, Tokenization t) {
  std::vector<std::string> out;
  if (t == Tokenization::CHAR) {
    for (size_t i = 0; i < text.size();) {
      const size_t n = utf8_length(text, i);
      if (n == 0) throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(i));
      out.emplace_back(text, i, n);
      i += n;
    }
  } else {
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_space(text[i])) ++i;
      const size_t start = i;
      while (i < text.size() && !is_space(text[i])) ++i;
      if (i > start) out.emplace_back(text, start, i - start);
    }
  }
  return out;
}

std::string detokenize(const std::vector<std::string>& tokens, Tokenization t) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (t == Tokenization::SPACE && i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sequences) {
  std::map<std::string, int64_t> counts;  // byte order: the tie-break
  for (const auto& seq : sequences)
    for (const auto& tok : seq) ++counts[tok];
  for (const char* special : {PAD, BOS, EOS, UNK}) counts.erase(special);  // never twice
  std::vector<std::pair<std::string, int64_t>> order(counts.begin(), counts.end());
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
      throw std::invalid_argument("vocabulary entry " + std::to_string(i) + " '" + t + "' appears twice");
  }
  const auto find = [&](const char* s) { auto it = v.index_.find(s); return it == v.index_.end() ? -1 : it->second; };
  v.pad_ = find(PAD);
  v.bos_ = find(BOS);
  v.eos_ = find(EOS);
  v.unk_ = find(UNK);
  if (v.pad_ < 0) throw std::invalid_argument("vocabulary has no <pad> entry");
  return v;
}

Vocab Vocab::load(const std::string& path) {
  const std::string text = io::read_file(path);
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    tokens.emplace_back(text, start, end - start);
    start = end + 1;
  }
  try {
    return from_tokens(std::move(tokens));
  } catch (const std::invalid_argument& e) {
    // Entry i is on line i + 1.
    throw std::invalid_argument(path + ": " + e.what() + " (entry i is on line i+1)");
  }
}

void Vocab::save(const std::string& path) const {
  std::string text;
  for (const auto& t : tokens_) {
    if (t.find('\n') != std::string::npos) throw std::invalid_argument(path + ": token contains a newline");
    text += t;
    text += '\n';
  }
  io::write_file_atomic(path, text);
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(size()));
  return tokens_[static_cast<size_t>(id)];
}

int32_t Vocab::id(const std::string& token) const {
  auto it = index_.find(token);
  if (it != index_.end()) return it->second;
  if (unk_ < 0) throw std::invalid_argument("token '" + token + "' is not in the vocabulary (which has no <unk>)");
  return unk_;
}

std::vector<int32_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
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
