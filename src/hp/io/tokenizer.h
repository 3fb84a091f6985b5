// Text ↔ token ids as the Hugging Face `tokenizers` package (tokenizer.json) or tiktoken
// (Kimi-K2's tiktoken.model directory) computes them.
//
// tokenizer.json is run as data: normalizers (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace,
// Strip, ByteLevel, Sequence), pre-tokenizers (ByteLevel, Split with any supported regex and
// behavior, Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer,
// Sequence), model BPE (merges as "a b" or [a, b], byte_fallback, ignore_merges, unk_token,
// fuse_unk), decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence),
// post-processors (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence)
// and added tokens (special or not, with lstrip / rstrip / single_word / normalized) recognized
// inside text. Anything else is rejected at load time with an error naming the file, key and value
// rather than tokenizing differently. Unicode tables are those of the `tokenizers` package
// (tools/gen_unicode_tables.py); fixtures in tests/io/fixtures/tokenizers check ids against it.
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
  // Loads a tokenizer.json file, or a directory holding tokenizer.json or else tiktoken.model
  // (+ tokenizer_config.json); errors (missing file, bad JSON, unsupported component, malformed
  // tiktoken line) name the file and the key or line.
  static Tokenizer from_file(const std::string& path);
  // Whether `dir` holds a tokenizer from_file can load (tokenizer.json or tiktoken.model): how a
  // model directory is searched for its tokenizer.
  static bool in_dir(const std::string& dir);
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
