// src/utf8.h — UTF-8 sequence checking shared by the tokenizers (data/vocab.cc, data/bpe.cc,
// data/tokenizer.cc), the text corpus (data/text.cc) and the error messages (quote.h). Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tfm {

// Length of the UTF-8 sequence starting at s[i] (i < n), or 0 if it is not a valid one (overlong
// forms, surrogates and values above U+10FFFF are rejected, as RFC 3629 requires).
inline size_t utf8_length(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c = s[i];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
  else return 0;
  if (i + len > n) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  static constexpr uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// The offset of the first byte of s[0, n) that does not start a valid UTF-8 sequence, or n when the
// whole text is valid.
inline size_t first_invalid_utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    const size_t len = utf8_length(s, n, i);
    if (len == 0) return i;
    i += len;
  }
  return n;
}
inline size_t first_invalid_utf8(std::string_view s) {
  return first_invalid_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace tfm
