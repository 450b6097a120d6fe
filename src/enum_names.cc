// src/enum_names.cc — the errors of tfm/enum_names.h, out of line so the header needs no quoting.
#include "tfm/enum_names.h"

#include <stdexcept>

#include "quote.h"

namespace tfm::detail {

void throw_bad_enum_name(const char* noun, std::string_view got, const std::string& expected) {
  throw std::invalid_argument(std::string("unknown ") + noun + " " + quote_name(got) + " (expected " + expected + ")");
}

void throw_bad_enum_value(const char* noun, int value) {
  throw std::logic_error(std::string(noun) + ": enumerator " + std::to_string(value) + " has no name");
}

}  // namespace tfm::detail
