// UTF-8 and Unicode character classes for the tokenizer (internal to io/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hp::io::detail {

// Unicode properties the tokenizer regexes and normalizers need, as read off the `tokenizers`
// package's own regex engine by tools/gen_unicode_tables.py (so \p{L} means what it means there).
enum CharProp : uint16_t {
  kPropLu = 1 << 0,
  kPropLl = 1 << 1,
  kPropLt = 1 << 2,
  kPropLm = 1 << 3,
  kPropLo = 1 << 4,
  kPropM = 1 << 5,
  kPropNd = 1 << 6,
  kPropNl = 1 << 7,
  kPropNo = 1 << 8,
  kPropP = 1 << 9,
  kPropS = 1 << 10,
  kPropSpace = 1 << 11,     // White_Space (\s)
  kPropHan = 1 << 12,       // Script=Han
  kPropPc = 1 << 13,        // connector punctuation (also in kPropP)
  kPropAlphaSym = 1 << 14,  // So with Other_Alphabetic (circled letters): only Rust's \w cares
};
constexpr uint16_t kPropL = kPropLu | kPropLl | kPropLt | kPropLm | kPropLo;
constexpr uint16_t kPropN = kPropNd | kPropNl | kPropNo;

// Property bits of a code point; ASCII is a table lookup.
uint16_t char_props(char32_t c);

inline bool is_letter(char32_t c) {
  return char_props(c) & kPropL;
}
inline bool is_number(char32_t c) {
  return char_props(c) & kPropN;
}
// Oniguruma / Rust \s: the White_Space property.
inline bool is_space(char32_t c) {
  return char_props(c) & kPropSpace;
}
// Rust regex \w (added tokens' single_word): Alphabetic, M, Nd, Pc, Join_Control.
bool is_word(char32_t c);

// Decodes UTF-8 into code points; `offsets` (if given) receives the byte offset of each code point
// plus a final entry equal to s.size(). Returns the byte offset of the first invalid sequence, or
// npos when `s` is valid UTF-8 (overlong forms, surrogates and values > U+10FFFF are invalid).
size_t decode_utf8(std::string_view s, std::vector<char32_t>& out,
                   std::vector<uint32_t>* offsets = nullptr);
// Byte offset of the first invalid sequence, or npos.
size_t find_invalid_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
// Unicode normalization forms of valid UTF-8 text, with the tables of the `tokenizers` package
// (tools/gen_unicode_tables.py): canonical (NFC/NFD) or compatibility (NFKC/NFKD) decomposition,
// then canonical composition when `compose`.
std::string normalize_unicode(std::string_view text, bool compat, bool compose);
inline std::string nfc(std::string_view text) {
  return normalize_unicode(text, false, true);
}
// The `tokenizers` Lowercase normalizer (Rust's char::to_lowercase, one- or multi-char results).
std::string lowercase(std::string_view text);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace hp::io::detail
