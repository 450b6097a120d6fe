// src/data/tsv.cc — the TSV pair reader (see tfm/data/tsv.h for the checks and their messages).
#include "tfm/data/tsv.h"

#include <algorithm>

#include "io/file_util.h"

namespace tfm::data {
namespace {

bool all_space(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; });
}

// A side's token count. Char, space and byte tokens are counted without being made (count_tokens),
// so that a huge side is refused as over-long at the cost of its bytes, not of millions of token
// strings (a 20 MB side took 1.6 GB); a model's tokens (spm, gpt2-bpe) are made into `tokens` to be
// counted. Throws as tokenize does.
int64_t count_side(const Tokenizer& t, const std::string& text, Tokens& tokens) {
  if (!t.has_vocab()) return count_tokens(text, t.kind());
  tokens = t.tokenize(text);
  return static_cast<int64_t>(tokens.size());
}

// Calls f(line_no, line) for each line of `text` (1-based; a final line without "\n" counts, a final
// "\n" starts no empty line) and returns how many there were. A UTF-8 byte order mark at the start
// (editors on Windows write one) marks the encoding, not a character of line 1, and a trailing "\r"
// (CRLF files) is not part of its line: parse_tsv and read_tsv_sides see the same lines.
template <class F>
int64_t for_each_line(const std::string& text, F&& f) {
  size_t start = text.rfind(kUtf8Bom, 0) == 0 ? kUtf8Bom.size() : 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line(text, start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    f(++line_no, line);
  }
  return line_no;
}

}  // namespace

std::string TsvData::summary() const {
  std::string s = path + ": skipped " + std::to_string(problems.size()) + " of " + std::to_string(lines) + " lines";
  if (problems.empty()) return s;
  s += " (";
  const size_t shown = std::min<size_t>(problems.size(), 5);
  for (size_t i = 0; i < shown; ++i) {
    if (i) s += "; ";
    s += "line " + std::to_string(problems[i].line) + ": " + problems[i].what;
  }
  if (shown < problems.size()) s += "; ...";
  return s + ")";
}

TsvData parse_tsv(const std::string& text, const std::string& name, const TsvOptions& options) {
  TsvData data;
  data.path = name;
  if (text.empty()) throw DataError(name + ": file is empty (expected one 'source<TAB>target' pair per line)");
  // A side read as UTF-8 would read UTF-16 as NUL-laden or invalid text; bytes may be any bytes.
  if (reads_utf8(options.src_tokens.kind()) || reads_utf8(options.tgt_tokens.kind()))
    if (const std::string u16 = utf16_text(text); !u16.empty()) throw DataError(name + ": " + u16);
  auto problem = [&](int64_t line, std::string what) {
    if (options.strict) throw DataError(name + ":" + std::to_string(line) + ": " + what + " (--strict)");
    data.problems.push_back({line, std::move(what)});
  };
  data.pairs.reserve(std::count(text.begin(), text.end(), '\n') + 1);  // no growth by doubling: one pair a line at most
  data.lines = for_each_line(text, [&](int64_t line_no, const std::string& line) {
    if (all_space(line)) {
      problem(line_no, "blank line");
      return;
    }
    if (line.find('\r') != std::string::npos) {  // a CRLF line's own \r is gone (for_each_line)
      problem(line_no,
              "malformed line: a carriage return inside it (a file with CR-only line ends, as old Mac "
              "files have, is one line here: convert them to LF)");
      return;
    }
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      problem(line_no, "malformed line: no tab between source and target");
      return;
    }
    if (line.find('\t', tab + 1) != std::string::npos) {
      problem(line_no, "malformed line: more than one tab");
      return;
    }
    std::string src = line.substr(0, tab), tgt = line.substr(tab + 1);
    TextPair pair;
    pair.line = line_no;
    int64_t ns = 0, nt = 0;       // the sides' token counts
    const char* side = "source";  // a tokenizer's byte offsets count from its side's start: say which
    try {
      ns = count_side(options.src_tokens, src, pair.src);
      side = "target";
      nt = count_side(options.tgt_tokens, tgt, pair.tgt);
    } catch (const std::invalid_argument& e) {
      problem(line_no, std::string("malformed line: ") + e.what() + " (in the " + side + ")");
      return;
    }
    if (ns == 0 || nt == 0) {
      problem(line_no, std::string("malformed line: empty ") + (ns == 0 ? "source" : "target"));
      return;
    }
    const int64_t longest = std::max(ns, nt);
    if (longest > options.max_tokens) {
      problem(line_no, "over-long line: " + std::to_string(longest) + " tokens, the limit is " +
                           std::to_string(options.max_tokens));
      return;
    }
    if (ns > options.max_src_tokens) {
      problem(line_no, "over-long source: " + std::to_string(ns) + " tokens, more than the model's max_len " +
                           std::to_string(options.max_src_tokens));
      return;
    }
    if (options.equal_lengths && ns != nt) {
      problem(line_no, "malformed line: source has " + std::to_string(ns) + " tokens, target " + std::to_string(nt) +
                           " (arch encoder needs one target token per source token)");
      return;
    }
    // A side only counted is made now (unless kept as text only): it passed the checks, so this cannot throw.
    if (options.keep_tokens && !options.src_tokens.has_vocab()) pair.src = options.src_tokens.tokenize(src);
    if (options.keep_tokens && !options.tgt_tokens.has_vocab()) pair.tgt = options.tgt_tokens.tokenize(tgt);
    pair.src_text = std::move(src);
    pair.tgt_text = std::move(tgt);
    data.pairs.push_back(std::move(pair));
  });
  if (data.pairs.empty())
    throw DataError(name + ": no usable pairs in " + std::to_string(data.lines) + " lines" +
                    (data.problems.empty() ? "" : " — " + data.summary().substr(name.size() + 2)));
  return data;
}

TsvData read_tsv(const std::string& path, const TsvOptions& options) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const io::IoError& e) {
    throw DataError(e.what());
  }
  return parse_tsv(text, path, options);
}

TsvSides read_tsv_sides(const std::string& path, int64_t max_side_chars) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const io::IoError& e) {
    throw DataError(e.what());
  }
  if (const std::string u16 = utf16_text(text); !u16.empty()) throw DataError(path + ": " + u16);
  TsvSides sides;
  for_each_line(text, [&](int64_t, const std::string& line) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos) return;
    std::string src = line.substr(0, tab), tgt = line.substr(tab + 1);
    if (all_space(src) || all_space(tgt)) return;
    if (line.find('\r') != std::string::npos) return;  // parse_tsv's rule: CR-only line ends make no pair
    // Code points counted as UTF-8 lead bytes (an invalid line is refused later, by the trainer's own check).
    const auto chars = [](const std::string& s) {
      return std::count_if(s.begin(), s.end(), [](char ch) { return (static_cast<uint8_t>(ch) & 0xC0) != 0x80; });
    };
    if (max_side_chars > 0 && (chars(src) > max_side_chars || chars(tgt) > max_side_chars)) return;
    sides.src.push_back(std::move(src));
    sides.tgt.push_back(std::move(tgt));
  });
  return sides;
}

}  // namespace tfm::data
