// A small backtracking regex engine over code points, for the Split patterns of tokenizer.json
// and tiktoken (internal to io/).
//
// The patterns of real tokenizers (GPT-2, Llama-3, Qwen2, DeepSeek-V3, Kimi) are Oniguruma / Rust
// regexes using \p{L}, \p{Lu}, \p{N}, \p{M}, \p{P}, \p{S}, \p{Han}, \s, class intersection
// (`[\p{L}&&[^\p{Han}]]`), `(?i:'s|'t)`, `\s+(?!\S)`, counted repeats and alternations; std::regex
// has no Unicode classes. Supported syntax:
//   literals and escapes (\r \n \t \f \v \e \0 \xHH \x{H..} \uHHHH, escaped punctuation), `.`,
//   classes [...] with ranges, negation, nesting and `&&`, \s \S \d \D \w \W \p{..} \P{..}
//   (general categories L Lu Ll Lt Lm Lo M N Nd Nl No P Pc S, Han, and their long names),
//   groups (..) (?:..) (?i:..) (?i) (?-i), look-ahead (?=..) (?!..), anchors ^ $ \A \z,
//   quantifiers * + ? {n} {n,} {n,m} and their lazy forms.
// Anything else (look-behind, back-references, possessive quantifiers, other properties) is
// rejected when compiling, so a pattern never silently matches differently from the reference.
// Matching is leftmost-first with backtracking, as in Oniguruma and Rust's regex.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hp::io::detail {

struct RegexProgram;

class Regex {
 public:
  // Throws ValueError "[regex] <what> at offset N of <pattern>" for unsupported or bad syntax.
  explicit Regex(std::string_view pattern);

  // Appends the [begin, end) code point ranges of the successive non-overlapping matches in
  // cps[0, n) (empty matches are skipped), as find_iter does.
  void find_all(const char32_t* cps, size_t n, std::vector<std::pair<size_t, size_t>>& out) const;

  // Replaces every match (find_all's) in UTF-8 `text` by `with`; false (text untouched) when
  // nothing matched. The Replace normalizer and decoder of tokenizer.json.
  bool replace_all(std::string& text, std::string_view with) const;

  const std::string& pattern() const;

 private:
  std::shared_ptr<const RegexProgram> prog_;
};

// `text` with every regex metacharacter escaped (a String split pattern as a Regex).
std::string regex_escape(std::string_view text);

}  // namespace hp::io::detail
