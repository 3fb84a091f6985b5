// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama-3, Qwen2 families).
//
// Supported pipeline, which covers those families: no normalizer; pre_tokenizer ByteLevel or
// Sequence[Split(Regex), ByteLevel] with the GPT-2, Llama-3 or Qwen2 regex; model BPE (vocab,
// merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token); post_processor ByteLevel,
// TemplateProcessing or a Sequence of them; decoder ByteLevel. added_tokens (special or not, with
// lstrip / rstrip / single_word) are matched before pre-tokenization. Anything else is rejected at
// load time with an error naming the file and key, rather than tokenizing differently from Python.
// Encodings are identical to the `tokenizers` library (tests/io/fixtures).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hp::io {

namespace detail {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Loads tokenizer.json; errors (missing file, bad JSON, unsupported component) name the file
  // and the key.
  static Tokenizer from_file(const std::string& path);
  // `source` names the text in errors.
  static Tokenizer from_json(std::string_view json_text, std::string source);

  // Text (valid UTF-8, else ValueError) → ids. Added/special tokens written in the text are always
  // recognized; `add_special_tokens` applies the post-processor template (e.g. Llama-3's BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids → text; ids without a token are skipped and invalid UTF-8 becomes U+FFFD, as in Python.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string (byte-level alphabet for model tokens), or nullopt.
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::TokenizerImpl> impl_;
};

}  // namespace hp::io
