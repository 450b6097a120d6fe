// src/enum_names.cc — the errors of tfm/enum_names.h, out of line so the header needs no quoting.
#include "tfm/enum_names.h"

#include <stdexcept>

#include "quote.h"

namespace tfm::detail {

void throw_bad_enum_name(const char* key, const char* noun, std::string_view got, const std::string& choices) {
  throw std::invalid_argument(std::string(key) + " " + quote_name(std::string(got)) + " is not " + noun + " (" +
                              choices + ")");
}

void throw_bad_enum_value(const char* key, int value) {
  throw std::logic_error(std::string(key) + ": enumerator " + std::to_string(value) + " has no name");
}

}  // namespace tfm::detail
