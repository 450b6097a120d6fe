// src/train/text_words.h — a text's code points, whitespace and words as Python reads them (str.isspace,
// str.split), the way BLEU and chrF see text (text_metrics.cc, tfm/train/text_metrics.h) and eval's notes compare
// targets (evaluate.cc: two texts with the same words differ in what neither metric sees). Internal; defined in
// text_metrics.cc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tfm::train {

// The code point starting at s[i] (i < s.size()), advancing i past it. A byte that does not start a valid UTF-8
// sequence (utf8_length, src/utf8.h: a bad lead, a missing continuation, an overlong form, a surrogate,
// > U+10FFFF) is one code point of its own, 0xDC00 + byte (Python's surrogateescape), so it is never whitespace
// and never equals a real character.
char32_t next_code_point(std::string_view s, size_t& i);

// Python's str.isspace() (the set str.split() and str.rstrip() use).
bool is_python_space(char32_t c);

// The words of s (Python's s.split()), as views into s.
std::vector<std::string_view> split_words(std::string_view s);

// The words joined by single spaces: join_words(split_words(s)) is s with every run of whitespace one space and
// none at either end.
std::string join_words(const std::vector<std::string_view>& words);

}  // namespace tfm::train
