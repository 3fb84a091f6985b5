// Megatron-LM's indexed dataset (MMapIndexedDataset, now megatron.core.datasets.IndexedDataset):
// PREFIX.bin holds the token ids of every sequence back to back in one dtype, PREFIX.idx
// describes them. Datasets written by Megatron's tools/preprocess_data.py load here, and ours load
// there.
//
// PREFIX.idx, little-endian, as written by _IndexWriter and read by _IndexReader in NVIDIA/
// Megatron-LM megatron/core/datasets/indexed_dataset.py (checked at commit 00caa53a):
//
//   offset         size  field
//   0              9     magic "MMIDIDX\x00\x00" (_INDEX_HEADER)
//   9              8     version, u64 = 1
//   17             1     dtype code, u8 (DType: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                        6 float64, 7 float32, 8 uint16)
//   18             8     sequence count S, u64
//   26             8     document count D, u64: the document boundaries, so documents + 1
//   34             4·S   sequence lengths, i32 [S] (elements)
//   34 + 4·S       8·S   sequence pointers, i64 [S]: byte offset of each sequence in .bin,
//                        cumulative from 0 (_sequence_pointers)
//   34 + 12·S      8·D   document indices, i64 [D]: 0, then the sequence count after each
//                        document (IndexedDatasetBuilder.add_document / end_document), ending at S
//   (34 + 12·S + 8·D  S  sequence modes, i8 [S]: multimodal datasets only; not supported here)
//
// The token stream the trainer packs is .bin read front to back: every sequence in order. The
// writer below makes each document one sequence ending with the separator id, which is Megatron's
// preprocess_data.py with --append-eod and without --split-sentences.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hp/data/files.h"

namespace hp::data {

// Megatron's DType codes.
enum class IndexedDType : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8,
};

// Bytes per element.
int64_t indexed_dtype_size(IndexedDType t);
// NumPy's names: "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16".
const char* indexed_dtype_name(IndexedDType t);
// Megatron's DType.optimal_dtype: uint16 below 65500 ids, else int32.
IndexedDType indexed_dtype_for_vocab(int64_t vocab_size);

std::string indexed_idx_path(const std::string& prefix);  // PREFIX.idx
std::string indexed_bin_path(const std::string& prefix);  // PREFIX.bin
// PREFIX.mask.bin (our extension, not Megatron's): one byte per element of PREFIX.bin, in the same
// order, 1 = the token is a training target, 0 = no loss on it (a chat prompt, a separator). A
// dataset without it trains on every token.
std::string indexed_mask_path(const std::string& prefix);

// A dataset mapped read-only: opening costs one pass over the index (validation), never over the
// tokens, and no memory beyond the page cache.
class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and checks everything the layout promises: magic, version,
  // dtype code, the index size against its counts, lengths >= 0, pointers cumulative from 0 (each
  // sequence starts where the previous ends), .bin exactly as long as the sequences, document
  // indices from 0, non-decreasing, ending at S. IoError("[data] ...") naming the file and the
  // offending value; a missing PREFIX.idx beside PREFIX.idx.partial is named as an unfinished
  // `hp data prepare`.
  static std::shared_ptr<const IndexedDataset> open(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  IndexedDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  // Document count as Megatron reports it: boundaries - 1.
  int64_t num_documents() const { return num_boundaries_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;
  // i in [0, num_documents()]: the first sequence of document i (num_sequences() for i = D - 1).
  int64_t document_index(int64_t i) const;

  // Elements [begin, begin + count) of the token stream (.bin front to back), widened to i64.
  // ValueError for a range outside [0, num_tokens()); IoError for a float dtype.
  void read(int64_t begin, int64_t count, int64_t* dst) const;
  // Sequence i's elements, widened.
  std::vector<int64_t> sequence(int64_t i) const;
  // Whether PREFIX.mask.bin was there (open() checks that it has num_tokens() bytes).
  bool has_mask() const { return mask_ != nullptr; }
  // Mask bytes [begin, begin + count) (has_mask() only); ValueError for a range outside the
  // tokens, IoError naming the position of a byte other than 0 or 1.
  void read_mask(int64_t begin, int64_t count, uint8_t* dst) const;

 private:
  IndexedDataset(std::string prefix);
  void validate();

  std::string prefix_;
  detail::MappedFile idx_, bin_;
  std::unique_ptr<detail::MappedFile> mask_;  // PREFIX.mask.bin, when present
  IndexedDType dtype_ = IndexedDType::u16;
  int64_t num_sequences_ = 0, num_boundaries_ = 0, num_tokens_ = 0;
};

// Writes PREFIX.bin + PREFIX.idx as Megatron's IndexedDatasetBuilder + _IndexWriter do (the same
// bytes for the same documents), streaming: memory stays constant in the dataset size, because the
// lengths go straight into the index file and the document indices into a side file, and the
// pointers are computed from the lengths at finish().
//
// Never a dataset that looks complete but is not: everything is written under temporary names
// (PREFIX.bin.partial, PREFIX.idx.partial, PREFIX.docs.partial); finish() makes them durable,
// removes an old PREFIX.idx, renames .bin, then .idx last. A crash leaves only *.partial files,
// which a writer constructed with `resume_at` continues from.
class IndexedDatasetWriter {
 public:
  // What flush() made durable: a resumed writer truncates the partial files back to it.
  struct Position {
    int64_t tokens = 0, sequences = 0, documents = 0;
    bool operator==(const Position&) const = default;
  };

  // Starts new partial files (replacing old ones), or with `resume_at` reopens them cut back to
  // that position (IoError naming the file when one is shorter than the position says).
  // `with_mask`: also writes PREFIX.mask.bin (one byte per token, every add_* call passes it);
  // without, finish() removes an old PREFIX.mask.bin so it cannot pair with the new data.
  IndexedDatasetWriter(std::string prefix, IndexedDType dtype,
                       std::optional<Position> resume_at = std::nullopt, bool with_mask = false);
  // Without finish(): closes the partial files, leaving them for a resume (discard() removes them).
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  IndexedDType dtype() const { return dtype_; }
  // One document of the given sequences (their lengths summing to ids.size(); empty = one sequence
  // of all ids; an empty document has no sequence, as Megatron writes one). ValueError naming the
  // id when one does not fit the dtype.
  // `mask`: one byte per id (with_mask only, where it is required).
  void add_document(std::span<const int32_t> ids, std::span<const int32_t> sequence_lengths = {},
                    std::span<const uint8_t> mask = {});
  // Documents of one sequence each, lengths[i] elements, whose ids encode_ids() already wrote
  // (and, with_mask, their mask bytes).
  void add_encoded_documents(std::string_view encoded, std::span<const int32_t> lengths,
                             std::string_view mask = {});
  // Appends ids in the dtype's little-endian bytes; ValueError naming the first id outside it.
  static void encode_ids(std::span<const int32_t> ids, IndexedDType dtype, std::string& out);

  // Written so far (durable only after flush()).
  Position position() const { return pos_; }
  // Writes the buffers and fsyncs the partial files; returns the durable position.
  Position flush();
  // Completes the index and publishes PREFIX.bin then PREFIX.idx (see above).
  void finish();
  // Removes the partial files (a failed run that must not be resumed).
  void discard();

 private:
  struct Sink;
  void put(Sink& s, const void* data, size_t bytes);
  void put_mask(size_t tokens, const void* mask, size_t bytes);
  std::vector<Sink*> sinks() const;
  void write_out(Sink& s);

  std::string prefix_;
  IndexedDType dtype_;
  Position pos_;
  std::unique_ptr<Sink> bin_, idx_, docs_, mask_;  // mask_: with_mask only
  bool done_ = false;
};

}  // namespace hp::data
