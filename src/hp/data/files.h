// Corpus files for data/: listing a dataset path, reading files whole (one read per file) and
// mapping them read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hp::data::detail {

// `path` itself if it is a file, else every regular file below the directory, recursively, sorted
// by path (directories below it only; symlinks to files count as files). IoError("[data] ...") when
// the path is missing, is neither a file nor a directory (a FIFO would block the read), or the
// directory holds no regular file.
std::vector<std::string> list_files(const std::string& path);

// A file open for reading; every error is an IoError naming the file.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const;  // in bytes, at open time
  // Reads exactly `bytes` bytes from the current position into dst (IoError if the file is
  // shorter).
  void read_exact(void* dst, size_t bytes);
  // Reads up to `bytes`, stopping early only at end of file; returns the count read.
  size_t read_some(char* dst, size_t bytes);

 private:
  std::string path_;
  int fd_ = -1;
};

// The whole file as bytes.
std::string read_file(const std::string& path);

// A whole file mapped read-only (MAP_SHARED: pages come from the page cache on first touch, so the
// mapping costs no memory of its own). An empty file maps to data() == nullptr, size() == 0.
class MappedFile {
 public:
  // IoError("[data] ...") naming the file when it cannot be opened, stat'ed or mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace hp::data::detail
