// A training corpus as one packed token stream: doc0 SEP doc1 SEP ... (the trainer's data source).
//
// Sources: one file or a directory (every regular file below it, recursively, in sorted path
// order), either text (tokenized here: byte-level or a Hugging Face tokenizer.json) or raw token
// ids (tokens_u16 / tokens_u32, little-endian, documents already separated by whoever wrote them).
// Text files split into documents at `doc_separator`; empty documents are dropped; each document is
// encoded without the tokenizer's post-processor template (no BOS) and followed by the separator
// token. The stream is built once at load and immutable after, so one dataset can be shared by
// every loader and thread.
//
// Speed: byte-level text is a copy (kjv.txt, 4.1 MB: ~0.03 s). With a tokenizer.json, batches of
// consecutive documents are encoded on the thread pool (batch boundaries depend only on document
// sizes, so the stream is identical for any thread count); one document is encoded by one thread
// at ~9 MB/s with the fixture tokenizers, so a single huge document is not split.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hp/io/tokenizer.h"

namespace hp::data {

// Byte-level text: ids 0..255 are the bytes, 256 separates documents.
inline constexpr int32_t kByteSeparator = 256;
inline constexpr int64_t kByteVocab = 257;
// Separator tokens tried in order when DatasetOptions::separator_token is "".
inline constexpr const char* kAutoSeparatorTokens[] = {"<|endoftext|>", "</s>", "<|end_of_text|>",
                                                       "<|im_end|>", "<eos>"};

struct DatasetOptions {
  // A file, or a directory (every regular file below it, recursively, sorted by path).
  std::string path{};
  // text | tokens_u16 | tokens_u32 (raw little-endian ids, documents already separated).
  std::string format = "text";
  // text: tokenizer.json path; "" = byte-level (id = byte value, vocab 257, separator 256).
  std::string tokenizer{};
  // text: split each file into documents at this exact string ("" = one doc per file).
  std::string doc_separator{};
  // tokenizer.json: token appended after every document; "" = auto (the first present of
  // kAutoSeparatorTokens; an error listing them if none is).
  std::string separator_token{};
};

class TokenDataset {
 public:
  // Reads and tokenizes everything. Errors ("[data] ...", naming the file and value): missing
  // path (IoError), empty directory (IoError), unreadable file (IoError), token file size not a
  // multiple of the element size (IoError), u32 id above INT32_MAX (IoError), unknown format
  // (ValueError), text-only options on a token format (ValueError), tokenizer.json that fails to
  // load (IoError carrying the io message), unknown separator token (ValueError), text that is not
  // valid UTF-8 under a tokenizer.json (ValueError).
  static std::shared_ptr<const TokenDataset> load(const DatasetOptions& o);

  // Tokens in the packed stream.
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The packed stream: doc0 SEP doc1 SEP ... (token files: the files' ids concatenated).
  const int32_t* tokens() const { return tokens_.data(); }
  // Text: non-empty documents; token files: the number of files (their documents are not parsed).
  int64_t num_documents() const { return num_documents_; }
  // Tokenizer vocab (incl. added tokens); 257 byte-level; token files: max id + 1.
  int64_t vocab_size() const { return vocab_size_; }
  // The id appended after every document; -1 for token files.
  int32_t separator_id() const { return separator_id_; }
  const DatasetOptions& options() const { return options_; }
  // The files read, in stream order.
  const std::vector<std::string>& files() const { return files_; }

  // Text datasets only (ValueError otherwise): the ids of `text` as one document, without the
  // separator. Byte-level accepts any bytes; a tokenizer.json needs valid UTF-8.
  std::vector<int32_t> encode(const std::string& text) const;
  // Byte-level: invalid UTF-8 allowed, separator → "\n", ids outside [0, 257) → ValueError.
  // tokenizer.json: as io::Tokenizer::decode (unknown ids skipped).
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  TokenDataset() = default;
  void load_text();
  void load_token_files(int elem_size);
  // encode() without the format check.
  std::vector<int32_t> encode_text(std::string_view text) const;

  DatasetOptions options_;
  std::vector<std::string> files_;
  std::optional<io::Tokenizer> tokenizer_;  // text with a tokenizer.json only
  std::vector<int32_t> tokens_;
  int64_t num_documents_ = 0;
  int64_t vocab_size_ = 0;
  int32_t separator_id_ = -1;
};

}  // namespace hp::data
