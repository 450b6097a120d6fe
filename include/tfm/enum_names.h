// tfm/enum_names.h — closed sets (architecture, activation, schedule, optimizer, tokenization, ...)
// are enums in the code and lower-case names in configs and on the command line. Each enum states
// its names once, in a specialisation of EnumNames beside its declaration:
//
//   template <> struct EnumNames<Arch> {
//     static constexpr const char* noun = "architecture";  // "unknown <noun> 'x' (expected ...)"
//     static constexpr std::array<std::pair<Arch, std::string_view>, 2> names{{
//         {Arch::ENCODER, "encoder"}, {Arch::SEQ2SEQ, "seq2seq"}}};
//   };
//
// and enum_name / enum_from_name / enum_choices then work for it, as do the JSON config readers
// and the CLI's option parsing. Adding a value to a closed set is one enumerator and one name. A
// value may have further spellings (aliases) after its first, which is the one written.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

namespace tfm {

template <typename E>
struct EnumNames;  // specialised per enum, as above

namespace detail {
[[noreturn]] void throw_bad_enum_name(const char* noun, std::string_view got, const std::string& expected);
[[noreturn]] void throw_bad_enum_value(const char* noun, int value);
}  // namespace detail

// The first name of each value joined by `sep`, the last by `last_sep`: "a | b | c", "a, b or c".
template <typename E>
std::string enum_choices(std::string_view sep = " | ", std::string_view last_sep = " | ") {
  const auto& names = EnumNames<E>::names;
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    bool alias = false;
    for (size_t k = 0; k < i; ++k) alias = alias || names[k].first == names[i].first;
    if (alias) continue;
    bool more = false;  // another value follows
    for (size_t k = i + 1; k < names.size(); ++k) {
      bool seen = false;
      for (size_t m = 0; m < k; ++m) seen = seen || names[m].first == names[k].first;
      more = more || !seen;
    }
    if (!s.empty()) s += more ? sep : last_sep;
    s += names[i].second;
  }
  return s;
}

template <typename E>
std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (v == value) return name;
  detail::throw_bad_enum_value(EnumNames<E>::noun, static_cast<int>(value));
}

// Throws std::invalid_argument "unknown <noun> 'x' (expected a, b or c)".
template <typename E>
E enum_from_name(std::string_view name) {
  for (const auto& [v, n] : EnumNames<E>::names)
    if (n == name) return v;
  detail::throw_bad_enum_name(EnumNames<E>::noun, name, enum_choices<E>(", ", " or "));
}

}  // namespace tfm
