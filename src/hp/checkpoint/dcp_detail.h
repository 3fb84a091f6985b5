// Internals shared by the DCP sources (save, load, metadata, export): box arithmetic, metadata
// JSON, and durable file replacement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/checkpoint/dcp.h"

namespace hp::checkpoint::detail {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kLatestFile = "latest";

// Elements of a box with these sizes (1 for a 0-d box).
int64_t box_numel(const std::vector<int64_t>& sizes);

// The intersection of boxes [a_off, a_off + a_len) and [b_off, b_off + b_len); false when empty.
bool intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_len,
               std::vector<int64_t>* off, std::vector<int64_t>* len);

// "2,0" (empty for 0-d).
std::string join_ints(const std::vector<int64_t>& v);

// Checks a chunk's box against its global shape (ValueError naming the fqn).
void check_chunk(const Chunk& c);

// Checks what read_metadata promises about every tensor (piece ranks and bounds, byte ranges that
// match sizes × dtype, plain file names, pieces that tile the tensor exactly); `source` names the
// metadata in errors ("<dir>/metadata.json").
void validate_tensor(const TensorMeta& t, const std::string& source);

// metadata.json text for `meta` (its `dir` is not stored).
std::string metadata_to_json(const Metadata& meta);

// Writes `content` to `path` durably and atomically: `path`.tmp, fsync, rename over `path`, fsync
// of the parent directory. Errors name the file.
void write_file_atomic(const std::string& path, const std::string& content);
// Writes and fsyncs `path` (no rename: for files inside a not-yet-published directory).
void write_file_synced(const std::string& path, const std::string& content);
// fsync of a directory, so renames and new entries in it survive a crash.
void fsync_dir(const std::string& dir);

}  // namespace hp::checkpoint::detail
