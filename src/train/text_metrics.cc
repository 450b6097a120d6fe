// src/train/text_metrics.cc — 13a tokenization, corpus BLEU and chrF (see tfm/train/text_metrics.h for the
// definitions, which restate sacreBLEU 2.x's), and the code points, whitespace and words they read text by
// (src/train/text_words.h).
#include "tfm/train/text_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <unordered_map>

#include "train/text_words.h"
#include "utf8.h"

namespace tfm::train {

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto* u = reinterpret_cast<const uint8_t*>(s.data());
  const size_t len = utf8_length(u, s.size(), i);
  if (len == 0) return static_cast<char32_t>(0xDC00 + u[i++]);
  char32_t cp = len == 1 ? u[i] : u[i] & (0xFFu >> (len + 1));  // the lead byte's value bits: 7, 5, 4 or 3
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (u[i + k] & 0x3Fu);
  i += len;
  return cp;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> words;
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    if (is_python_space(next_code_point(s, i))) {
      if (start != std::string_view::npos) words.push_back(s.substr(start, at - start)), start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = at;
    }
  }
  if (start != std::string_view::npos) words.push_back(s.substr(start));
  return words;
}

std::string join_words(const std::vector<std::string_view>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out.append(w);
  }
  return out;
}

namespace {

// s without its trailing whitespace (Python's s.rstrip()).
std::string_view rstrip(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();)
    if (!is_python_space(next_code_point(s, i))) end = i;
  return s.substr(0, end);
}

// Python's s.replace(from, to): every non-overlapping occurrence, left to right, in one pass.
std::string replace_all(const std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t at; (at = s.find(from, i)) != std::string::npos; i = at + from.size()) out.append(s, i, at - i).append(to);
  return out.append(s, i);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// 13a's rule 1 class [{-~[-` -&(-+:-@/]: { | } ~, [ \ ] ^ _ `, space ! " # $ % &, ( ) * +, : ; < = > ? @, /.
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// One left-to-right pass of a two-character rule: where match(t[i], t[i+1]), emit emit(out, a, b) and
// continue after both characters (matches do not overlap, as in re.sub).
template <class Match, class Emit>
std::string two_char_pass(const std::string& t, Match match, Emit emit) {
  std::string out;
  out.reserve(t.size() + t.size() / 4);
  size_t i = 0;
  while (i < t.size()) {
    if (i + 1 < t.size() && match(t[i], t[i + 1])) {
      emit(out, t[i], t[i + 1]);
      i += 2;
    } else {
      out += t[i++];
    }
  }
  return out;
}

// ---- BLEU ---------------------------------------------------------------------------------------------

// The n-grams of a 13a-tokenized line, per order: n-gram = the substring spanning its words (words are
// separated by single spaces, so equal substrings are equal n-grams). Views into the line.
struct WordNgrams {
  int64_t length = 0;  // words
  std::array<std::unordered_map<std::string_view, int64_t>, BleuStats::kOrder> counts;

  explicit WordNgrams(std::string_view tokenized) {
    std::vector<size_t> begin, end;  // word boundaries in `tokenized`
    for (size_t i = 0; i < tokenized.size();) {
      size_t j = tokenized.find(' ', i);
      if (j == std::string_view::npos) j = tokenized.size();
      begin.push_back(i), end.push_back(j);
      i = j + 1;
    }
    length = static_cast<int64_t>(begin.size());
    for (int n = 1; n <= BleuStats::kOrder; ++n)
      for (size_t i = 0; i + static_cast<size_t>(n) <= begin.size(); ++i)
        ++counts[static_cast<size_t>(n - 1)][tokenized.substr(begin[i], end[i + static_cast<size_t>(n) - 1] - begin[i])];
  }
};

// ---- chrF ---------------------------------------------------------------------------------------------

// The character n-grams of a text with its whitespace removed, per order; views into `chars`.
struct CharNgrams {
  std::u32string chars;
  std::array<std::unordered_map<std::u32string_view, int64_t>, ChrfStats::kOrder> counts;

  explicit CharNgrams(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
      const char32_t c = next_code_point(text, i);
      if (!is_python_space(c)) chars += c;
    }
    const std::u32string_view v(chars);
    for (int n = 1; n <= ChrfStats::kOrder; ++n)
      for (size_t i = 0; i + static_cast<size_t>(n) <= v.size(); ++i) ++counts[static_cast<size_t>(n - 1)][v.substr(i, static_cast<size_t>(n))];
  }
  CharNgrams(const CharNgrams&) = delete;  // the maps view `chars`
  CharNgrams& operator=(const CharNgrams&) = delete;
};

// [hyp_n, ref_n, match_n] of one hypothesis against one reference; hyp_n is 0 where the reference has no
// n-gram of that order.
ChrfStats chrf_match(const CharNgrams& h, const CharNgrams& r) {
  ChrfStats s;
  for (size_t k = 0; k < static_cast<size_t>(ChrfStats::kOrder); ++k) {
    int64_t hyp = 0, match = 0, ref = 0;
    for (const auto& [g, c] : h.counts[k]) {
      hyp += c;
      if (const auto it = r.counts[k].find(g); it != r.counts[k].end()) match += std::min(c, it->second);
    }
    for (const auto& [g, c] : r.counts[k]) ref += c;
    s.hyp[k] = r.counts[k].empty() ? 0 : hyp;
    s.ref[k] = ref;
    s.match[k] = match;
  }
  return s;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  std::string s(line);
  s = replace_all(s, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = replace_all(s, "&quot;", "\"");
    s = replace_all(s, "&amp;", "&");
    s = replace_all(s, "&lt;", "<");
    s = replace_all(s, "&gt;", ">");
  }
  std::string t;
  t.reserve(2 * s.size() + 2);
  t += ' ';
  for (char c : s) {
    if (is_13a_symbol(c)) t += ' ', t += c, t += ' ';
    else t += c;
  }
  t += ' ';
  const auto is_stop = [](char c) { return c == '.' || c == ','; };
  t = two_char_pass(t, [&](char a, char b) { return !is_digit(a) && is_stop(b); },
                    [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  t = two_char_pass(t, [&](char a, char b) { return is_stop(a) && !is_digit(b); },
                    [](std::string& o, char a, char b) { o += ' ', o += a, o += ' ', o += b; });
  t = two_char_pass(t, [](char a, char b) { return is_digit(a) && b == '-'; },
                    [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  return join_words(split_words(t));
}

void BleuStats::add(std::string_view hypothesis, const std::vector<std::string>& references) {
  if (references.empty()) throw std::invalid_argument("BLEU: a hypothesis needs at least one reference");
  std::vector<std::string> ref_tok;  // kept alive: ref_max views into them
  ref_tok.reserve(references.size());
  for (const auto& r : references) ref_tok.push_back(tokenize_13a(rstrip(r)));
  std::array<std::unordered_map<std::string_view, int64_t>, kOrder> ref_max;  // max count over references
  std::vector<int64_t> ref_lens;
  for (const auto& r : ref_tok) {
    const WordNgrams g(r);
    ref_lens.push_back(g.length);
    for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k)
      for (const auto& [ng, c] : g.counts[k]) {
        int64_t& m = ref_max[k][ng];
        m = std::max(m, c);
      }
  }
  const std::string hyp_tok = tokenize_13a(rstrip(hypothesis));
  const WordNgrams h(hyp_tok);
  int64_t closest = -1;  // ties → the shorter reference
  for (int64_t len : ref_lens)
    if (closest < 0 || std::abs(h.length - len) < std::abs(h.length - closest) ||
        (std::abs(h.length - len) == std::abs(h.length - closest) && len < closest))
      closest = len;
  hyp_len += h.length;
  ref_len += closest;
  for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k)
    for (const auto& [ng, c] : h.counts[k]) {
      totals[k] += c;
      if (const auto it = ref_max[k].find(ng); it != ref_max[k].end()) matches[k] += std::min(c, it->second);
    }
}

BleuStats& BleuStats::operator+=(const BleuStats& o) {
  hyp_len += o.hyp_len;
  ref_len += o.ref_len;
  for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k) matches[k] += o.matches[k], totals[k] += o.totals[k];
  return *this;
}

// The operations follow sacreBLEU's compute_bleu in order (precisions in percent, logs summed from n = 1),
// so that the double results agree to the last bits.
double BleuStats::score() const {
  if (std::all_of(matches.begin(), matches.end(), [](int64_t m) { return m == 0; })) return 0.0;
  if (std::any_of(totals.begin(), totals.end(), [](int64_t t) { return t == 0; })) return 0.0;
  const double bp = hyp_len < ref_len ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(hyp_len)) : 1.0;
  double smooth = 1.0, log_sum = 0.0;
  for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k) {
    double p;
    if (matches[k] == 0) {
      smooth *= 2;
      p = 100.0 / (smooth * static_cast<double>(totals[k]));
    } else {
      p = 100.0 * static_cast<double>(matches[k]) / static_cast<double>(totals[k]);
    }
    log_sum += std::log(p);
  }
  return bp * std::exp(log_sum / kOrder);
}

void ChrfStats::add(std::string_view hypothesis, const std::vector<std::string>& references) {
  if (references.empty()) throw std::invalid_argument("chrF: a hypothesis needs at least one reference");
  const CharNgrams h(hypothesis);
  ChrfStats best;
  double best_f = -1.0;
  for (const auto& r : references) {
    const ChrfStats s = chrf_match(h, CharNgrams(r));
    const double f = s.score();
    if (f > best_f) best_f = f, best = s;
  }
  *this += best;
}

ChrfStats& ChrfStats::operator+=(const ChrfStats& o) {
  for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k) hyp[k] += o.hyp[k], ref[k] += o.ref[k], match[k] += o.match[k];
  return *this;
}

// In sacreBLEU's order of operations (_compute_f_score without eps_smoothing).
double ChrfStats::score() const {
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (size_t k = 0; k < static_cast<size_t>(kOrder); ++k) {
    if (hyp[k] > 0 && ref[k] > 0) {
      avg_prec += static_cast<double>(match[k]) / static_cast<double>(hyp[k]);
      avg_rec += static_cast<double>(match[k]) / static_cast<double>(ref[k]);
      ++effective;
    }
  }
  if (effective == 0) return 0.0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0.0;
  const double factor = kBeta * kBeta;
  double f = (1 + factor) * avg_prec * avg_rec;
  f /= factor * avg_prec + avg_rec;
  return 100 * f;
}

namespace {
template <class Stats>
double corpus_score(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references,
                    const char* what) {
  if (hypotheses.size() != references.size())
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(hypotheses.size()) + " hypotheses but " +
                                std::to_string(references.size()) + " reference lists");
  Stats s;
  for (size_t i = 0; i < hypotheses.size(); ++i) s.add(hypotheses[i], references[i]);
  return s.score();
}
}  // namespace

double corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references) {
  return corpus_score<BleuStats>(hypotheses, references, "corpus_bleu");
}
double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references) {
  return corpus_score<ChrfStats>(hypotheses, references, "corpus_chrf");
}

}  // namespace tfm::train
