// DCP → Hugging Face export, one tensor in memory at a time.
#include "hp/checkpoint/export.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hp/checkpoint/dcp.h"
#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"
#include "hp/io/safetensors.h"

namespace hp::checkpoint {

namespace fs = std::filesystem;

ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0)
    HP_THROW(ValueError, "ckpt", "max shard bytes must be > 0, got ", max_shard_bytes);
  const Metadata meta = read_metadata(step_dir);
  std::vector<const TensorMeta*> model;
  for (const TensorMeta& t : meta.tensors)
    if (t.fqn.rfind("state.", 0) != 0) model.push_back(&t);
  if (model.empty())
    HP_THROW(IoError, "ckpt", step_dir, ": no model tensors to export (only optimizer state)");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) HP_THROW(IoError, "ckpt", out_dir, ": cannot create directory: ", ec.message());

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
  nlohmann::ordered_json weight_map;
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    const std::string file = n == 1 ? "model.safetensors" : name;
    std::vector<io::SafetensorsEntry> entries;
    std::map<std::string, const TensorMeta*> by_name;
    for (const TensorMeta* t : shards[i]) {
      entries.push_back({t->fqn, t->dtype, t->global_shape, nullptr,
                         static_cast<size_t>(shape_numel(t->global_shape)) * dtype_size(t->dtype)});
      by_name[t->fqn] = t;
      weight_map[t->fqn] = file;
    }
    io::SafetensorsWriter writer((fs::path(out_dir) / file).string(), entries, {{"format", "pt"}});
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
  if (n > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", stats.bytes}};
    index["weight_map"] = weight_map;
    detail::write_file_synced((fs::path(out_dir) / "model.safetensors.index.json").string(),
                              index.dump(2) + "\n");
  }
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json", "generation_config.json"}) {
    const fs::path src = fs::path(step_dir) / f;
    if (!fs::exists(src)) continue;
    fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) HP_THROW(IoError, "ckpt", src.string(), ": cannot copy: ", ec.message());
  }
  return stats;
}

}  // namespace hp::checkpoint
