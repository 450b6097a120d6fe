// tfm/enum_names.h — closed sets (architecture, activation, schedule, optimizer, tokenization, ...)
// are enums in the code and lower-case names in configs and on the command line. Each enum states
// its names once, in a specialisation of EnumNames beside its declaration:
//
//   template <> struct EnumNames<Arch> {
//     static constexpr const char* key = "arch";             // the config key, for messages
//     static constexpr const char* noun = "an architecture";  // "'x' is not <noun>"
//     static constexpr std::array<std::pair<Arch, std::string_view>, 2> names{{
//         {Arch::ENCODER, "encoder"}, {Arch::SEQ2SEQ, "seq2seq"}}};
//   };
//
// and enum_name / enum_from_name / enum_choices then work for it, as do the JSON config readers
// and the CLI's option parsing. Adding a value to a closed set is one enumerator and one name.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

namespace tfm {

template <typename E>
struct EnumNames;  // specialised per enum, as above

namespace detail {
[[noreturn]] void throw_bad_enum_name(const char* key, const char* noun, std::string_view got,
                                      const std::string& choices);
[[noreturn]] void throw_bad_enum_value(const char* key, int value);
}  // namespace detail

// "a, b, c" (or with another separator).
template <typename E>
std::string enum_choices(std::string_view sep = ", ") {
  std::string s;
  for (const auto& [value, name] : EnumNames<E>::names) {
    if (!s.empty()) s += sep;
    s += name;
  }
  return s;
}

template <typename E>
std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (v == value) return name;
  detail::throw_bad_enum_value(EnumNames<E>::key, static_cast<int>(value));
}

// Throws std::invalid_argument "<key> 'x' is not <noun> (a, b, c)"; `key` names the config field
// or option (default: the enum's own key).
template <typename E>
E enum_from_name(std::string_view name, const char* key = EnumNames<E>::key) {
  for (const auto& [v, n] : EnumNames<E>::names)
    if (n == name) return v;
  detail::throw_bad_enum_name(key, EnumNames<E>::noun, name, enum_choices<E>());
}

}  // namespace tfm
