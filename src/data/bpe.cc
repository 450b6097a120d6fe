// src/data/bpe.cc — GPT-2's byte-level BPE (see tfm/data/bpe.h): loading and checking the two files,
// the pre-tokenizer (PCRE2), ranked merges over token ids, the word cache, decoding.
#include "tfm/data/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "io/file_util.h"
#include "quote.h"
#include "tfm/data/vocab.h"
#include "utf8.h"

namespace tfm::data {
namespace {

// GPT-2's pattern with \s spelled out as Unicode's White_Space property (25 code points): PCRE2's
// own \s under UCP also matches U+180E, which Python's `regex` and Rust's `regex` do not.
#define TFM_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TFM_WS "\\p{L}\\p{N}]+|[" TFM_WS "]+(?![^" TFM_WS "])|[" TFM_WS "]+";
#undef TFM_WS

// bytes_to_unicode as code points: table[b] for byte b (GPT-2's encoder.py).
std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : 256 + n++;
  }
  return cp;
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A token or line quoted for a one-line message: in double quotes (a quote or backslash of the text
// after a backslash), each character as escape_text writes it (src/quote.h: control bytes, Unicode's
// line breaks and bytes that are not valid UTF-8 as \xhh), at most 60 bytes of the text (cut at a
// character boundary) then "...".
std::string quote(std::string_view s) {
  std::string out = "\"";
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (i >= 60) {
      out += "...";
      break;
    }
    const size_t len = std::max<size_t>(utf8_length(p, s.size(), i), 1);
    if (s[i] == '"' || s[i] == '\\') out += '\\';
    out += escape_text(s.substr(i, len), len);
    i += len;
  }
  return out + "\"";
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

struct Merge {
  int32_t rank;    // line order among the merges: lower merges first
  int32_t result;  // the merged symbol's id
};

// Deletes PCRE2's objects.
struct CodeFree {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// The pre-tokenizer, compiled (and JIT-compiled) once per process and shared by every model and
// thread: a compiled pattern is read-only while matching. Anchored, so each match starts where the
// last one ended.
const pcre2_code* gpt2_pattern() {
  static const std::unique_ptr<pcre2_code, CodeFree> code = [] {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    std::unique_ptr<pcre2_code, CodeFree> c(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &err_offset, nullptr));
    if (!c)
      throw std::logic_error("GPT-2's pre-tokenizer pattern does not compile at offset " + std::to_string(err_offset) +
                             ": " + pcre2_message(err));
    pcre2_jit_compile(c.get(), PCRE2_JIT_COMPLETE);  // when it fails the interpreter runs
    return c;
  }();
  return code.get();
}

}  // namespace

struct ByteLevelBpe::Impl {
  std::vector<std::string> tokens;            // (V) the vocabulary's spellings, by id
  std::vector<std::string> token_bytes;       // (V) the bytes each token stands for
  std::unordered_map<std::string, int32_t> ids;
  std::array<int32_t, 256> byte_ids{};        // the id of each byte's one-character token
  std::unordered_map<uint64_t, Merge> merges;  // (a, b) → rank, result
  int64_t num_merges = 0;
  const pcre2_code* pattern = nullptr;  // gpt2_pattern()

  std::mutex cache_mutex;
  std::unordered_map<std::string, std::vector<int32_t>> cache;  // piece bytes → ids

  std::vector<int32_t> bpe(std::string_view piece) const;
};

// Step 3 of tfm/data/bpe.h on one piece, in O(n log n) for a piece of n bytes. The symbols form a
// linked list over the piece's byte positions (a merged symbol keeps its left position); every
// adjacent pair that has a merge sits in a min-heap keyed by (rank, position), pushed when the pair
// forms. A round takes every heap entry of the lowest rank r and, in position order, merges each
// entry whose pair is still (a, b) — the left-to-right, no-overlap pass of GPT-2's encoder.py: an
// entry whose left symbol the previous merge of the round consumed (the middle of "a a a") or whose
// symbols changed is stale and dropped. No merge of a round forms another pair of rank r (the merged
// symbol is longer than a and than b, so it is neither), so the round finds every occurrence at its
// start; the pairs it forms wait for later rounds, which take the lowest rank left, as encoder.py's
// next scan would. So the result is encoder.py's for any merges file, not only for ranks that grow
// with the merged symbols. (Rescanning every pair per merge, as encoder.py does, is O(n²): a long run
// of letters without spaces is one piece.)
std::vector<int32_t> ByteLevelBpe::Impl::bpe(std::string_view piece) const {
  if (piece.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument(
        "BPE: a piece of " + std::to_string(piece.size()) +
        " bytes (one run of letters, digits, symbols or bytes that are not UTF-8) is longer than 2^31 - 1 bytes");
  const auto n = static_cast<int32_t>(piece.size());
  // Scratch reused by the thread's later pieces: most pieces are a few bytes, and allocating these
  // for each would cost more than merging them.
  struct Symbol {
    int32_t id, prev, next;  // its token (-1 once merged into its left neighbour), the list's links
  };
  struct Entry {
    int32_t rank, pos, a, b;  // the pair (a, b) at symbol pos, whose merge has this rank
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  constexpr size_t kKeptScratch = size_t{1} << 14;  // entries of each buffer kept between pieces
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Entry> heap, round;  // heap: a min-heap under std::greater
  sym.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    sym[i] = {byte_ids[static_cast<uint8_t>(piece[static_cast<size_t>(i)])], i - 1, i + 1 < n ? i + 1 : -1};
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const int32_t a = sym[pos].id, b = sym[sym[pos].next].id;
    const auto it = merges.find(pair_key(a, b));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, pos, a, b});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const int32_t rank = heap.front().rank;
    round.clear();
    while (!heap.empty() && heap.front().rank == rank) {  // popped in position order
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      round.push_back(heap.back());
      heap.pop_back();
    }
    const int32_t result = merges.find(pair_key(round.front().a, round.front().b))->second.result;
    for (const Entry& e : round) {
      Symbol& left = sym[e.pos];
      if (left.id != e.a || left.next < 0 || sym[left.next].id != e.b) continue;  // stale: consumed or changed
      Symbol& right = sym[left.next];
      left.id = result;
      right.id = -1;  // no live symbol has id -1, so entries at it are stale
      left.next = right.next;
      if (right.next >= 0) sym[right.next].prev = e.pos;
      push_pair(left.prev);
      push_pair(e.pos);
    }
  }
  std::vector<int32_t> word;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) word.push_back(sym[i].id);
  if (sym.capacity() > kKeptScratch || heap.capacity() > kKeptScratch || round.capacity() > kKeptScratch) {
    // a long piece's scratch (tens of bytes a byte of the piece) is not kept for the short pieces after it
    sym = {};
    heap = {};
    round = {};
  }
  return word;
}

ByteLevelBpe::Files ByteLevelBpe::read_files(const std::string& vocab_path, const std::string& merges_path) {
  Files f;
  try {
    f.vocab_json = io::read_file(vocab_path);
  } catch (const std::exception& e) {
    throw std::runtime_error(vocab_path + ": cannot read the BPE vocabulary: " + e.what());
  }
  try {
    f.merges = io::read_file(merges_path);
  } catch (const std::exception& e) {
    throw std::runtime_error(merges_path + ": cannot read the BPE merges: " + e.what());
  }
  return f;
}

ByteLevelBpe ByteLevelBpe::load(const std::string& vocab_path, const std::string& merges_path) {
  const Files f = read_files(vocab_path, merges_path);
  return from_strings(f.vocab_json, vocab_path, f.merges, merges_path);
}

ByteLevelBpe ByteLevelBpe::from_strings(std::string_view vocab_json, const std::string& vocab_name,
                                        std::string_view merges_text, const std::string& merges_name) {
  auto impl = std::make_shared<Impl>();
  const auto fail = [&](const std::string& what) { throw std::invalid_argument(vocab_name + ": " + what); };

  // ---- vocabulary: a JSON object token → id, the ids 0..V−1 each once ----
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_json.begin(), vocab_json.end());
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const size_t close = why.find("] "); why.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      why = why.substr(close + 2);
    fail("not JSON (" + why + ")");
  }
  if (!j.is_object()) fail(std::string("not a JSON object of token → id (the top level is ") + j.type_name() + ")");
  if (j.empty()) fail("no tokens (an empty JSON object)");
  if (j.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) fail("too many tokens");
  const auto V = static_cast<int64_t>(j.size());
  impl->tokens.assign(static_cast<size_t>(V), std::string());
  std::vector<bool> seen(static_cast<size_t>(V), false);
  const std::string range = "0.." + std::to_string(V - 1) + " (each id once for the " + std::to_string(V) + " tokens)";
  std::string past_end;  // the first token whose id is ≥ V: said once the ids missing below V are known
  for (const auto& [token, value] : j.items()) {
    if (!value.is_number_integer())
      fail("token " + quote(token) + " has the " + value.type_name() + " " + quote(value.dump()) + " as its id, not an integer");
    if (token.empty()) fail("an empty token (\"\") with id " + value.dump());
    const auto id = value.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(value.get<uint64_t>(), INT64_MAX))
                                               : value.get<int64_t>();
    if (id < 0) fail("token " + quote(token) + " has id " + value.dump() + ", outside " + range);
    if (id >= V) {
      if (past_end.empty()) past_end = "token " + quote(token) + " has id " + value.dump();
      continue;
    }
    if (seen[static_cast<size_t>(id)])
      fail("tokens " + quote(impl->tokens[static_cast<size_t>(id)]) + " and " + quote(token) + " share id " +
           std::to_string(id) + ": the ids must be " + range);
    seen[static_cast<size_t>(id)] = true;
    impl->tokens[static_cast<size_t>(id)] = token;
    impl->ids.emplace(token, static_cast<int32_t>(id));
  }
  if (!past_end.empty()) {
    const auto hole = std::find(seen.begin(), seen.end(), false) - seen.begin();
    fail(past_end + ", outside " + range + ": no token has id " + std::to_string(hole) + " (a missing entry?)");
  }

  // Each token's bytes: a character of the byte table is its byte, any other its own UTF-8.
  const auto cps = byte_code_points();
  std::unordered_map<uint32_t, uint8_t> byte_of;  // code point → byte
  for (int b = 0; b < 256; ++b) byte_of.emplace(cps[static_cast<size_t>(b)], static_cast<uint8_t>(b));
  impl->token_bytes.reserve(static_cast<size_t>(V));
  for (const auto& t : impl->tokens) {
    std::string bytes;
    const auto* p = reinterpret_cast<const uint8_t*>(t.data());
    for (size_t i = 0; i < t.size();) {
      const size_t len = utf8_length(p, t.size(), i);  // JSON strings are valid UTF-8 (the parser checks)
      uint32_t cp = p[i];
      if (len > 1) {
        cp = p[i] & (0xFF >> (len + 1));
        for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
      }
      const auto it = byte_of.find(cp);
      if (it != byte_of.end()) bytes += static_cast<char>(it->second);
      else bytes.append(t, i, std::max<size_t>(len, 1));
      i += std::max<size_t>(len, 1);
    }
    impl->token_bytes.push_back(std::move(bytes));
  }
  for (int b = 0; b < 256; ++b) {
    const std::string sym = utf8_of(cps[static_cast<size_t>(b)]);
    const auto it = impl->ids.find(sym);
    if (it == impl->ids.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail("no token for byte " + std::string(hex) + " (" + quote(sym) +
           "): a byte-level vocabulary holds all 256 byte tokens");
    }
    impl->byte_ids[static_cast<size_t>(b)] = it->second;
  }

  // ---- merges: "a b" a line, rank = order; an optional "#version" first line; a byte order mark before it
  // is not text ----
  if (merges_text.substr(0, kUtf8Bom.size()) == kUtf8Bom) merges_text.remove_prefix(kUtf8Bom.size());
  std::unordered_map<uint64_t, int64_t> merge_line;  // (a, b) → its line, for repeats
  int64_t line_no = 0;
  int32_t rank = 0;
  size_t pos = 0;
  while (pos < merges_text.size()) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string_view::npos) end = merges_text.size();
    std::string_view line = merges_text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files
    if (line_no == 1 && line.substr(0, 8) == "#version") continue;
    if (line.empty()) continue;
    const std::string where = merges_name + ":" + std::to_string(line_no) + ": ";
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw std::invalid_argument(where + "not two symbols separated by one space: " + quote(line));
    const std::string a(line.substr(0, space)), b(line.substr(space + 1));
    const auto ia = impl->ids.find(a), ib = impl->ids.find(b);
    for (const auto& [sym, found] : {std::pair{&a, ia != impl->ids.end()}, std::pair{&b, ib != impl->ids.end()}})
      if (!found)
        throw std::invalid_argument(where + "symbol " + quote(*sym) + " of the merge " + quote(line) + " is not in " +
                                    vocab_name);
    const auto ir = impl->ids.find(a + b);
    if (ir == impl->ids.end())
      throw std::invalid_argument(where + "the merge " + quote(line) + " makes " + quote(a + b) + ", which is not in " +
                                  vocab_name);
    const uint64_t key = pair_key(ia->second, ib->second);
    if (const auto [it, fresh] = merge_line.emplace(key, line_no); !fresh)
      throw std::invalid_argument(where + "the merge " + quote(line) + " repeats line " + std::to_string(it->second));
    if (rank == std::numeric_limits<int32_t>::max()) throw std::invalid_argument(where + "too many merges");
    impl->merges.emplace(key, Merge{rank++, ir->second});
  }
  impl->num_merges = rank;

  impl->pattern = gpt2_pattern();
  ByteLevelBpe bpe;
  bpe.impl_ = std::move(impl);
  return bpe;
}

namespace {

// Step 1 of tfm/data/bpe.h: calls piece(view) for each piece of `text` in order, matching the next one
// only after the last was handled (so no list of pieces is kept). Each maximal run of valid UTF-8 is
// matched on its own, as the pattern's whole subject (its end is a text's end to "\s+(?!\S)"), and
// each maximal run of bytes that start no valid UTF-8 sequence is one piece (tfm/data/bpe.h says why).
template <class F>
void for_each_piece(const pcre2_code* pattern, std::string_view text, F&& piece) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  std::unique_ptr<pcre2_match_data, MatchDataFree> md(pcre2_match_data_create_from_pattern(pattern, nullptr));
  if (!md) throw std::bad_alloc();
  size_t start = 0;  // of the next valid run
  while (start < n) {
    const size_t bad = start + first_invalid_utf8(s + start, n - start);
    const PCRE2_SPTR run = s + start;  // the valid run s[start, bad)
    const size_t len = bad - start;
    for (size_t pos = 0; pos < len;) {
      // The run was checked just above: without PCRE2_NO_UTF_CHECK each call would check it again.
      int rc = pcre2_match(pattern, run, len, pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(pattern, run, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
      if (rc < 0)
        throw std::runtime_error("GPT-2 pre-tokenizer: " +
                                 (rc == PCRE2_ERROR_NOMATCH ? std::string("no piece matches") : pcre2_message(rc)) +
                                 " at byte " + std::to_string(start + pos));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      // Every character starts some alternative, so an anchored match is never empty.
      if (ov[0] != pos || ov[1] <= pos)
        throw std::logic_error("GPT-2 pre-tokenizer: empty piece at byte " + std::to_string(start + pos));
      piece(text.substr(start + pos, ov[1] - pos));
      pos = ov[1];
    }
    if (bad == n) break;
    size_t end = bad + 1;  // past the bytes that start no valid sequence
    while (end < n && utf8_length(s, n, end) == 0) ++end;
    piece(text.substr(bad, end - bad));
    start = end;
  }
}

}  // namespace

std::vector<std::string_view> ByteLevelBpe::pretokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  for_each_piece(impl_->pattern, text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

void ByteLevelBpe::encode(std::string_view text, const std::function<void(const int32_t*, size_t)>& emit) const {
  Impl& m = *impl_;
  std::string key;            // the piece's bytes, the cache's key
  std::vector<int32_t> word;  // its ids; emitted outside the lock (emit may take its time)
  for_each_piece(m.pattern, text, [&](std::string_view piece) {
    key.assign(piece);
    bool cached = false;
    {
      const std::lock_guard<std::mutex> lock(m.cache_mutex);
      const auto it = m.cache.find(key);
      if (it != m.cache.end()) {
        word.assign(it->second.begin(), it->second.end());
        cached = true;
      }
    }
    if (!cached) word = m.bpe(piece);
    emit(word.data(), word.size());
    if (cached) return;
    const std::lock_guard<std::mutex> lock(m.cache_mutex);
    if (m.cache.size() < kBpeCacheEntries) m.cache.emplace(key, std::move(word));
  });
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, [&](const int32_t* p, size_t n) { ids.insert(ids.end(), p, p + n); });
  return ids;
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw std::invalid_argument("BPE decode: id " + std::to_string(id) + " is outside 0.." +
                                  std::to_string(vocab_size() - 1));
    out += impl_->token_bytes[static_cast<size_t>(id)];
  }
  return out;
}

int64_t ByteLevelBpe::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }
int64_t ByteLevelBpe::num_merges() const { return impl_->num_merges; }

const std::string& ByteLevelBpe::token(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::invalid_argument("BPE token: id " + std::to_string(id) + " is outside 0.." +
                                std::to_string(vocab_size() - 1));
  return impl_->tokens[static_cast<size_t>(id)];
}

std::optional<int32_t> ByteLevelBpe::find(std::string_view token) const {
  const auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::string ByteLevelBpe::byte_symbol(uint8_t b) { return utf8_of(byte_code_points()[b]); }

}  // namespace tfm::data
