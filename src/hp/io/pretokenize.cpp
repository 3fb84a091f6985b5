#include "hp/io/pretokenize.h"

#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Per-code-point class, computed once per piece: the matchers test each position several times.
enum Cls : unsigned char { kLetter, kNumber, kSpace, kOther };

struct Text {
  const char32_t* cp;
  std::vector<Cls> cls;
  size_t n;

  bool is(size_t i, Cls c) const { return i < n && cls[i] == c; }
  bool newline(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
  // End of the run of class `c` starting at i.
  size_t run(size_t i, Cls c) const {
    while (i < n && cls[i] == c) ++i;
    return i;
  }
};

char32_t lower_ascii(char32_t c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

// 's 't 're 've 'm 'll 'd at i; returns the match length or 0.
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.n) return 0;
  auto at = [&](size_t k) { return ignore_case ? lower_ascii(t.cp[k]) : t.cp[k]; };
  char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.n) return 0;
  char32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, leaving its last character to the next piece when a
// non-space follows (so " world" keeps its space).
size_t trailing_space(const Text& t, size_t i) {
  size_t j = t.run(i, kSpace);
  if (j == i) return 0;
  if (j == t.n || j - 1 == i) return j - i;
  return j - 1 - i;
}

size_t match_gpt2(const Text& t, size_t i) {
  if (size_t k = contraction(t, i, false)) return k;
  // " ?X+" for X in L, N, other: the optional space only helps if an X follows it.
  size_t s = t.cp[i] == ' ' ? i + 1 : i;
  for (Cls c : {kLetter, kNumber, kOther})
    if (t.is(s, c)) return t.run(s, c) - i;
  return trailing_space(t, i);
}

size_t match_llama(const Text& t, size_t i, size_t max_digits) {
  if (size_t k = contraction(t, i, true)) return k;
  Cls c = t.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c != kLetter && c != kNumber && !t.newline(i) && t.is(i + 1, kLetter))
    return t.run(i + 1, kLetter) - i;
  if (c == kLetter) return t.run(i, kLetter) - i;
  // \p{N}{1,max}
  if (c == kNumber) {
    size_t j = i;
    while (j < t.n && j - i < max_digits && t.cls[j] == kNumber) ++j;
    return j - i;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t s = t.cp[i] == ' ' ? i + 1 : i;
  if (t.is(s, kOther)) {
    size_t j = t.run(s, kOther);
    while (t.newline(j)) ++j;
    return j - i;
  }
  if (c != kSpace) return 0;
  // \s*[\r\n]+: backtracking ends the match after the last newline of the whitespace run.
  size_t j = t.run(i, kSpace);
  for (size_t k = j; k > i; --k)
    if (t.newline(k - 1)) return k - i;
  return trailing_space(t, i);
}

}  // namespace

std::optional<SplitPattern> recognize_split_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::gpt2;
  if (regex == kLlama3Regex) return SplitPattern::llama3;
  if (regex == kQwen2Regex) return SplitPattern::qwen2;
  return std::nullopt;
}

void split_isolated(SplitPattern pattern, const char32_t* cps, size_t n,
                    std::vector<std::pair<size_t, size_t>>& out) {
  Text t{cps, std::vector<Cls>(n), n};
  for (size_t i = 0; i < n; ++i) {
    char32_t c = cps[i];
    t.cls[i] = is_letter(c) ? kLetter : is_number(c) ? kNumber : is_space(c) ? kSpace : kOther;
  }
  size_t gap = 0, i = 0;
  while (i < n) {
    size_t len = pattern == SplitPattern::gpt2     ? match_gpt2(t, i)
                 : pattern == SplitPattern::llama3 ? match_llama(t, i, 3)
                                                   : match_llama(t, i, 1);
    if (len == 0) {
      ++i;
      continue;
    }
    if (gap < i) out.emplace_back(gap, i);
    out.emplace_back(i, i + len);
    i += len;
    gap = i;
  }
  if (gap < n) out.emplace_back(gap, n);
}

}  // namespace hp::io::detail
