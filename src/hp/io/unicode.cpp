#include "hp/io/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace hp::io::detail {

namespace {

struct PropRange {
  char32_t first, last;
  uint16_t props;
};

constexpr PropRange kRanges[] = {
#include "hp/io/unicode_tables.inc"
};

// Decodes one sequence at p[0..n). Returns {length, code point} for a well-formed sequence
// (Unicode Table 3-7), or {-k, 0} where k >= 1 is the length of the maximal ill-formed prefix,
// which from_utf8_lossy replaces by a single U+FFFD.
std::pair<int, char32_t> decode_one(const unsigned char* p, size_t n) {
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {1, b0};
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return {-1, 0};
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return {-i, 0};
    unsigned char b = p[i];
    unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {-i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {len, cp};
}

uint16_t lookup_props(char32_t c) {
  auto it = std::upper_bound(std::begin(kRanges), std::end(kRanges), c,
                             [](char32_t v, const PropRange& r) { return v < r.first; });
  if (it == std::begin(kRanges)) return 0;
  --it;
  return c <= it->last ? it->props : 0;
}

}  // namespace

uint16_t char_props(char32_t c) {
  static const auto ascii = [] {
    std::array<uint16_t, 128> t{};
    for (char32_t i = 0; i < 128; ++i) t[i] = lookup_props(i);
    return t;
  }();
  return c < 128 ? ascii[c] : lookup_props(c);
}

bool is_word(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  return char_props(c) & (kPropL | kPropM | kPropNd | kPropNl | kPropPc | kPropAlphaSym);
}

size_t decode_utf8(std::string_view s, std::vector<char32_t>& out, std::vector<uint32_t>* offsets) {
  out.clear();
  if (offsets) offsets->clear();
  auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    auto [len, cp] = decode_one(p + i, s.size() - i);
    if (len < 0) return i;
    if (offsets) offsets->push_back(static_cast<uint32_t>(i));
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  if (offsets) offsets->push_back(static_cast<uint32_t>(s.size()));
  return std::string_view::npos;
}

size_t find_invalid_utf8(std::string_view s) {
  auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    int len = decode_one(p + i, s.size() - i).first;
    if (len < 0) return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    auto [len, cp] = decode_one(p + i, bytes.size() - i);
    if (len > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      append_utf8(out, 0xFFFD);
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

}  // namespace hp::io::detail
