// src/quote.h — user-supplied text made safe to put in a one-line error message.
//
// Names in error messages come from files the user wrote (JSON configs, safetensors headers, TSV
// vocabularies) and may hold any byte. escape_text(s, max) copies s with control bytes (< 0x20 and
// 0x7f), Unicode's other line breaks (U+0085, U+2028, U+2029) and bytes that are not part of a valid
// UTF-8 sequence written as \xHH, so a message never spans two lines, moves the terminal's cursor, or
// holds invalid UTF-8 (Python could not decode it);
// it cuts after at most `max` bytes of s, at a character boundary, with "...". quote_name(s) is that
// in single quotes, cut at kMaxQuoted bytes; a parser's own message (nlohmann's echoes the bytes it
// read) goes through escape_text(what, kMaxMessage). number_text(x): a real number in a message.
// Internal: the library's messages only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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
    // Control bytes, bytes outside a valid sequence, and the line breaks beyond ASCII (U+0085 NEL, U+2028 LINE
    // SEPARATOR, U+2029 PARAGRAPH SEPARATOR, which Python's str.splitlines and some terminals break at).
    const bool line_break = (len == 2 && u[i] == 0xC2 && u[i + 1] == 0x85) ||
                            (len == 3 && u[i] == 0xE2 && u[i + 1] == 0x80 && (u[i + 2] == 0xA8 || u[i + 2] == 0xA9));
    if (line_break || len == 0 || u[i] < 0x20 || u[i] == 0x7f) {
      const size_t n = line_break ? len : 1;  // every byte of a line break, else the one byte
      for (size_t k = 0; k < n; ++k) {
        out += "\\x";
        out += kHex[u[i + k] >> 4];
        out += kHex[u[i + k] & 15];
      }
      i += n;
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

// A real number as a message (or a command line) writes it: %g, so 0.001, 1.5 and 1e+30 read as they were
// typed (std::to_string's %f writes 0.001000, or 31 digits for 1e30; a float's own digits add noise), and a
// NaN as nan whatever its sign bit (%g may write -nan).
inline std::string number_text(double x) {
  if (x != x) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace tfm
