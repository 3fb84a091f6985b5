// Unicode normalization (UAX #15: decomposition, canonical ordering, canonical composition) and
// lowercasing, with the tables of the `tokenizers` package (tools/gen_unicode_tables.py): used by
// the NFC / NFD / NFKC / NFKD / Lowercase normalizers of tokenizer.json.
#include <algorithm>
#include <iterator>
#include <unordered_map>

#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;  // second == 0: a singleton
  bool composes;
};
// A code point's replacement: chars[offset, offset + length) of the table's char array.
struct Mapping {
  char32_t cp;
  uint32_t offset, length;
};

#include "hp/io/unicode_norm.inc"

const Mapping* find_mapping(const Mapping* begin, const Mapping* end, char32_t c) {
  auto it = std::lower_bound(begin, end, c, [](const Mapping& m, char32_t v) { return m.cp < v; });
  return it != end && it->cp == c ? it : nullptr;
}

// Hangul syllables decompose and compose algorithmically.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t ccc(char32_t c) {
  if (c < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kCccRanges), std::end(kCccRanges), c,
                             [](char32_t v, const CccRange& r) { return v < r.first; });
  if (it == std::begin(kCccRanges)) return 0;
  --it;
  return c <= it->last ? it->ccc : 0;
}

const Decomposition* find_decomposition(char32_t c) {
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                             [](const Decomposition& d, char32_t v) { return d.cp < v; });
  return it != std::end(kDecompositions) && it->cp == c ? &*it : nullptr;
}

void decompose(char32_t c, bool compat, std::vector<char32_t>& out) {
  if (compat && c >= 0xA0) {
    // Compatibility decompositions are stored fully expanded.
    if (const Mapping* m = find_mapping(std::begin(kCompat), std::end(kCompat), c)) {
      out.insert(out.end(), kCompatChars + m->offset, kCompatChars + m->offset + m->length);
      return;
    }
  }
  if (c >= kSBase && c < kSBase + kSCount) {
    char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = c < 0xC0 ? nullptr : find_decomposition(c);
  if (!d) {
    out.push_back(c);
    return;
  }
  decompose(d->first, compat, out);
  if (d->second) decompose(d->second, compat, out);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  static const std::unordered_map<uint64_t, char32_t> pairs = [] {
    std::unordered_map<uint64_t, char32_t> m;
    for (const Decomposition& d : kDecompositions)
      if (d.composes) m.emplace((static_cast<uint64_t>(d.first) << 32) | d.second, d.cp);
    return m;
  }();
  auto it = pairs.find((static_cast<uint64_t>(a) << 32) | b);
  return it == pairs.end() ? 0 : it->second;
}

}  // namespace

std::string normalize_unicode(std::string_view text, bool compat, bool compose_marks) {
  // Code points below U+00A0 (below U+00C0 for NFD, U+0300 for NFC) are stable starters that never
  // compose with what precedes them (every second element of a composition is >= U+0300), so
  // most text needs no work.
  std::vector<char32_t> cps;
  decode_utf8(text, cps);
  const char32_t stable = compat ? 0xA0 : compose_marks ? 0x300 : 0xC0;
  if (std::all_of(cps.begin(), cps.end(), [&](char32_t c) { return c < stable; }))
    return std::string(text);

  std::vector<char32_t> buf;
  buf.reserve(cps.size() + 8);
  for (char32_t c : cps) decompose(c, compat, buf);
  // Canonical ordering: stable-sort each run of non-starters by combining class.
  for (size_t i = 0; i < buf.size();) {
    if (ccc(buf[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buf.size() && ccc(buf[j]) != 0) ++j;
    std::stable_sort(buf.begin() + i, buf.begin() + j,
                     [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  if (!compose_marks) {
    std::string out;
    for (char32_t c : buf) append_utf8(out, c);
    return out;
  }
  // Canonical composition: a mark composes with the last starter unless blocked by a character
  // of equal or higher class in between.
  size_t starter = 0, write = 1;
  int last_cc = buf.empty() ? 0 : (ccc(buf[0]) == 0 ? 0 : 256);
  for (size_t read = 1; read < buf.size(); ++read) {
    char32_t c = buf[read];
    int cc = ccc(c);
    if (last_cc < cc || last_cc == 0) {
      if (char32_t composite = compose(buf[starter], c)) {
        buf[starter] = composite;
        continue;
      }
    }
    if (cc == 0) starter = write;
    last_cc = cc;
    buf[write++] = c;
  }
  buf.resize(std::min(write, buf.size()));
  std::string out;
  out.reserve(text.size());
  for (char32_t c : buf) append_utf8(out, c);
  return out;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> cps;
  decode_utf8(text, cps);
  for (char32_t c : cps) {
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (const Mapping* m = find_mapping(std::begin(kLower), std::end(kLower), c)) {
      for (uint32_t i = 0; i < m->length; ++i) append_utf8(out, kLowerChars[m->offset + i]);
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

}  // namespace hp::io::detail
