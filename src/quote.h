// src/quote.h — user-supplied text made safe to put in a one-line error message.
//
// Names in error messages come from files the user wrote (JSON configs, safetensors headers, TSV
// vocabularies) and may hold any byte. escape_text(s, max) copies s with control bytes (< 0x20 and
// 0x7f) and bytes that are not part of a valid UTF-8 sequence written as \xHH, so a message never
// spans two lines, moves the terminal's cursor, or holds invalid UTF-8 (Python could not decode it);
// it cuts after at most `max` bytes of s, at a character boundary, with "...". quote_name(s) is that
// in single quotes, cut at kMaxQuoted bytes; a parser's own message (nlohmann's echoes the bytes it
// read) goes through escape_text(what, kMaxMessage). Internal: the library's messages only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "utf8.h"

namespace tfm {

inline constexpr size_t kMaxQuoted = 200;    // longest name copied into a message
inline constexpr size_t kMaxMessage = 1000;  // longest foreign message (a JSON parser's) copied into one

inline std::string escape_text(std::string_view s, size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* u = reinterpret_cast<const uint8_t*>(s.data());
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = utf8_length(u, s.size(), i);
    if (i + std::max<size_t>(len, 1) > max) break;
    if (len == 0 || u[i] < 0x20 || u[i] == 0x7f) {
      out += "\\x";
      out += kHex[u[i] >> 4];
      out += kHex[u[i] & 15];
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

inline std::string quote_name(std::string_view s) {
  std::string out(1, '\'');
  out += escape_text(s, kMaxQuoted);
  out += '\'';
  return out;
}

}  // namespace tfm
