// A training corpus as one packed token stream: doc0 SEP doc1 SEP ... (the trainer's data source).
//
// Sources: one file or a directory (every regular file below it, recursively, in sorted path
// order), either text (tokenized here: byte-level or a Hugging Face tokenizer.json; `.gz` / `.zst`
// files are decompressed) or raw token ids (tokens_u16 / tokens_u32, little-endian, documents
// already separated by whoever wrote them), or an indexed dataset (Megatron's PREFIX.bin +
// PREFIX.idx, data/indexed.h, as `hp data prepare` writes it), whose stream is the .bin front to
// back. Text files split into documents at `doc_separator` (data/documents.h); empty documents are
// dropped; each document is encoded without the tokenizer's post-processor template (no BOS) and
// followed by the separator token (data/encoder.h). The stream is built once at load and immutable
// after, so one dataset can be shared by every loader and thread.
//
// Memory: text and token files are held in memory (4 bytes per token). An indexed dataset is
// mapped: loading reads its index once and never the tokens, and its ids are checked against the
// vocabulary as windows are read (read()), so start-up and memory do not grow with its size.
//
// Chat (format chat, data/chat.h): JSONL files of {"messages": [{role, content}, ...]}, each line
// one document: the conversation rendered by the chat template and encoded, then the separator,
// with a loss mask that is 1 on the assistant's tokens only (has_mask(), read_mask()). An indexed
// dataset with a PREFIX.mask.bin (hp data prepare --format chat) carries the same mask.
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
#include <utility>
#include <vector>

#include "hp/data/dataset_format.h"
#include "hp/data/encoder.h"

namespace hp::data {

class IndexedDataset;

struct DatasetOptions {
  // A file, or a directory (every regular file below it, recursively, sorted by path); indexed:
  // the PREFIX of PREFIX.bin + PREFIX.idx.
  std::string path{};
  // How the files are laid out (dataset_format.h).
  DatasetFormat format = DatasetFormat::text;
  // text: tokenizer.json path; "" = byte-level (id = byte value, vocab 257, separator 256).
  // indexed: the tokenizer the dataset was prepared with (its vocabulary and separator).
  std::string tokenizer{};
  // text: split each file into documents at this exact string ("" = one doc per file).
  std::string doc_separator{};
  // tokenizer.json: token appended after every document; "" = auto (the first present of
  // kAutoSeparatorTokens; an error listing them if none is). indexed: the one it was prepared with.
  std::string separator_token{};
  // chat: a tokenizer_config.json holding chat_template (or a .jinja file); "" = the
  // tokenizer_config.json beside `tokenizer`.
  std::string chat_template{};
};

class TokenDataset {
 public:
  // Reads and tokenizes everything (indexed: maps and validates it). Errors ("[data] ...", naming
  // the file and value): missing path (IoError), empty directory (IoError), unreadable file
  // (IoError), token file size not a multiple of the element size (IoError), u32 id above
  // INT32_MAX (IoError), unknown format (ValueError), text-only options on a token format
  // (ValueError), tokenizer.json that fails to load (IoError carrying the io message), unknown
  // separator token (ValueError), text that is not valid UTF-8 under a tokenizer.json
  // (ValueError), corrupt or compressed input (IoError), an indexed dataset that is incomplete,
  // inconsistent or holds float elements (IoError, IndexedDataset::open); chat: a line that is
  // not JSON or not a valid conversation, a template that refuses it, no chat template
  // (ValueError "[data] FILE:LINE: ...", chat.h), chat_template given for another format.
  static std::shared_ptr<const TokenDataset> load(const DatasetOptions& o);
  ~TokenDataset();

  // Tokens in the packed stream.
  int64_t size() const { return size_; }
  // Tokens [begin, begin + count) of the packed stream (doc0 SEP doc1 SEP ...; token files: the
  // files' ids concatenated), widened to i64 as the loader's rows are. ValueError for a range
  // outside [0, size()); indexed: ValueError naming the position for an id outside
  // [0, vocab_size()) (a dataset prepared with another tokenizer).
  void read(int64_t begin, int64_t count, int64_t* dst) const;
  // The same range as i32 ids.
  std::vector<int32_t> tokens(int64_t begin, int64_t count) const;
  // Whether some tokens are not training targets: chat data, an indexed dataset with a
  // PREFIX.mask.bin, or a subset of one.
  bool has_mask() const;
  // The loss mask of tokens [begin, begin + count): 1 = a training target, 0 = context only (all
  // 1 without a mask). Errors as read().
  void read_mask(int64_t begin, int64_t count, uint8_t* dst) const;
  // Each token's position within its document for tokens [begin, begin + count): 0 at a
  // document's first token (document_start) and at `begin`, then counting up — what a packed row
  // needs to restart attention and RoPE positions at each document (data.document_mask). The
  // separator ends its document. Errors as read().
  void read_positions(int64_t begin, int64_t count, int64_t* dst) const;
  // Held in memory (text, token files): the position of the first id >= `limit`, or -1.
  // Indexed datasets are not scanned (ValueError): read() checks their ids instead. A document
  // subset answers for its whole base.
  int64_t find_id_at_least(int64_t limit) const;
  // Indexed (or a document subset of one): tokens read through a mapping, not held in memory.
  bool mapped() const { return indexed_ != nullptr || (base_ && base_->mapped()); }
  // Where the loader caches its epoch orders (shuffle.h): an indexed dataset's PREFIX; "" = in
  // memory (data held in memory, and document subsets, whose windows are not the prefix's).
  const std::string& order_cache_prefix() const;
  // Text, indexed: documents (indexed: as its index counts them); token files: the number of files
  // (their documents are not parsed).
  int64_t num_documents() const { return num_documents_; }
  // Where document d starts in the stream, d in [0, num_documents()] (d = num_documents():
  // size()). Token files: the files are the documents.
  int64_t document_start(int64_t d) const;
  // Tokenizer vocab (incl. added tokens); 257 byte-level; token files: max id + 1.
  int64_t vocab_size() const { return vocab_size_; }
  // The id appended after every document; -1 for token files.
  int32_t separator_id() const { return separator_id_; }
  const DatasetOptions& options() const { return options_; }
  // The files read, in stream order (indexed: PREFIX.bin, PREFIX.idx).
  const std::vector<std::string>& files() const { return files_; }

  // Validation data held out of `ds` (eval.split): every document d with
  // floor((d + 1) · fraction) > floor(d · fraction) — evenly spread, about fraction · D of them,
  // independent of any seed — as {the rest, the held-out ones}, each one packed stream of its
  // documents in order (views of `ds`: nothing is copied). ValueError("[data] ...") naming the
  // path, fraction and document count for a fraction outside (0, 1) or one that holds out no
  // document, or all of them.
  static std::pair<std::shared_ptr<const TokenDataset>, std::shared_ptr<const TokenDataset>>
  hold_out(const std::shared_ptr<const TokenDataset>& ds, double fraction);

  // Text and indexed datasets only (ValueError otherwise): the ids of `text` as one document,
  // without the separator. Byte-level accepts any bytes; a tokenizer.json needs valid UTF-8.
  std::vector<int32_t> encode(const std::string& text) const;
  // Byte-level: invalid UTF-8 allowed, separator → "\n", ids outside [0, 257) → ValueError.
  // tokenizer.json: as io::Tokenizer::decode (unknown ids skipped).
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  TokenDataset() = default;
  void load_text();
  void load_token_files(int elem_size);
  void load_indexed();
  void load_chat();  // chat_dataset.cpp
  // The stream from batches encoded in parallel: parts[b] (and masks[b], when given) appended in
  // order, freed as they go; ends[b] are its documents' ends within the batch.
  void append_batches(std::vector<std::vector<int32_t>>& parts,
                      const std::vector<std::vector<int64_t>>& ends,
                      std::vector<std::vector<uint8_t>>* masks);
  // Calls f(base position, count, offset in the range) for each piece of a subset's range.
  template <class F>
  void for_pieces(int64_t begin, int64_t count, F&& f) const;
  const DocumentEncoder& encoder(const char* what) const;
  // A view of base_'s documents [first, last) of each range, packed in order (holdout.cpp).
  static std::shared_ptr<const TokenDataset> subset(
      const std::shared_ptr<const TokenDataset>& base,
      const std::vector<std::pair<int64_t, int64_t>>& doc_ranges, const std::string& what);

  DatasetOptions options_;
  std::vector<std::string> files_;
  std::optional<DocumentEncoder> encoder_;  // text and indexed
  std::vector<int32_t> tokens_;             // text, chat and token files
  std::vector<uint8_t> mask_;               // chat: one byte per token of tokens_
  std::shared_ptr<const IndexedDataset> indexed_;
  // Text and token files: document_start(d) for d in [0, D] (token files: per file).
  std::vector<int64_t> doc_starts_;
  // A document subset: the dataset it views and, per contiguous piece, (start in base_'s stream,
  // start in this stream), plus a final (-, size()) sentinel.
  std::shared_ptr<const TokenDataset> base_;
  std::vector<std::pair<int64_t, int64_t>> pieces_;
  int64_t size_ = 0;
  int64_t num_documents_ = 0;
  int64_t vocab_size_ = 0;
  int32_t separator_id_ = -1;
};

}  // namespace hp::data
