// tests/message_test.cc — src/message.cc: one_line, what the CLI and the Python package put on a terminal line.
//
// Method: messages whose escaped forms are worked out by hand; each is checked exactly.
#include "tfm/message.h"

#include <gtest/gtest.h>

#include <string>

namespace tfm {
namespace {

TEST(OneLine, PrintableUtf8PassesUnchanged) {
  EXPECT_EQ(one_line("train.tsv:3: source 'é→x' is not in the vocabulary"),
            "train.tsv:3: source 'é→x' is not in the vocabulary");
}

TEST(OneLine, LineBreaksControlBytesAndInvalidUtf8AreWrittenAsHex) {
  EXPECT_EQ(one_line("a\nb\r\tc\x1b[2Jd\x7f"), "a\\x0ab\\x0d\\x09c\\x1b[2Jd\\x7f");
  // U+0085, U+2028 and U+2029 break lines too (Python's splitlines): every byte of each is written.
  EXPECT_EQ(one_line("x\xC2\x85y\xE2\x80\xA8z\xE2\x80\xA9"), "x\\xc2\\x85y\\xe2\\x80\\xa8z\\xe2\\x80\\xa9");
  // A byte outside a valid sequence (a lone continuation, a truncated lead) is one \xHH; what follows is kept.
  EXPECT_EQ(one_line("p\x80q\xE2\x82"), "p\\x80q\\xe2\\x82");
}

TEST(OneLine, NeverCutsALongMessage) {
  const std::string long_path(5000, 'p');  // past escape_text's kMaxMessage, which cuts a foreign parser's text
  const std::string m = one_line(long_path + ": file is empty");
  EXPECT_EQ(m, long_path + ": file is empty");
}

}  // namespace
}  // namespace tfm
