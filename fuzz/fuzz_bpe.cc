// fuzz/fuzz_bpe.cc — libFuzzer target for GPT-2's byte-level BPE (tfm::data::ByteLevelBpe): the
// loader of a vocabulary (JSON) and merges file, and encode / decode / pretokenize.
//
// Input: the first byte picks the mode, the rest is split at NUL bytes.
//   mode even  vocabulary JSON \0 merges \0 text: the loader sees the fuzzer's vocabulary as it is
//              (its checks: JSON object, ids 0..V−1 once each, the 256 byte tokens, merges).
//   mode odd   merges \0 text: the vocabulary is built here from the merges — the 256 byte tokens,
//              then each well-formed line's two symbols and their join, in order — so nearly every
//              input loads and the merge loop and the pre-tokenizer get the mutations.
// Contract under test: loading returns or throws std::invalid_argument whose message is one line
// starting with the file's name; a loaded model encodes any bytes (valid UTF-8 or not: a byte-level
// BPE reads them all, as a generation cut inside a character leaves them) to ids in 0..V−1 that decode
// back to the text, with pieces that tile the text. Nothing may escape; ASan/UBSan stay silent.
// Seeds: fuzz/corpus/bpe/ (written by fuzz/make_seeds.py); dictionary fuzz/bpe.dict.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/data/bpe.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();  // dump throws type_error 316 on invalid UTF-8
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// Mode odd's vocabulary: the byte tokens, then every symbol and join of the merges' well-formed lines.
std::string vocab_from_merges(std::string_view merges) {
  nlohmann::json v = nlohmann::json::object();
  int64_t next = 0;
  const auto add = [&](const std::string& t) {
    if (!t.empty() && !v.contains(t)) v[t] = next++;
  };
  for (int b = 0; b < 256; ++b) add(tfm::data::ByteLevelBpe::byte_symbol(static_cast<uint8_t>(b)));
  size_t pos = 0;
  while (pos < merges.size()) {
    size_t end = merges.find('\n', pos);
    if (end == std::string_view::npos) end = merges.size();
    std::string_view line = merges.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || !valid_utf8(line)) continue;
    const std::string a(line.substr(0, sp)), b(line.substr(sp + 1));
    if (b.find(' ') != std::string::npos) continue;
    add(a), add(b), add(a + b);
  }
  add("<|endoftext|>");
  return v.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool built_vocab = (data[0] & 1) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> parts;
  size_t pos = 0;
  for (int k = 0; k < (built_vocab ? 1 : 2); ++k) {
    const size_t nul = rest.find('\0', pos);
    if (nul == std::string_view::npos) break;
    parts.push_back(rest.substr(pos, nul - pos));
    pos = nul + 1;
  }
  parts.push_back(rest.substr(std::min(pos, rest.size())));
  while (parts.size() < (built_vocab ? 2u : 3u)) parts.emplace_back();
  const std::string vocab = built_vocab ? vocab_from_merges(parts[0]) : std::string(parts[0]);
  const std::string_view merges = parts[built_vocab ? 0 : 1];
  const std::string_view text = parts[built_vocab ? 1 : 2];

  std::optional<tfm::data::ByteLevelBpe> bpe;
  try {
    bpe = tfm::data::ByteLevelBpe::from_strings(vocab, "fuzz.json", merges, "fuzz.bpe");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    check(msg.rfind("fuzz.json: ", 0) == 0 || msg.rfind("fuzz.bpe:", 0) == 0, "error does not start with the file name");
    check(msg.find('\n') == std::string::npos, "error message is not one line");
    return 0;
  }
  check(bpe->vocab_size() >= 256, "a loaded vocabulary lacks byte tokens");

  std::string joined;
  for (const std::string_view p : bpe->pretokenize(text)) {
    check(!p.empty(), "an empty piece");
    joined += p;
  }
  check(joined == text, "the pieces do not tile the text");
  const std::vector<int32_t> ids = bpe->encode(text);
  for (const int32_t id : ids) check(id >= 0 && id < bpe->vocab_size(), "id out of range");
  check(ids.size() <= text.size(), "more ids than bytes");
  check(bpe->decode(ids) == text, "decode(encode(text)) != text");
  check(bpe->encode(text) == ids, "the cached encoding differs");
  return 0;
}
