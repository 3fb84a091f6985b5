// Hand-written equivalents of the Hugging Face pre-tokenizer regexes (internal to io/).
//
// tokenizer.json files carry these regexes as Oniguruma patterns using \p{L}, \p{N} and
// look-ahead, which std::regex cannot express; each known pattern is recognized by its exact text
// and run by a matcher that reproduces the backtracking engine's leftmost-first choice.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace hp::io::detail {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  llama3,
  // As llama3 with \p{N} (single digits) instead of \p{N}{1,3}.
  qwen2,
};

// The pattern whose regex text is `regex`, or nullopt for any other regex.
std::optional<SplitPattern> recognize_split_regex(std::string_view regex);

// Splits code points [0, n) with "Isolated" behaviour: every match and every stretch between
// matches becomes a piece. Appends [begin, end) code point ranges to `out`.
void split_isolated(SplitPattern pattern, const char32_t* cps, size_t n,
                    std::vector<std::pair<size_t, size_t>>& out);

}  // namespace hp::io::detail
