// How a document's text becomes ids of the packed token stream: a Hugging Face tokenizer.json
// (byte-level BPE, without its post-processor template, so no BOS) or the bytes themselves, then
// one separator id after the document. TokenDataset (text) and prepare_dataset (hp data prepare)
// both encode through this, so a prepared dataset holds exactly the stream the trainer would have
// built from the same text.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hp/io/tokenizer.h"

namespace hp::data {

// Byte-level text: ids 0..255 are the bytes, 256 separates documents.
inline constexpr int32_t kByteSeparator = 256;
inline constexpr int64_t kByteVocab = 257;
// Separator tokens tried in order when no separator token is named.
inline constexpr const char* kAutoSeparatorTokens[] = {"<|endoftext|>", "</s>", "<|end_of_text|>",
                                                       "<|im_end|>", "<eos>"};

class DocumentEncoder {
 public:
  // tokenizer: a tokenizer.json path, "" = byte-level. separator_token: the token appended after
  // every document, "" = the first of kAutoSeparatorTokens the tokenizer has. Errors ("[data]
  // ..."): a tokenizer.json that fails to load (IoError carrying the io message), a separator
  // token it lacks or none of the automatic ones (ValueError), a separator token without a
  // tokenizer.json (ValueError: byte-level text always separates with id 256).
  DocumentEncoder(const std::string& tokenizer, const std::string& separator_token);

  bool byte_level() const { return !tokenizer_.has_value(); }
  const std::string& tokenizer_path() const { return tokenizer_path_; }
  // Tokenizer vocab (incl. added tokens); 257 byte-level.
  int64_t vocab_size() const { return vocab_size_; }
  int32_t separator_id() const { return separator_id_; }

  // Appends the ids of `text` as one document, without the separator. Byte-level accepts any
  // bytes; a tokenizer.json needs valid UTF-8 (ValueError otherwise). Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // Byte-level: invalid UTF-8 allowed, separator → "\n", ids outside [0, 257) → ValueError.
  // tokenizer.json: as io::Tokenizer::decode (unknown ids skipped).
  std::string decode(std::span<const int32_t> ids) const;
  // "tokenizer.json '<path>'" or "the byte-level vocabulary", for messages.
  std::string describe() const;

 private:
  std::string tokenizer_path_;
  std::optional<io::Tokenizer> tokenizer_;
  int64_t vocab_size_ = kByteVocab;
  int32_t separator_id_ = kByteSeparator;
};

}  // namespace hp::data
