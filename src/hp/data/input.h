// Corpus input files as byte streams, decompressed by their name: `.gz` (gzip, zlib; concatenated
// members too) and `.zst` (zstd, libzstd; concatenated frames too), anything else as is.
// Read in pieces, so a corpus file of any size streams through bounded memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hp::data::detail {

enum class Compression { none, gzip, zstd };

// By extension: ".gz" → gzip, ".zst" → zstd, else none.
Compression compression_of(const std::string& path);

class InputStream {
 public:
  // IoError("[data] ...") naming the file when it cannot be opened, or when a .gz / .zst file does
  // not start with the gzip / zstd magic bytes.
  explicit InputStream(std::string path);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  const std::string& path() const { return path_; }
  // Up to `n` bytes of (decompressed) data; 0 only at the end of the stream. IoError naming the
  // file and the compressed byte offset for corrupt or truncated compressed data.
  size_t read(char* dst, size_t n);
  // Reads and discards `n` bytes (IoError if the stream ends first).
  void skip(uint64_t n);
  // Decompressed bytes returned so far.
  uint64_t position() const { return position_; }
  // File bytes consumed so far and the file size (progress of compressed inputs).
  uint64_t file_position() const;
  uint64_t file_size() const { return file_size_; }

 private:
  struct Codec;
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t position_ = 0;
  std::unique_ptr<Codec> codec_;  // null for uncompressed files
};

// The whole (decompressed) file.
std::string read_input(const std::string& path);

}  // namespace hp::data::detail
