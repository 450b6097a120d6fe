// src/data/spm_charsmap.cc — walking a SentencePiece model's charsmap tries (spm_charsmap.h).
//
// The protobuf wire format, as far as needed: each field is a varint key (field number << 3 | wire type) and a
// value — 0 a varint, 1 eight bytes, 2 a varint length and that many bytes, 5 four bytes, 3/4 a group's start and
// end. ModelProto's field 3 is normalizer_spec and 5 denormalizer_spec (NormalizerSpec messages), whose field 2 is
// precompiled_charsmap. Repeated occurrences of a message field merge and the last bytes field wins, as protobuf
// parses them.
//
// A charsmap: a little-endian uint32 n, n bytes of trie (32-bit darts-clone units), then the replacements. A unit u:
//   has_leaf = u >> 8 & 1,  value = u & 0x7fffffff,  label = u & (0x80000000 | 0xff),
//   offset   = (u >> 10) << ((u & 1 << 9) >> 6)     (shifted left by 8 when bit 9 is set).
// SentencePiece's walk (darts-clone's commonPrefixSearch): from node 0, base = node ^ offset(node); a byte c goes to
// child = base ^ c, which matches when label(child) == c; a matched child with has_leaf yields
// value(unit[child ^ offset(child)]) — the offset of its replacement — and the walk goes on from the child.
#include "data/spm_charsmap.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace tfm::data {
namespace {

// A cursor over protobuf bytes; every read checks the bounds (false: the bytes end early).
struct Wire {
  std::string_view b;
  size_t at = 0;

  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && at < b.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(b[at++]);
      *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  }
  // Skips a value of `type` (a group up to its end); false when it is not whole.
  bool skip(unsigned type, int depth = 0) {
    uint64_t v = 0;
    switch (type) {
      case 0:
        return varint(&v);
      case 1:
        return (at += 8) <= b.size();
      case 5:
        return (at += 4) <= b.size();
      case 2:
        return varint(&v) && v <= b.size() - at && ((at += v), true);
      case 3:  // a group: fields up to the matching end
        if (depth > 64) return false;
        while (at < b.size()) {
          if (!varint(&v)) return false;
          if ((v & 7) == 4) return true;
          if (!skip(static_cast<unsigned>(v & 7), depth + 1)) return false;
        }
        return false;
      default:
        return false;
    }
  }
  // The next field: its number, wire type and (type 2) bytes. False at the end or on damage (*bad then).
  bool next(uint64_t* field, unsigned* type, std::string_view* bytes, bool* bad) {
    *bad = false;
    if (at >= b.size()) return false;
    uint64_t key = 0;
    if (!varint(&key)) return !(*bad = true);
    *field = key >> 3;
    *type = static_cast<unsigned>(key & 7);
    if (*type != 2) return skip(*type) || !(*bad = true);
    uint64_t n = 0;
    if (!varint(&n) || n > b.size() - at) return !(*bad = true);
    *bytes = b.substr(at, n);
    at += n;
    return true;
  }
};

// The last precompiled_charsmap of every `spec_field` message in `model`; false when the bytes do not read.
bool find_charsmap(std::string_view model, uint64_t spec_field, std::string_view* charsmap, bool* found) {
  Wire m{model};
  uint64_t field = 0;
  unsigned type = 0;
  std::string_view bytes;
  bool bad = false;
  while (m.next(&field, &type, &bytes, &bad)) {
    if (field != spec_field || type != 2) continue;
    Wire spec{bytes};
    uint64_t f = 0;
    unsigned t = 0;
    std::string_view value;
    bool spec_bad = false;
    while (spec.next(&f, &t, &value, &spec_bad))
      if (f == 2 && t == 2) *charsmap = value, *found = true;
    if (spec_bad) return false;
  }
  return !bad;
}

uint32_t unit_at(std::string_view trie, size_t i) {
  uint32_t u = 0;
  std::memcpy(&u, trie.data() + 4 * i, 4);  // little-endian, as x86 reads it
  return u;
}
uint32_t offset_of(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
uint32_t value_of(uint32_t u) { return u & 0x7fffffffu; }
uint32_t label_of(uint32_t u) { return u & (0x80000000u | 0xffu); }

// "" when every walk of `charsmap`'s trie stays inside it and every replacement offset inside the replacements.
std::string walk_problem(std::string_view charsmap) {
  if (charsmap.empty()) return "";  // no rules: SentencePiece builds no trie
  if (charsmap.size() <= 4) return "the charsmap holds " + std::to_string(charsmap.size()) + " bytes";
  uint32_t n = 0;
  std::memcpy(&n, charsmap.data(), 4);
  if (n > charsmap.size() - 4) return "its trie size " + std::to_string(n) + " passes the charsmap";
  const std::string_view trie = charsmap.substr(4, n), replacements = charsmap.substr(4 + n);
  const size_t units = trie.size() / 4;
  if (units == 0) return "its trie is empty";
  std::vector<char> seen(units, 0);
  std::vector<size_t> todo{0};
  seen[0] = 1;
  while (!todo.empty()) {
    const size_t node = todo.back();
    todo.pop_back();
    const size_t base = node ^ offset_of(unit_at(trie, node));
    if ((base | 0xffu) >= units)
      return "its trie's cell " + std::to_string(node) + " leads past the trie's " + std::to_string(units) + " cells";
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t child = base ^ c;
      const uint32_t u = unit_at(trie, child);
      if (label_of(u) != c) continue;
      if (has_leaf(u)) {
        const size_t leaf = child ^ offset_of(u);
        if (leaf >= units)
          return "its trie's cell " + std::to_string(child) + " leads past the trie's " + std::to_string(units) +
                 " cells";
        if (value_of(unit_at(trie, leaf)) >= replacements.size())
          return "its trie's cell " + std::to_string(leaf) + " names replacement " +
                 std::to_string(value_of(unit_at(trie, leaf))) + " of " + std::to_string(replacements.size()) +
                 " bytes";
      }
      if (!seen[child]) {
        seen[child] = 1;
        todo.push_back(child);
      }
    }
  }
  return "";
}

}  // namespace

std::string spm_charsmaps_problem(std::string_view model) {
  for (const auto& [field, name] : {std::pair<uint64_t, const char*>{3, "normalizer_spec"}, {5, "denormalizer_spec"}}) {
    std::string_view charsmap;
    bool found = false;
    if (!find_charsmap(model, field, &charsmap, &found)) return std::string("its ") + name + " does not read";
    if (!found) continue;
    const std::string why = walk_problem(charsmap);
    if (!why.empty()) return std::string("its ") + name + "'s precompiled charsmap is damaged: " + why;
  }
  return "";
}

}  // namespace tfm::data
