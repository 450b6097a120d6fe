// tfm/message.h — a message made fit for one line of a terminal or a log.
//
// The library quotes the names it puts in its messages (escaped), but a message may still hold text from outside
// (a path with a newline, an argument with an escape sequence) when a front end adds it or passes a foreign one on.
// one_line(m) copies m with control bytes (< 0x20 and 0x7f), Unicode's other line breaks (U+0085, U+2028,
// U+2029) and bytes outside valid UTF-8 written as \xHH, the escaping of the library's quoted names, uncut.
#pragma once

#include <string>
#include <string_view>

namespace tfm {

std::string one_line(std::string_view message);

}  // namespace tfm
