// src/message.cc — one_line (tfm/message.h): escape_text without a length limit.
#include "tfm/message.h"

#include <limits>

#include "quote.h"

namespace tfm {

std::string one_line(std::string_view message) { return escape_text(message, std::numeric_limits<size_t>::max()); }

}  // namespace tfm
