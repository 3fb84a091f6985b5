// DCP verification (dcp.h verify): metadata, files, byte ranges and checksums, without keeping
// anything loaded. The checksums are checked by load() itself, one piece at a time, so verify and
// load can never disagree about what an intact piece is.
#include <algorithm>
#include <filesystem>
#include <map>

#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"

namespace hp::checkpoint {

namespace {

namespace fs = std::filesystem;

// `msg` without its "[ckpt] <path>: " and "tensor '<fqn>' " prefixes (a fault names both).
std::string without_prefix(const std::string& msg, const std::string& path,
                           const std::string& fqn = "") {
  std::string s = msg;
  for (const std::string& prefix : {"[ckpt] " + path + ": ", "tensor '" + fqn + "' "})
    if (s.rfind(prefix, 0) == 0) s.erase(0, prefix.size());
  return s;
}

struct PieceRef {
  const TensorMeta* tensor;
  const TensorMeta::Piece* piece;
};

}  // namespace

std::vector<Fault> verify(const std::string& step_dir) {
  std::vector<Fault> faults;
  const std::string meta_path = step_dir + "/" + detail::kMetadataFile;
  Metadata meta;
  try {
    meta = read_metadata(step_dir);
  } catch (const Error& e) {
    faults.push_back({detail::kMetadataFile, "", without_prefix(e.what(), meta_path)});
    return faults;
  }

  // Pieces by file, in byte order, so each file is read front to back once.
  std::map<std::string, std::vector<PieceRef>> by_file;
  for (const TensorMeta& t : meta.tensors)
    for (const TensorMeta::Piece& p : t.pieces) by_file[p.file].push_back({&t, &p});
  for (auto& [file, refs] : by_file) {
    std::sort(refs.begin(), refs.end(),
              [](const PieceRef& a, const PieceRef& b) { return a.piece->begin < b.piece->begin; });
    const std::string path = step_dir + "/" + file;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) {
      faults.push_back({file, "", hp::detail::cat("missing (holds ", refs.size(), " pieces)")});
      continue;
    }
    if (!fs::is_regular_file(st)) {
      faults.push_back({file, "", "not a regular file"});
      continue;
    }
    const uint64_t size = fs::file_size(path, ec);
    for (const PieceRef& r : refs) {
      const TensorMeta& t = *r.tensor;
      const TensorMeta::Piece& p = *r.piece;
      if (ec || p.end > size) {
        faults.push_back({file, t.fqn,
                          hp::detail::cat("truncated: the piece at offsets ", shape_str(p.offsets),
                                          " needs bytes [", p.begin, ", ", p.end,
                                          ") but the file has ", ec ? 0 : size)});
        continue;
      }
      // The piece alone as the destination box: load reads exactly it and checks its CRC32C.
      try {
        load(meta, {Chunk{t.fqn, empty(p.sizes, t.dtype), t.global_shape, p.offsets}});
      } catch (const IoError& e) {
        faults.push_back({file, t.fqn, without_prefix(e.what(), path, t.fqn)});
      }
    }
  }
  return faults;
}

}  // namespace hp::checkpoint
