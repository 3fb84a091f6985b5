// safetensors files: zero-copy reader (mmap), sharded checkpoints, writer.
//
// Format: u64 little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b,
//   e]}}
// then the data region; offsets are relative to it. The reader validates everything before handing
// out a pointer (header bounds, UTF-8, JSON, duplicate keys, dtype, shape, offsets that tile the
// data region exactly), so no view ever points outside the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hp/core/dtype.h"

namespace hp::io {

// Header JSON larger than this is rejected (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor of an open file. `data` points into the mapping and stays valid while any copy of
// the owning SafetensorsFile (or its keep_alive()) exists. Files written by hp or Python
// safetensors keep each tensor aligned to its element size; other writers may not.
struct SafetensorsTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data;
  size_t nbytes;
  // Byte range relative to the start of the file (for checkpoint metadata).
  uint64_t file_offset;

  int64_t numel() const;
};

// "F32" → DType::f32 etc.; throws IoError for names hp does not support.
DType safetensors_dtype_from_name(std::string_view name);
// DType::bf16 → "BF16".
std::string_view safetensors_dtype_name(DType dt);

namespace detail {
struct SafetensorsState;
}

// One validated safetensors file. Cheap to copy (shared state).
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates it; errors name the file and the tensor.
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory file without copying it; `data` must outlive the result. `name`
  // stands for the file in error messages.
  static SafetensorsFile parse(const void* data, size_t size, std::string name);

  const std::string& path() const;
  // All tensors, in data-offset order.
  const std::vector<SafetensorsTensor>& tensors() const;
  bool contains(std::string_view name) const;
  // Throws IoError naming the file and the missing tensor.
  const SafetensorsTensor& tensor(std::string_view name) const;
  // The "__metadata__" map (empty if absent).
  const std::map<std::string, std::string>& metadata() const;
  // Shares ownership of the mapping, for zero-copy tensors that outlive this object.
  std::shared_ptr<const void> keep_alive() const;

 private:
  explicit SafetensorsFile(std::shared_ptr<const detail::SafetensorsState> s)
      : state_(std::move(s)) {}
  std::shared_ptr<const detail::SafetensorsState> state_;
};

// A Hugging Face model checkpoint: one file, or shards listed by `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}}).
class SafetensorsCheckpoint {
 public:
  // `path`: a directory (uses model.safetensors.index.json if present, else model.safetensors),
  // an index .json file, or a single .safetensors file. Shard names must be plain file names in
  // the index's directory; every tensor the index lists must exist in its shard.
  static SafetensorsCheckpoint open(const std::string& path);

  // Sorted tensor names.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  const SafetensorsTensor& tensor(std::string_view name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  // tensor name → its entry in one of files_ (owned by that file's shared state)
  std::map<std::string, const SafetensorsTensor*, std::less<>> index_;
};

// A tensor to write: `data` holds `nbytes` = numel × dtype_size bytes, row-major.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};

// Writes a safetensors file whose tensor data arrives in pieces, so tensors that do not all fit in
// memory can be streamed (checkpoint export) and large ones checksummed block by block. The header
// is fixed up front from the entries' names, dtypes and shapes (their `data` is ignored); then
// append() must supply exactly the data bytes of layout(), in that order.
class SafetensorsWriter {
 public:
  // One tensor's byte range [begin, end), relative to the start of the file.
  struct Slot {
    std::string name;
    uint64_t begin, end;
  };
  SafetensorsWriter(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The tensors in file order (same order and alignment as write_safetensors).
  const std::vector<Slot>& layout() const { return layout_; }
  // The next `nbytes` of the data region (one tensor, part of one, or several).
  void append(const void* data, size_t nbytes);
  // Checks that every byte of layout() was appended; `sync` fsyncs before closing.
  void close(bool sync = false);

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<Slot> layout_;
  uint64_t pos_ = 0, end_ = 0;  // bytes written so far / file size when complete
};

// Writes a safetensors file. Like Python safetensors, tensors are laid out by element size
// (largest first), then name, so each starts aligned to its element size; the header is padded with
// spaces to a multiple of 8. `sync` fsyncs before returning (checkpoints need it). Returns each
// tensor's [begin, end) byte range relative to the start of the file.
std::map<std::string, std::pair<uint64_t, uint64_t>> write_safetensors(
    const std::string& path, const std::vector<SafetensorsEntry>& tensors,
    const std::map<std::string, std::string>& metadata = {}, bool sync = false);

}  // namespace hp::io
