// Internal state of hp::io::Tokenizer: the `tokenizers` pipeline as objects built from the JSON
// (normalizer → pre-tokenizer → model → post-processor on encode, decoder on decode), shared by
// the loaders (tokenizer_load.cpp, tokenizer_tiktoken.cpp) and the encoder (tokenizer.cpp).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hp/io/bpe.h"
#include "hp/io/regex.h"

namespace hp::io {
class Json;
}

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

// Text between added tokens on its way through pre-tokenization. `at_start`: the piece begins at
// offset 0 of the input (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (and transforms, e.g. ByteLevel's byte → char map).
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // The `tokenizers` decode_chain: token strings in, strings out (joined by the caller).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// tokenizer.json components; unknown types and bad fields fail naming the file, key and value.
std::unique_ptr<Normalizer> load_normalizer(const Json& node);
std::unique_ptr<PreTokenizer> load_pre_tokenizer(const Json& node);
std::unique_ptr<Decoder> load_decoder(const Json& node);
// The "pattern" of Replace / Split: {"String": s} or {"Regex": r}.
Regex load_pattern(const Json& node);
// Built-in components (tiktoken directories).
std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern);
std::unique_ptr<Decoder> make_byte_level_decoder();

// One item of a TemplateProcessing "single" template: fixed special ids, or the encoded text.
struct TemplateItem {
  bool is_sequence;
  std::vector<int32_t> ids;
};

struct TokenizerImpl {
  std::string source;
  std::unique_ptr<Model> model;
  std::vector<AddedToken> added;  // never resized after the matchers point into it
  std::unordered_map<int32_t, size_t> added_by_id;
  TokenMap added_by_content;
  AddedMatcher raw_matcher, normalized_matcher;
  std::unique_ptr<Normalizer> normalizer;       // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // null: the whole piece is one word
  std::unique_ptr<Decoder> decoder;             // null: tokens joined by spaces
  std::optional<std::vector<TemplateItem>> single_template;
};

std::shared_ptr<const TokenizerImpl> load_tokenizer(std::string_view json_text, std::string source);
// A tiktoken directory (Kimi-K2): tiktoken.model plus tokenizer_config.json.
std::shared_ptr<const TokenizerImpl> load_tiktoken_dir(const std::string& dir);
// Fills added_by_id / added_by_content and the two matchers from `added`.
void index_added_tokens(TokenizerImpl& t);

// GPT-2's reversible byte ↔ code point map: printable bytes map to themselves, the rest to
// U+0100 and up, so every byte string becomes printable text the vocabulary can hold.
char32_t byte_to_char(uint8_t b);
// The byte for a mapped code point, or -1.
int byte_from_char(char32_t c);
// Appends the mapped form of raw bytes.
void append_byte_level(std::string& out, std::string_view bytes);

}  // namespace hp::io::detail
