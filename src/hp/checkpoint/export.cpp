// DCP → Hugging Face export, one tensor in memory at a time.
#include "hp/checkpoint/export.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "hp/checkpoint/dcp.h"
#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"
#include "hp/io/safetensors.h"

namespace hp::checkpoint {

namespace fs = std::filesystem;

namespace {

// `dir` as an absolute path without a trailing separator ("out/" → "/cwd/out"), so that its
// siblings can be named.
fs::path dir_path(const std::string& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (!p.has_filename()) HP_THROW(ValueError, "ckpt", "cannot export to '", dir, "'");
  return p;
}

// "<out><tag><pid>" beside `out`: the staging dir (".partial-") or the replaced export (".old-").
fs::path sibling(const fs::path& out, const char* tag) {
  return out.parent_path() / (out.filename().string() + tag + std::to_string(::getpid()));
}

// Refuses an out_dir that is not a directory, or a non-empty one unless `overwrite` (and never
// one that holds the checkpoint itself, which replacing it would delete).
void check_out_dir(const fs::path& out, const std::string& out_dir, const std::string& step_dir,
                   bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) HP_THROW(IoError, "ckpt", out_dir, ": exists and is not a directory");
  if (fs::is_empty(out, ec) && !ec) return;
  if (!overwrite)
    HP_THROW(IoError, "ckpt", out_dir,
             ": directory is not empty; refusing to export into it (--overwrite replaces it "
             "whole)");
  const fs::path rel =
      fs::weakly_canonical(step_dir, ec).lexically_relative(fs::canonical(out, ec));
  if (!ec && !rel.empty() && *rel.begin() != "..")
    HP_THROW(IoError, "ckpt", out_dir, ": holds the checkpoint ", step_dir,
             "; refusing to replace it");
}

// Removes the staging dir unless the export was published.
struct StagingGuard {
  fs::path dir;
  bool published = false;
  ~StagingGuard() {
    std::error_code ec;
    if (!published) fs::remove_all(dir, ec);
  }
};

// Renames the finished staging dir to `out` (new, or an empty directory). With `overwrite` an
// existing export is renamed away first and deleted once the new one is in place.
void publish(const fs::path& staging, const fs::path& out, const std::string& out_dir,
             bool overwrite) {
  if (std::rename(staging.c_str(), out.c_str()) == 0) return;
  if (!overwrite || (errno != ENOTEMPTY && errno != EEXIST))
    HP_THROW(IoError, "ckpt", out_dir, ": cannot rename ", staging.string(),
             " to it: ", std::strerror(errno));
  const fs::path old = sibling(out, ".old-");
  std::error_code ec;
  fs::remove_all(old, ec);
  if (std::rename(out.c_str(), old.c_str()) != 0)
    HP_THROW(IoError, "ckpt", out_dir, ": cannot move it aside to ", old.string(), ": ",
             std::strerror(errno));
  if (std::rename(staging.c_str(), out.c_str()) != 0) {
    const int err = errno;
    std::rename(old.c_str(), out.c_str());  // the previous export stays
    HP_THROW(IoError, "ckpt", out_dir, ": cannot rename ", staging.string(),
             " to it: ", std::strerror(err));
  }
  fs::remove_all(old, ec);
  if (ec)
    std::fprintf(stderr, "[ckpt] warning: cannot delete the replaced export %s: %s\n", old.c_str(),
                 ec.message().c_str());
}

}  // namespace

ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes, bool overwrite,
                      const std::function<std::string(const std::string&)>& file_name) {
  if (max_shard_bytes <= 0)
    HP_THROW(ValueError, "ckpt", "max shard bytes must be > 0, got ", max_shard_bytes);
  const Metadata meta = read_metadata(step_dir);
  std::vector<const TensorMeta*> model;
  for (const TensorMeta& t : meta.tensors)
    if (t.fqn.rfind("state.", 0) != 0) model.push_back(&t);
  if (model.empty())
    HP_THROW(IoError, "ckpt", step_dir, ": no model tensors to export (only optimizer state)");
  const fs::path out = dir_path(out_dir);
  check_out_dir(out, out_dir, step_dir, overwrite);
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  if (ec)
    HP_THROW(IoError, "ckpt", out.parent_path().string(),
             ": cannot create directory: ", ec.message());
  StagingGuard guard{sibling(out, ".partial-")};
  const fs::path& staging = guard.dir;
  fs::remove_all(staging, ec);  // a leftover of a killed export with our pid
  if (!ec) fs::create_directory(staging, ec);
  if (ec) HP_THROW(IoError, "ckpt", staging.string(), ": cannot create directory: ", ec.message());

  // Greedy sharding in name order, as transformers does.
  ExportStats stats;
  std::vector<std::vector<const TensorMeta*>> shards(1);
  int64_t cur = 0;
  for (const TensorMeta* t : model) {
    const auto bytes = static_cast<int64_t>(shape_numel(t->global_shape) * dtype_size(t->dtype));
    if (cur > 0 && cur + bytes > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(t);
    cur += bytes;
    stats.bytes += bytes;
  }
  stats.tensors = static_cast<int64_t>(model.size());
  stats.shards = static_cast<int64_t>(shards.size());

  const size_t n = shards.size();
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t i = 0; i < n; ++i) {
    const std::string file = io::hf_shard_file(i, n);
    std::vector<io::SafetensorsEntry> entries;
    std::map<std::string, const TensorMeta*> by_name;
    for (const TensorMeta* t : shards[i]) {
      const std::string name = file_name ? file_name(t->fqn) : t->fqn;
      entries.push_back({name, t->dtype, t->global_shape, nullptr,
                         static_cast<size_t>(shape_numel(t->global_shape)) * dtype_size(t->dtype)});
      by_name[name] = t;
      weight_map.emplace_back(name, file);
    }
    io::SafetensorsWriter writer((staging / file).string(), entries, {{"format", "pt"}});
    for (const auto& slot : writer.layout()) {
      const TensorMeta& t = *by_name.at(slot.name);
      // [global_shape] assembled from every piece, written, then freed.
      Tensor full = empty(t.global_shape, t.dtype);
      load(meta,
           {Chunk{t.fqn, full, t.global_shape, std::vector<int64_t>(t.global_shape.size(), 0)}});
      writer.append(full.raw_data(), full.nbytes());
    }
    writer.close();
  }
  if (n > 1)
    detail::write_file_synced((staging / "model.safetensors.index.json").string(),
                              io::hf_index_json(weight_map, uint64_t(stats.bytes)));
  // The files saved beside the tensors (SaveOptions::extra_files: config.json and the tokenizer's),
  // not the checkpoint's own nor the training config.
  for (fs::directory_iterator it(step_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file() || name.rfind(detail::kMetadataFile, 0) == 0 ||
        name.rfind("rank-", 0) == 0 || name == "config.yaml")
      continue;
    fs::copy_file(it->path(), staging / name, ec);
    if (ec) HP_THROW(IoError, "ckpt", it->path().string(), ": cannot copy: ", ec.message());
  }
  if (ec) HP_THROW(IoError, "ckpt", step_dir, ": cannot list: ", ec.message());
  publish(staging, out, out_dir, overwrite);
  guard.published = true;
  return stats;
}

}  // namespace hp::checkpoint
