// Internal state of hp::io::Tokenizer, shared by the loader (tokenizer_load.cpp) and the
// encoder/decoder (tokenizer.cpp).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hp/io/bpe.h"
#include "hp/io/pretokenize.h"

namespace hp::io::detail {

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  // Matched on normalized text (second pass) rather than on the raw input (first pass).
  bool normalized = false;
  bool special = false;
};

// Added tokens of one pass, indexed for leftmost-longest matching.
struct AddedMatcher {
  // First byte → tokens starting with it, longest first.
  std::array<std::vector<const AddedToken*>, 256> by_first_byte;
  bool empty = true;
};

struct PreTokenizeStep {
  enum Kind { split, byte_level } kind;
  SplitPattern pattern = SplitPattern::gpt2;
  // ByteLevel options.
  bool add_prefix_space = false;
  bool use_regex = false;
};

// One item of a TemplateProcessing "single" template: fixed special ids, or the encoded text.
struct TemplateItem {
  bool is_sequence;
  std::vector<int32_t> ids;
};

struct TokenizerImpl {
  std::string source;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added;  // never resized after the matchers point into it
  std::unordered_map<int32_t, size_t> added_by_id;
  TokenMap added_by_content;
  AddedMatcher raw_matcher, normalized_matcher;
  bool nfc = false;  // normalizer: NFC (else none)
  std::vector<PreTokenizeStep> pre_tokenize;
  bool byte_level = false;  // words are byte-level mapped before BPE
  std::optional<std::vector<TemplateItem>> single_template;
  bool byte_level_decoder = false;
};

std::shared_ptr<const TokenizerImpl> load_tokenizer(std::string_view json_text, std::string source);

// GPT-2's reversible byte ↔ code point map: printable bytes map to themselves, the rest to
// U+0100 and up, so every byte string becomes printable text the vocabulary can hold.
char32_t byte_to_char(uint8_t b);
// The byte for a mapped code point, or -1.
int byte_from_char(char32_t c);

}  // namespace hp::io::detail
