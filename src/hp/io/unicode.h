// UTF-8 and Unicode character classes for the tokenizer (internal to io/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hp::io::detail {

// Coarse Unicode classes the pre-tokenizer regexes need; see tools/gen_unicode_tables.py.
enum class CharClass : uint8_t {
  other,
  letter,         // L*
  digit,          // Nd
  letter_number,  // Nl
  other_number,   // No
  mark,           // M*
  connector,      // Pc
  space,          // White_Space
  alpha_symbol,   // So with Other_Alphabetic (circled letters): only \w cares
};

CharClass char_class(char32_t c);

inline bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return char_class(c) == CharClass::letter;
}
inline bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  CharClass k = char_class(c);
  return k == CharClass::digit || k == CharClass::letter_number || k == CharClass::other_number;
}
// Oniguruma / Rust \s: the White_Space property.
inline bool is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return char_class(c) == CharClass::space;
}
// Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control.
bool is_word(char32_t c);

// Decodes UTF-8 into code points; `offsets` (if given) receives the byte offset of each code point
// plus a final entry equal to s.size(). Returns the byte offset of the first invalid sequence, or
// npos when `s` is valid UTF-8 (overlong forms, surrogates and values > U+10FFFF are invalid).
size_t decode_utf8(std::string_view s, std::vector<char32_t>& out,
                   std::vector<uint32_t>* offsets = nullptr);
// Byte offset of the first invalid sequence, or npos.
size_t find_invalid_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
// Unicode Normalization Form C of valid UTF-8 text (tables: tools/gen_unicode_tables.py).
std::string nfc(std::string_view text);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace hp::io::detail
