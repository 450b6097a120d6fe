// src/quote.h — a user-supplied name or value, made safe to put in a one-line error message.
//
// Names in error messages come from files the user wrote (JSON configs, safetensors headers, TSV
// vocabularies) and may hold any byte. quote_name(s) wraps s in single quotes, escapes control bytes
// (< 0x20 and 0x7f) as \xHH so a message never spans two lines or moves the terminal's cursor,
// and cuts names longer than kMaxQuoted bytes with "...". Internal: the library's messages only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tfm {

inline constexpr size_t kMaxQuoted = 200;  // longest name copied into a message

inline std::string quote_name(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxQuoted) out += "...";
  return out + "'";
}

}  // namespace tfm
