// The tokenizer's regex engine (Split patterns) and Unicode normalization on their own: the
// constructs real patterns use, leftmost-first backtracking, rejected syntax with a message naming
// the offset and pattern, and NFC / NFKC / Lowercase results that follow the `tokenizers`
// package's older Unicode tables (values recorded from tokenizers 0.23) rather than today's.
#include <gtest/gtest.h>

#include "hp/core/error.h"
#include "hp/io/regex.h"
#include "hp/io/unicode.h"
#include "io/io_test_util.h"

namespace hp::io::detail {
namespace {

// The matches of `pattern` in `text`, as UTF-8 strings.
std::vector<std::string> matches(std::string_view pattern, std::string_view text) {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  decode_utf8(text, cps, &offsets);
  std::vector<std::pair<size_t, size_t>> ranges;
  Regex(pattern).find_all(cps.data(), cps.size(), ranges);
  std::vector<std::string> out;
  for (auto [b, e] : ranges) out.emplace_back(text.substr(offsets[b], offsets[e] - offsets[b]));
  return out;
}

using V = std::vector<std::string>;

TEST(TokenizerRegex, TokenizerPatterns) {
  const char* gpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(matches(gpt2, "Hello  world's 123!!\n"),
            (V{"Hello", " ", " world", "'s", " 123", "!!", "\n"}));
  // Kimi: Han runs apart, case-aware letter runs, class intersection with a negated class.
  const char* kimi =
      R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*)"
      R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|\s+)";
  EXPECT_EQ(matches(kimi, "中文abc HelloWorld's 12345"),
            (V{"中文", "abc", " Hello", "World's", " ", "123", "45"}));
  EXPECT_EQ(matches(R"([\p{L}&&[^a-z]]+)", "abcDEFghi"), (V{"DEF"}));
  EXPECT_EQ(matches(R"([^\p{L}&&[^\p{Lu}]]+)", "abcDEF1"), (V{"DEF1"}));
  // (?i:...) folds ASCII and the two characters that fold to ASCII letters.
  EXPECT_EQ(matches(R"((?i:'s|'ll))", "'S 'Ll 'ſ 'x"), (V{"'S", "'Ll", "'ſ"}));
  EXPECT_EQ(matches(R"(x(?i)ab)", "xAB XAB"), (V{"xAB"}));
}

TEST(TokenizerRegex, Backtracking) {
  EXPECT_EQ(matches(R"(\s+(?!\S)|\s+)", "a   b  "), (V{"  ", " ", "  "}));
  EXPECT_EQ(matches(R"(\s*[\r\n]+)", " \n \n  x"), (V{" \n \n"}));
  EXPECT_EQ(matches(R"((?:ab){2,3})", "abababab"), (V{"ababab"}));
  EXPECT_EQ(matches(R"(a+?)", "aaa"), (V{"a", "a", "a"}));
  EXPECT_EQ(matches(R"(a{2}|b{1,}c?)", "aaabbbc"), (V{"aa", "bbbc"}));
  EXPECT_EQ(matches(R"(\p{N}{1,3})", "1234567"), (V{"123", "456", "7"}));
  // An empty iteration ends a loop instead of spinning.
  EXPECT_EQ(matches(R"((?:a*)*b)", "aaab"), (V{"aaab"}));
  EXPECT_EQ(matches(R"([a\-z]+|\x41|\u00e9|\.)", "a-zAé."), (V{"a-z", "A", "é", "."}));
  EXPECT_EQ(matches(R"(\Aab|c\z)", "abcabc"), (V{"ab", "c"}));
  EXPECT_EQ(matches("a{x}", "a{x}"), (V{"a{x}"}));  // not a repeat: literal braces
  EXPECT_EQ(regex_escape("a.b*(c)"), "a\\.b\\*\\(c\\)");
  // \w as Oniguruma has it: ½ and Ⓐ are word characters, ZWJ and ① are not.
  EXPECT_EQ(matches(R"(\w+)", "a½Ⓐ\u200d①_x"), (V{"a½Ⓐ", "_x"}));
}

TEST(TokenizerRegex, RejectsUnsupportedSyntax) {
  EXPECT_THROW_MSG(Regex("(?<=a)b"), ValueError, "look-behind", "(?<=a)b");
  EXPECT_THROW_MSG(Regex(R"(\p{Greek})"), ValueError, "unsupported property", "Greek");
  EXPECT_THROW_MSG(Regex("a{3,1}"), ValueError, "m < n");
  EXPECT_THROW_MSG(Regex("(ab"), ValueError, "missing ')'", "offset 3");
  EXPECT_THROW_MSG(Regex("ab)"), ValueError, "unmatched ')'");
  EXPECT_THROW_MSG(Regex("[ab"), ValueError, "missing ']'");
  EXPECT_THROW_MSG(Regex("a++"), ValueError, "possessive");
  EXPECT_THROW_MSG(Regex("^a"), ValueError, "line anchors");
  EXPECT_THROW_MSG(Regex(R"(\1)"), ValueError, "unsupported escape \\1");
  EXPECT_THROW_MSG(Regex("*a"), ValueError, "nothing to repeat");
}

std::string u8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// Values from the tokenizers package; Python 3.11's unicodedata (Unicode 14) differs on the first
// two (U+0898 is a mark since Unicode 14, U+11938 decomposes since 13, both unknown there).
TEST(TokenizerUnicode, NormalizersMatchTokenizersPackage) {
  EXPECT_EQ(nfc(u8(U"a\u0898\u0323")), u8(U"a\u0898\u0323"));
  EXPECT_EQ(nfc(u8(U"\U00011935\U00011930")), u8(U"\U00011935\U00011930"));
  EXPECT_EQ(nfc(u8(U"x\u0301\u0323")), u8(U"x\u0323\u0301"));
  EXPECT_EQ(nfc(u8(U"A\u030a \u212b")), u8(U"\u00c5 \u00c5"));
  EXPECT_EQ(normalize_unicode(u8(U"\u00bd\ufb01\u2460 \u212b"), true, true),
            u8(U"1\u20442fi1 \u00c5"));
  EXPECT_EQ(normalize_unicode(u8(U"\u00c5"), false, false), u8(U"A\u030a"));
  EXPECT_EQ(lowercase(u8(U"\u0130STANBUL \u03a3\u0391 A\u030a")),
            u8(U"i\u0307stanbul \u03c3\u03b1 a\u030a"));
  EXPECT_TRUE(char_props(U'中') & kPropHan);
  EXPECT_TRUE(char_props(U'\u3002') & kPropP);  // CJK full stop: punctuation, not Han
  EXPECT_FALSE(char_props(U'\u3002') & kPropHan);
}

}  // namespace
}  // namespace hp::io::detail
