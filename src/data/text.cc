// src/data/text.cc — text encoding, the token corpus and its windows (see tfm/data/text.h).
#include "tfm/data/text.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "fnv1a.h"
#include "io/file_util.h"
#include "tfm/data/tasks.h"
#include "tfm/data/tokenizer.h"
#include "tfm/data/tsv.h"
#include "utf8.h"

namespace tfm::data {
namespace {

// U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's spelling of a space inside its pieces.
constexpr const char* kSpmSpace = "\xE2\x96\x81";

std::string hex64(uint64_t h) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) s[static_cast<size_t>(i)] = hex[h & 15];
  return s;
}

// The file mapped read-only; DataError naming it when it cannot be read or is empty.
std::unique_ptr<io::MappedFile> map_text(const std::string& path) {
  std::unique_ptr<io::MappedFile> f;
  try {
    f = std::make_unique<io::MappedFile>(path);
  } catch (const io::IoError& e) {
    throw DataError(e.what());
  }
  if (f->size() == 0) throw DataError(path + ": file is empty (expected UTF-8 text)");
  return f;
}

// A text read as UTF-8 (char, spm): UTF-16 is said to be that (utf16_text), not read as invalid UTF-8 at byte 0
// or, without a byte order mark, as characters between NULs. Byte and gpt2-bpe tokens read any bytes.
void check_not_utf16(const io::MappedFile& f, const std::string& path, Tokenization t) {
  if (!reads_utf8(t)) return;  // (space is not a language model's tokenization: TrainConfig refuses it)
  const std::string u16 = utf16_text(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()));
  if (!u16.empty()) throw DataError(path + ": " + u16);
}

[[noreturn]] void bad_utf8(const std::string& path, size_t offset, Tokenization t = Tokenization::CHAR) {
  throw DataError(path + ": invalid UTF-8 at byte " + std::to_string(offset) + " (--tokens " +
                  std::string(enum_name(t)) + " reads UTF-8 text; --tokens byte reads any bytes)");
}

// Throws bad_utf8 at the first byte of p[0, n) that does not start a valid UTF-8 sequence. SPM checks
// the whole text first, as char does while it encodes: SentencePiece would read such bytes as U+FFFD
// without a word, so a lossless model would train on and encode another text than the file's.
void check_utf8(const uint8_t* p, size_t n, const std::string& path, Tokenization t) {
  if (const size_t bad = first_invalid_utf8(p, n); bad < n) bad_utf8(path, bad, t);
}

void check_text_tokenization(Tokenization t) {
  if (t == Tokenization::SPACE)
    throw std::invalid_argument("text corpora use char, byte, spm or gpt2-bpe tokenization, not space");
}

// Id of every byte (BYTE) or of every ASCII code point (CHAR, -1 where the vocabulary lacks it and
// has no <unk>): the fast path of encoding.
std::vector<int32_t> single_byte_ids(const Vocab& v, Tokenization t) {
  std::vector<int32_t> ids(256, -1);
  for (int b = 0; b < (t == Tokenization::BYTE ? 256 : 128); ++b) {
    const std::string tok = t == Tokenization::BYTE ? byte_token(static_cast<uint8_t>(b)) : std::string(1, static_cast<char>(b));
    if (v.contains(tok) || v.unk_id() >= 0) ids[static_cast<size_t>(b)] = v.id(tok);
  }
  return ids;
}

// Calls emit(id) for every token of p[0, n): errors name `name` (bad UTF-8 with its byte offset, a
// token the vocabulary lacks without <unk>).
template <class Emit>
void encode_bytes(const uint8_t* p, size_t n, const Vocab& v, Tokenization t, const std::string& name, Emit&& emit) {
  const std::vector<int32_t> fast = single_byte_ids(v, t);
  const auto lookup = [&](const std::string& tok) {
    try {
      return v.id(tok);
    } catch (const std::invalid_argument& e) {
      throw DataError(name + ": " + e.what());
    }
  };
  if (t == Tokenization::BYTE) {
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = fast[p[i]];
      emit(id >= 0 ? id : lookup(byte_token(p[i])));
    }
    return;
  }
  for (size_t i = 0; i < n;) {
    const size_t len = utf8_length(p, n, i);
    if (len == 0) bad_utf8(name, i);
    if (len == 1 && fast[p[i]] >= 0) emit(fast[p[i]]);
    else emit(lookup(std::string(reinterpret_cast<const char*>(p + i), len)));
    i += len;
  }
}

}  // namespace

int64_t TextCorpus::count(int32_t id) const {
  int64_t n = 0;
  for (int64_t i = 0; i < size_; ++i) n += (*this)[i] == id;
  return n;
}

namespace {

uint64_t vocab_hash(const Vocab& v) {
  uint64_t h = kFnvOffset;
  for (const auto& t : v.tokens()) h = fnv1a(reinterpret_cast<const uint8_t*>(t.c_str()), t.size() + 1, h);
  return h;
}

// A language model's SentencePiece model must give its text back as it was: its pieces must hold "▁", and three
// tiny texts must come back, since a model given with --spm-model may have been trained with spm_train's defaults (a
// space added before every line, runs of spaces collapsed, NFKC), which tfm's own models (SpmOptions::lossless) turn
// off, or on a text without a space, which gives it no piece "▁" (tfm's own always have it). `v`: the model's pieces.
// Throws DataError naming `name`, the model (its spm_name: the .model file, or "<text> (its SentencePiece model)"
// for one tfm trained), what it does to a text, and the spm_train flag that fixes it.
void check_lossless_spm(const Tokenizer& t, const Vocab& v, const std::string& name) {
  const auto refuse = [&](const std::string& what, const std::string& fix) {
    throw DataError(name + ": " + t.spm_name() + " " + what + "; train it with " + fix +
                    " (tfm's own: --add_dummy_prefix=false --remove_extra_whitespaces=false "
                    "--normalization_rule_name=identity --byte_fallback=true --required_chars=" +
                    kSpmSpace + ")");
  };
  const std::string lossy = ", so a language model's text would not come back as it was";
  // Without "▁", a space goes to byte fallback as the bytes of "▁", which decode to that character.
  if (!v.contains(kSpmSpace))
    refuse(std::string("has no piece ") + kSpmSpace +
               " (SentencePiece's space), so a space comes back as the character " + kSpmSpace,
           std::string("--required_chars=") + kSpmSpace + ", on a text that holds a space");
  const Tokens a = t.tokenize("a");
  if (!a.empty() && a.front().rfind(kSpmSpace, 0) == 0)
    refuse("adds a space before every line" + lossy, "--add_dummy_prefix=false");
  if (t.detokenize(t.tokenize("a  b ")) != "a  b ")
    refuse("collapses runs of spaces" + lossy, "--remove_extra_whitespaces=false");
  if (t.detokenize(t.tokenize("\xEF\xAC\x81 \xEF\xBC\xA1")) != "\xEF\xAC\x81 \xEF\xBC\xA1")  // "ﬁ Ａ"
    refuse("normalizes characters (NFKC: \xEF\xAC\x81 becomes fi)" + lossy, "--normalization_rule_name=identity");
}

// SPM: calls emit(id) for every piece of p[0, n), encoded line by line, and the id of the piece
// "<0x0A>" for every newline (SentencePiece never sees a newline inside a sentence). A "▁" (U+2581)
// of the text is its three byte pieces: SentencePiece writes a space as "▁" inside its pieces, so it
// would decode as a space. Unknown pieces map to <unk>. Throws DataError naming `name` when the model has no "<0x0A>"
// piece or is not lossless (check_lossless_spm), or on invalid UTF-8 (with its byte offset in the whole text).
template <class Emit>
void encode_spm(const char* p, size_t n, const Vocab& v, const Tokenizer& t, const std::string& name, Emit&& emit) {
  const std::string newline = byte_token('\n');
  if (!v.contains(newline))
    throw DataError(name + ": " + t.spm_name() + " has no piece " + newline +
                    " (byte_fallback), so it cannot encode a newline; a language model needs one");
  check_lossless_spm(t, v, name);
  check_utf8(reinterpret_cast<const uint8_t*>(p), n, name, Tokenization::SPM);
  const int32_t nl = v.id(newline);
  const std::string_view meta = kSpmSpace;
  int32_t meta_bytes[3];
  for (size_t i = 0; i < 3; ++i) meta_bytes[i] = v.id(byte_token(static_cast<uint8_t>(meta[i])));
  size_t start = 0;
  while (start < n) {
    const char* end = static_cast<const char*>(std::memchr(p + start, '\n', n - start));
    const size_t stop = end ? static_cast<size_t>(end - p) : n;
    const std::string_view line(p + start, stop - start);
    for (size_t a = 0; a < line.size();) {
      const size_t b = std::min(line.find(meta, a), line.size());
      if (b > a)
        for (const auto& piece : t.tokenize(std::string(line.substr(a, b - a)))) emit(v.id(piece));
      if (b == line.size()) break;
      for (const int32_t id : meta_bytes) emit(id);
      a = b + meta.size();
    }
    if (!end) break;
    emit(nl);
    start = stop + 1;
  }
}

// GPT2_BPE: calls emit(id) for every BPE token of p[0, n) (the whole text at once: GPT-2's pieces
// depend on what follows a run of whitespace, so cutting the text could change them; the pieces are
// encoded as they are matched, so the text costs its ids only). The ids are the vocabulary's, which
// must start with the BPE's tokens (a padded vocabulary may have more); any bytes encode (tfm/data/bpe.h).
// Throws DataError naming `name` for a piece the BPE cannot take (over 2³¹ bytes).
template <class Emit>
void encode_bpe(const char* p, size_t n, const Vocab& v, const Tokenizer& t, const std::string& name, Emit&& emit) {
  const ByteLevelBpe& bpe = t.bpe();
  if (v.size() < bpe.vocab_size())
    throw DataError(name + ": the vocabulary has " + std::to_string(v.size()) + " entries, fewer than the BPE's " +
                    std::to_string(bpe.vocab_size()) + " (" + t.name() + ")");
  try {
    bpe.encode(std::string_view(p, n), [&](const int32_t* ids, size_t count) {
      for (size_t i = 0; i < count; ++i) emit(ids[i]);
    });
  } catch (const std::invalid_argument& e) {  // raised before the first id (tfm/data/bpe.h)
    throw DataError(name + ": " + e.what());
  }
}

// The cache file: this header (64 bytes), then `count` ids of `width` bytes.
struct CacheHeader {
  char magic[8];         // "TFMTOKS1"
  uint32_t width;        // 2 or 4
  uint32_t reserved;
  int64_t count;         // ids
  int64_t text_bytes;    // size of the text it encodes
  char text_hash[16];    // text_file_hash, hex
  uint64_t vocab_hash;   // FNV-1a of the vocabulary's tokens
  uint64_t reserved2;
};
static_assert(sizeof(CacheHeader) == 64);
constexpr char kCacheMagic[8] = {'T', 'F', 'M', 'T', 'O', 'K', 'S', '1'};

// SPM: a piece's text, piece by piece (so that generation can print each piece as it comes): a byte
// piece its byte, "▁" a space. This is SentencePiece's decoding for the lossless models (no dummy
// prefix, no normalisation; tfm/data/tokenizer.h).
void append_piece_text(std::string& out, const std::string& piece) {
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    const std::string bytes = detokenize({piece}, Tokenization::BYTE);  // "<0xNN>" → its byte
    if (bytes.size() == 1) {
      out += bytes;
      return;
    }
  }
  const std::string_view space = kSpmSpace;
  for (size_t i = 0; i < piece.size();) {
    if (std::string_view(piece).substr(i, space.size()) == space) {
      out += ' ';
      i += space.size();
    } else {
      out += piece[i++];
    }
  }
}

}  // namespace

std::vector<int32_t> encode_text(const Vocab& vocab, const Tokenizer& tokenizer, const std::string& text,
                                 const std::string& source) {
  const Tokenization t = tokenizer.kind();
  if (t == Tokenization::SPACE) return vocab.encode(tokenize(text, t));
  if (t == Tokenization::SPM || t == Tokenization::GPT2_BPE) {
    std::vector<int32_t> ids;
    const auto emit = [&](int32_t id) { ids.push_back(id); };
    try {
      if (t == Tokenization::SPM) encode_spm(text.data(), text.size(), vocab, tokenizer, source, emit);
      else encode_bpe(text.data(), text.size(), vocab, tokenizer, source, emit);
    } catch (const DataError& e) {
      throw std::invalid_argument(e.what());
    }
    return ids;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  try {
    encode_bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size(), vocab, t, source,
                 [&](int32_t id) { ids.push_back(id); });
  } catch (const DataError& e) {
    throw std::invalid_argument(e.what());
  }
  return ids;
}

std::string decode_text(const Vocab& vocab, const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  const Tokenization t = tokenizer.kind();
  std::string out;
  if (t == Tokenization::GPT2_BPE) {  // the bytes of the BPE's tokens; specials and padded rows add nothing
    const ByteLevelBpe& bpe = tokenizer.bpe();
    std::vector<int32_t> kept;
    for (int32_t id : ids) {
      vocab.token(id);  // range check
      if (id == vocab.pad_id() || id == vocab.bos_id() || id == vocab.eos_id() || id >= bpe.vocab_size()) continue;
      kept.push_back(id);
    }
    return bpe.decode(kept);
  }
  bool first = true;
  for (int32_t id : ids) {
    const std::string& tok = vocab.token(id);  // range check
    if (id == vocab.pad_id() || id == vocab.bos_id() || id == vocab.eos_id()) continue;
    if (t == Tokenization::SPACE && !first) out += ' ';
    first = false;
    if (id == vocab.unk_id()) out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    else if (t == Tokenization::BYTE) out += detokenize({tok}, t);
    else if (t == Tokenization::SPM) append_piece_text(out, tok);
    else out += tok;
  }
  return out;
}

Vocab build_text_vocab(const std::string& path, Tokenization t) {
  check_text_tokenization(t);
  if (t == Tokenization::SPM)
    throw std::invalid_argument(path + ": an spm vocabulary is its SentencePiece model's (train_text_spm)");
  if (t == Tokenization::GPT2_BPE)
    throw std::invalid_argument(path + ": a gpt2-bpe vocabulary is its BPE's (Tokenizer::vocab)");
  const auto f = map_text(path);
  if (t == Tokenization::BYTE) return byte_vocab();
  check_not_utf16(*f, path, t);
  const uint8_t* p = f->data();
  const size_t n = f->size();
  std::vector<int64_t> ascii(128, 0);
  std::map<std::string, int64_t> other;
  for (size_t i = 0; i < n;) {
    const size_t len = utf8_length(p, n, i);
    if (len == 0) bad_utf8(path, i);
    if (len == 1) ++ascii[p[i]];
    else ++other[std::string(reinterpret_cast<const char*>(p + i), len)];
    i += len;
  }
  std::map<std::string, int64_t> counts = std::move(other);  // byte order: the tie-break
  for (int c = 0; c < 128; ++c)
    if (ascii[static_cast<size_t>(c)] > 0) counts[std::string(1, static_cast<char>(c))] = ascii[static_cast<size_t>(c)];
  std::vector<std::pair<std::string, int64_t>> order(counts.begin(), counts.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> tokens = {Vocab::PAD, Vocab::BOS, Vocab::EOS, Vocab::UNK};
  for (auto& [tok, count] : order) tokens.push_back(tok);
  return Vocab::from_tokens(std::move(tokens));
}

std::string text_file_hash(const std::string& path) {
  std::unique_ptr<io::MappedFile> f;
  try {
    f = std::make_unique<io::MappedFile>(path);
  } catch (const io::IoError& e) {
    throw DataError(e.what());
  }
  return hex64(fnv1a(f->data(), f->size()));
}

Tokenizer train_text_spm(const std::string& path, const SpmOptions& options) {
  const auto f = map_text(path);
  check_not_utf16(*f, path, Tokenization::SPM);
  check_utf8(f->data(), f->size(), path, Tokenization::SPM);  // before training: encoding the text would refuse it
  const char* p = reinterpret_cast<const char*>(f->data());
  const size_t n = f->size();
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < n;) {
    const char* end = static_cast<const char*>(std::memchr(p + start, '\n', n - start));
    const size_t stop = end ? static_cast<size_t>(end - p) : n;
    lines.emplace_back(p + start, stop - start);
    start = stop + 1;
  }
  SpmOptions o = options;
  o.lossless = true;
  return Tokenizer::from_spm_model(train_spm(lines, o, path), path + " (its SentencePiece model)");
}

TextCorpus TextCorpus::read(const std::string& path, const Vocab& vocab, const Tokenizer& tokenizer,
                            const std::string& cache_path) {
  const Tokenization t = tokenizer.kind();
  check_text_tokenization(t);
  const auto f = map_text(path);
  check_not_utf16(*f, path, t);
  TextCorpus c;
  c.name_ = path;
  c.hash_ = hex64(fnv1a(f->data(), f->size()));
  c.text_bytes_ = static_cast<int64_t>(f->size());
  c.width_ = vocab.size() <= 65536 ? 2 : 4;
  // A BPE's ids depend on its merges too.
  const uint64_t vhash = t == Tokenization::GPT2_BPE
                             ? fnv1a(reinterpret_cast<const uint8_t*>(tokenizer.bpe_merges().data()),
                                     tokenizer.bpe_merges().size(), vocab_hash(vocab))
                             : vocab_hash(vocab);
  const auto matches = [&](const CacheHeader& h) {
    return std::memcmp(h.magic, kCacheMagic, 8) == 0 && h.width == static_cast<uint32_t>(c.width_) &&
           h.text_bytes == c.text_bytes_ && std::memcmp(h.text_hash, c.hash_.data(), 16) == 0 && h.vocab_hash == vhash;
  };
  if (!cache_path.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(cache_path, ec)) {
      auto m = std::make_shared<io::MappedFile>(cache_path);
      CacheHeader h{};
      if (m->size() >= sizeof h) std::memcpy(&h, m->data(), sizeof h);
      // Every id below the vocabulary's size, too: a cache whose body was damaged (its header intact) is
      // derived data, encoded again and rewritten like a stale one.
      const auto ids_in_vocab = [&] {
        const uint8_t* body = m->data() + sizeof h;
        const uint32_t v = static_cast<uint32_t>(vocab.size());
        for (int64_t i = 0; i < h.count; ++i) {
          uint32_t id;
          if (c.width_ == 2) {
            uint16_t x;
            std::memcpy(&x, body + 2 * i, 2);
            id = x;
          } else {
            std::memcpy(&id, body + 4 * i, 4);
          }
          if (id >= v) return false;
        }
        return true;
      };
      if (m->size() >= sizeof h && matches(h) &&
          m->size() == sizeof h + static_cast<size_t>(h.count) * static_cast<size_t>(c.width_) && ids_in_vocab()) {
        c.base_ = m->data() + sizeof h;
        c.size_ = h.count;
        c.owner_ = std::move(m);
        return c;
      }
    }
  }
  // Encode straight into an array of the compact width: the only copy of the text's tokens in memory.
  // Char and byte tokens size it first by the tokens the text can hold (one a byte, or one a UTF-8
  // lead byte); subwords, whose count is known only after encoding, grow it as their ids come.
  const uint8_t* p = f->data();
  const size_t n = f->size();
  const auto lead = [](uint8_t b) { return (b & 0xC0) != 0x80; };
  const auto width = static_cast<size_t>(c.width_);
  auto store = std::make_shared<std::vector<uint8_t>>();
  size_t k = 0;
  if (t == Tokenization::SPM || t == Tokenization::GPT2_BPE) {
    const auto append = [&](int32_t id) {
      store->resize((k + 1) * width);  // amortised growth
      if (width == 2) {
        const auto x = static_cast<uint16_t>(id);
        std::memcpy(store->data() + k * width, &x, 2);
      } else {
        std::memcpy(store->data() + k * width, &id, 4);
      }
      ++k;
    };
    if (t == Tokenization::SPM) encode_spm(reinterpret_cast<const char*>(p), n, vocab, tokenizer, path, append);
    else encode_bpe(reinterpret_cast<const char*>(p), n, vocab, tokenizer, path, append);
    if (cache_path.empty()) store->shrink_to_fit();  // kept for the run: not the growth's spare half
  } else {
    const size_t upper = t == Tokenization::BYTE ? n : static_cast<size_t>(std::count_if(p, p + n, lead));
    store->resize(upper * width);
    uint8_t* out = store->data();
    if (width == 2)
      encode_bytes(p, n, vocab, t, path, [&](int32_t id) { reinterpret_cast<uint16_t*>(out)[k++] = static_cast<uint16_t>(id); });
    else
      encode_bytes(p, n, vocab, t, path, [&](int32_t id) { reinterpret_cast<int32_t*>(out)[k++] = id; });
  }
  const auto count = static_cast<int64_t>(k);  // char / byte: == upper, every token starts at a lead byte
  if (!cache_path.empty()) {
    CacheHeader h{};
    std::memcpy(h.magic, kCacheMagic, 8);
    h.width = static_cast<uint32_t>(c.width_);
    h.count = count;
    h.text_bytes = c.text_bytes_;
    std::memcpy(h.text_hash, c.hash_.data(), 16);
    h.vocab_hash = vhash;
    io::AtomicFileWriter w(cache_path);
    w.write(&h, sizeof h);
    w.write(store->data(), k * static_cast<size_t>(c.width_));
    w.commit();
    // The map replaces the array, unless another process replaced the file in between.
    auto m = std::make_shared<io::MappedFile>(cache_path);
    CacheHeader back{};
    if (m->size() == sizeof h + k * static_cast<size_t>(c.width_)) std::memcpy(&back, m->data(), sizeof back);
    if (matches(back) && back.count == count) {
      c.base_ = m->data() + sizeof h;
      c.owner_ = std::move(m);
    } else {
      c.base_ = store->data();
      c.owner_ = std::move(store);
    }
  } else {
    c.base_ = store->data();
    c.owner_ = std::move(store);
  }
  c.size_ = count;
  return c;
}

TextCorpus TextCorpus::from_ids(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& name) {
  TextCorpus c;
  c.name_ = name;
  c.width_ = vocab_size <= 65536 ? 2 : 4;
  auto store = std::make_shared<std::vector<uint8_t>>(ids.size() * static_cast<size_t>(c.width_));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size)
      throw std::invalid_argument(name + ": id " + std::to_string(ids[i]) + " outside the vocabulary of " +
                                  std::to_string(vocab_size));
    if (c.width_ == 2) reinterpret_cast<uint16_t*>(store->data())[i] = static_cast<uint16_t>(ids[i]);
    else reinterpret_cast<int32_t*>(store->data())[i] = ids[i];
  }
  c.base_ = store->data();
  c.owner_ = std::move(store);
  c.size_ = static_cast<int64_t>(ids.size());
  return c;
}

TextCorpus TextCorpus::slice(int64_t begin, int64_t end, const std::string& name) const {
  if (begin < 0 || end < begin || end > size_)
    throw std::out_of_range("TextCorpus::slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                            std::to_string(size_) + " tokens");
  TextCorpus c = *this;
  c.begin_ = begin_ + begin;
  c.size_ = end - begin;
  if (!name.empty()) c.name_ = name;
  return c;
}

void check_windows(const TextCorpus& corpus, int64_t block_size) {
  if (block_size < 1) throw std::invalid_argument("block_size must be ≥ 1, got " + std::to_string(block_size));
  if (corpus.size() <= block_size)  // (block_size + 1 could overflow)
    throw DataError(corpus.name() + ": " + std::to_string(corpus.size()) + " tokens, too few for one window of block_size + 1 = " +
                    std::to_string(block_size + 1) + " tokens (a smaller --block-size, or a longer text)");
}

TokenBatch window_batch(const TextCorpus& corpus, const std::vector<int64_t>& starts, int64_t T) {
  TokenBatch b;
  b.B = static_cast<int64_t>(starts.size());
  b.S = b.T = T;
  b.src.resize(static_cast<size_t>(b.B * T));
  b.tgt_out.resize(static_cast<size_t>(b.B * T));
  for (int64_t r = 0; r < b.B; ++r) {
    const int64_t s = starts[static_cast<size_t>(r)];
    if (s < 0 || s + T + 1 > corpus.size())
      throw std::out_of_range("window at " + std::to_string(s) + " of " + std::to_string(T + 1) + " tokens outside " +
                              corpus.name() + "'s " + std::to_string(corpus.size()));
    for (int64_t t = 0; t < T; ++t) {
      b.src[static_cast<size_t>(r * T + t)] = corpus[s + t];
      b.tgt_out[static_cast<size_t>(r * T + t)] = corpus[s + t + 1];
    }
  }
  return b;
}

int64_t count_window_targets(const TextCorpus& corpus, const std::vector<int64_t>& starts, int64_t T, int32_t pad_id) {
  int64_t n = 0;
  for (const int64_t s : starts)
    for (int64_t t = 0; t < T; ++t) n += corpus[s + t + 1] != pad_id;
  return n;
}

TokenBatch random_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, Generator& gen) {
  return window_batch(corpus, random_window_starts(corpus, block_size, B, gen), block_size);
}

std::vector<int64_t> random_window_starts(const TextCorpus& corpus, int64_t block_size, int64_t B, Generator& gen) {
  check_windows(corpus, block_size);
  const uint64_t first = gen.take(static_cast<uint64_t>(B));
  const uint64_t positions = static_cast<uint64_t>(corpus.size() - block_size);  // starts 0 .. size − block − 1
  std::vector<int64_t> starts(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) {
    SplitMix64 g(mix_seed(gen.seed, first + static_cast<uint64_t>(r), 0x77696e64ull /* "wind" */));
    starts[static_cast<size_t>(r)] = static_cast<int64_t>(g.below(positions));
  }
  return starts;
}

int64_t sequential_batch_count(const TextCorpus& corpus, int64_t block_size, int64_t B) {
  check_windows(corpus, block_size);
  const int64_t windows = (corpus.size() - 1) / block_size;
  return (windows + B - 1) / B;
}

TokenBatch sequential_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k) {
  return window_batch(corpus, sequential_window_starts(corpus, block_size, B, k), block_size);
}

std::vector<int64_t> sequential_window_starts(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k) {
  const int64_t windows = (corpus.size() - 1) / block_size;
  std::vector<int64_t> starts;
  for (int64_t w = k * B; w < std::min(windows, (k + 1) * B); ++w) starts.push_back(w * block_size);
  if (starts.empty()) throw std::out_of_range("sequential batch " + std::to_string(k) + " beyond the epoch");
  return starts;
}

int64_t validation_batch_count(const TextCorpus& corpus, int64_t block_size, int64_t B) {
  if (corpus.size() < 2) return 0;
  const int64_t full = (corpus.size() - 1) / block_size;
  return (full + B - 1) / B + ((corpus.size() - 1) % block_size ? 1 : 0);
}

TokenBatch validation_windows(const TextCorpus& corpus, int64_t block_size, int64_t B, int64_t k) {
  const int64_t full = (corpus.size() - 1) / block_size;
  const int64_t full_batches = (full + B - 1) / B;
  if (k < full_batches) return sequential_windows(corpus, block_size, B, k);
  const int64_t rest = (corpus.size() - 1) % block_size;
  if (k != full_batches || rest == 0) throw std::out_of_range("validation batch " + std::to_string(k) + " beyond the text");
  return window_batch(corpus, {full * block_size}, rest);
}

}  // namespace tfm::data
