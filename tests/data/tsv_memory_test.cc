// tests/data/tsv_memory_test.cc — what a huge TSV line costs the reader (tfm/data/tsv.h): a side far
// over max_tokens is refused as over-long without making its tokens, so such a line cannot exhaust
// the memory ("a bad line never crashes the reader").
//
// Method: the heap counted (tests/data/heap_counter.h: the peak a call adds, exact on every machine).
#include <gtest/gtest.h>

#include "data/heap_counter.h"
#include "tfm/data/tsv.h"

namespace tfm::data {
namespace {

// A 4 MB side: char tokens made 4 million strings (32 bytes each and the vector's doublings,
// some 40 bytes a byte) only to count them; the reader may copy the line, not make its tokens.
TEST(TsvMemory, HugeSideIsOverLongWithoutItsTokens) {
  const size_t n = 4000000;
  for (Tokenization t : {Tokenization::CHAR, Tokenization::BYTE, Tokenization::SPACE}) {
    const std::string side = t == Tokenization::SPACE ? [&] {
      std::string s;
      s.reserve(n);
      while (s.size() + 2 <= n) s += "w ";
      return s;
    }()
                                                      : std::string(n, 'y');
    const int64_t tokens = t == Tokenization::SPACE ? static_cast<int64_t>(n / 2) : static_cast<int64_t>(n);
    const std::string text = "ab\tba\n" + side + "\tx\nx\t" + side + "\ncd\tdc\n";
    TsvOptions o;
    o.src_tokens = o.tgt_tokens = t;
    TsvData d;
    const int64_t added = testing::heap::peak_added([&] { d = parse_tsv(text, "h.tsv", o); });
    ASSERT_EQ(d.pairs.size(), 2u) << enum_name(t);
    ASSERT_EQ(d.problems.size(), 2u) << enum_name(t);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(d.problems[i].line, static_cast<int64_t>(i) + 2);
      EXPECT_EQ(d.problems[i].what, "over-long line: " + std::to_string(tokens) + " tokens, the limit is 256") << enum_name(t);
    }
    EXPECT_LT(added, static_cast<int64_t>(3 * n)) << enum_name(t) << ": " << added << " bytes at the peak";
  }
}

}  // namespace
}  // namespace tfm::data
