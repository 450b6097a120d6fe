// src/json_fields.h — one definition of a config's fields serves JSON writing and reading.
//
// A config struct lists its fields once, in a `fields(self, visit)` template that calls
// visit("key", self.member) for each (tfm/models/config.h, tfm/train/config.h). JsonWriter and
// JsonReader are such visitors: the writer puts every field in a JSON object; the reader takes the
// keys that are present (missing keys keep the struct's defaults), checks each value's JSON type
// against the field's C++ type (enums by their EnumNames; integers must fit it), and finish() rejects keys that no field
// claimed. Errors are std::invalid_argument "<what>: 'k' must be an integer, got <value>",
// "<what>: unknown key 'k'", or the enum's own "unknown <noun> 'x' (expected ...)" prefixed with
// "<what>: " (and the key, where the noun does not name it).
// Internal: the library's config files only.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "quote.h"
#include "tfm/enum_names.h"

namespace tfm {

using ordered_json = nlohmann::ordered_json;

// "'key': " when the config key does not already say the closed set's noun ("'src_tokens': unknown
// tokenization ..."), else "" ("unknown task ...").
template <typename E>
std::string enum_key_prefix(const char* key) {
  return std::string_view(key) == EnumNames<E>::noun ? std::string() : quote_name(key) + ": ";
}

class JsonWriter {
 public:
  template <typename T>
  void operator()(const char* key, const std::optional<T>& value) {
    if (value) (*this)(key, *value);
    else j[key] = nullptr;
  }
  template <typename T>
  void operator()(const char* key, const T& value) {
    if constexpr (std::is_enum_v<T>) j[key] = std::string(enum_name(value));
    else j[key] = value;
  }
  ordered_json j = ordered_json::object();
};

class JsonReader {
 public:
  // `what` prefixes every message ("model config", "train config").
  JsonReader(const ordered_json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) throw std::invalid_argument(what_ + ": expected a JSON object, got " + j_.dump());
  }

  // null or missing: unset.
  template <typename T>
  void operator()(const char* key, std::optional<T>& out) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      known_.insert(key);
      return;
    }
    T value{};
    (*this)(key, value);
    out = value;
  }
  template <typename T>
  void operator()(const char* key, T& out) {
    known_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return;  // missing: keep the default
    const ordered_json& v = *it;
    if constexpr (std::is_enum_v<T>) {
      if (!v.is_string()) wrong_type(key, v, "a string");
      try {
        out = enum_from_name<T>(v.get<std::string>());
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(what_ + ": " + enum_key_prefix<T>(key) + e.what());
      }
      return;
    } else {
      bool ok;
      const char* expected;
      if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean(), expected = "a boolean";
      else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string(), expected = "a string";
      else if constexpr (std::is_floating_point_v<T>) ok = v.is_number(), expected = "a number";
      else if constexpr (std::is_unsigned_v<T>) ok = v.is_number_unsigned(), expected = "a non-negative integer";
      else ok = v.is_number_integer(), expected = "an integer";
      if (!ok) wrong_type(key, v, expected);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {  // no silent narrowing
        constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
        bool fits;
        if (v.is_number_unsigned()) {
          fits = v.template get<uint64_t>() <= static_cast<uint64_t>(hi);
        } else {
          const int64_t x = v.template get<int64_t>();
          fits = x >= static_cast<int64_t>(lo) && (x < 0 || static_cast<uint64_t>(x) <= static_cast<uint64_t>(hi));
        }
        if (!fits)
          throw std::invalid_argument(what_ + ": " + quote_name(key) + " must be an integer in [" + std::to_string(lo) +
                                      ", " + std::to_string(hi) + "], got " + v.dump());
      }
      if constexpr (std::is_floating_point_v<T>) {  // a JSON number is finite; a float may not hold it
        const double x = v.template get<double>();
        if (!(std::abs(x) <= static_cast<double>(std::numeric_limits<T>::max())))
          throw std::invalid_argument(what_ + ": " + quote_name(key) + " must be a number of magnitude at most " +
                                      ordered_json(static_cast<double>(std::numeric_limits<T>::max())).dump() +
                                      ", got " + v.dump());
        if (x != 0 && static_cast<T>(x) == 0)  // 1e-50 would be a 0 the file does not say
          throw std::invalid_argument(what_ + ": " + quote_name(key) + " must be 0 or of magnitude at least " +
                                      ordered_json(static_cast<double>(std::numeric_limits<T>::denorm_min())).dump() +
                                      ", got " + v.dump());
      }
      out = v.get<T>();
    }
  }

  bool has(const char* key) const { return j_.contains(key); }
  void ignore(const char* key) { known_.insert(key); }

  // Every key of the object must have been claimed by a field (or ignore()d).
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!known_.count(it.key())) throw std::invalid_argument(what_ + ": unknown key " + quote_name(it.key()));
  }

 private:
  [[noreturn]] void wrong_type(const char* key, const ordered_json& v, const char* expected) const {
    throw std::invalid_argument(what_ + ": " + quote_name(key) + " must be " + expected + ", got " + v.dump());
  }
  const ordered_json& j_;
  std::string what_;
  std::set<std::string> known_;
};

// Parses text as JSON, refusing an object that names a key twice: nlohmann keeps the last of them without a
// word, so a config saying "d_model": 8, then "d_model": 16, would silently run the second. Throws nlohmann's
// parse errors, and std::invalid_argument "key 'k' appears twice in one object".
inline ordered_json parse_json_keys_once(const std::string& text) {
  std::vector<std::set<std::string>> open;  // the keys of each object being read, innermost last
  const auto each = [&](int, ordered_json::parse_event_t event, ordered_json& parsed) {
    using Event = ordered_json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      open.pop_back();
    } else if (event == Event::key && !open.back().insert(parsed.get<std::string>()).second) {
      throw std::invalid_argument("key " + quote_name(parsed.get<std::string>()) + " appears twice in one object");
    }
    return true;
  };
  return ordered_json::parse(text, each);
}

// Parses text as JSON (parse_json_keys_once), throwing "<what>: invalid JSON: ..." on a syntax error and
// "<what>: key 'k' appears twice in one object".
inline ordered_json parse_json(const std::string& text, const std::string& what) {
  try {
    return parse_json_keys_once(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(what + ": invalid JSON: " + escape_text(e.what(), kMaxMessage));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(what + ": " + e.what());
  }
}

}  // namespace tfm
