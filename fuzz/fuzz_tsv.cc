// fuzz/fuzz_tsv.cc — libFuzzer target for the `source<TAB>target` reader (tfm::data::parse_tsv),
// which reads every training, validation and test file.
//
// The first input byte picks the options (tokenization per side, strict, equal_lengths, a small
// max_tokens), the rest is the file text. Contract under test: the reader either returns pairs
// or throws DataError whose message is one line starting with the name; every returned pair obeys
// the options (non-empty sides, at most max_tokens tokens, equal lengths when asked) and every
// problem has a line number within the file. Nothing else may escape; ASan/UBSan stay silent.
// Seeds: fuzz/corpus/tsv/ (written by fuzz/make_seeds.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tfm/data/tsv.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using tfm::data::Tokenization;
  const uint8_t opt = data[0];
  tfm::data::TsvOptions o;
  o.src_tokens = (opt & 1) ? Tokenization::SPACE : Tokenization::CHAR;
  o.tgt_tokens = (opt & 2) ? Tokenization::SPACE : Tokenization::CHAR;
  o.strict = (opt & 4) != 0;
  o.equal_lengths = (opt & 8) != 0;
  o.max_tokens = 1 + (opt >> 4);  // 1..16, so the over-long check is reached
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string name = "fuzz.tsv";
  try {
    const tfm::data::TsvData d = tfm::data::parse_tsv(text, name, o);
    check(!d.pairs.empty(), "returned without a usable pair");
    for (const auto& p : d.pairs) {
      check(!p.src.empty() && !p.tgt.empty(), "a pair has an empty side");
      check(static_cast<int64_t>(p.src.size()) <= o.max_tokens, "source longer than max_tokens");
      check(static_cast<int64_t>(p.tgt.size()) <= o.max_tokens, "target longer than max_tokens");
      check(!o.equal_lengths || p.src.size() == p.tgt.size(), "lengths differ under equal_lengths");
      check(p.line >= 1 && p.line <= d.lines, "pair line number out of range");
    }
    for (const auto& pr : d.problems) check(pr.line >= 1 && pr.line <= d.lines, "problem line out of range");
    check(!o.strict || d.problems.empty(), "strict mode returned problems instead of throwing");
    const std::string s = d.summary();
    check(s.find('\n') == std::string::npos, "summary is not one line");
  } catch (const tfm::data::DataError& e) {
    const std::string msg = e.what();
    check(msg.rfind(name, 0) == 0, "error message does not start with the name");
    check(msg.find('\n') == std::string::npos, "error message is not one line");
  }
  return 0;
}
