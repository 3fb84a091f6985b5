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
#include "hp/io/json.h"
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

// One tensor of the export: a model tensor as saved, or (with --fp8-blocks) a quantized weight's
// codes or its scales.
struct Output {
  const TensorMeta* meta;
  enum Part { as_saved, fp8_codes, fp8_scales } part;
  io::SafetensorsEntry entry;  // name, dtype, shape, nbytes (no data)
};

// The whole tensor `t` assembled from its pieces, converted to `dtype`.
Tensor load_whole(const Metadata& meta, const TensorMeta& t, DType dtype) {
  Tensor full = empty(t.global_shape, dtype);  // [global_shape]
  load(meta, {Chunk{t.fqn, full, t.global_shape, std::vector<int64_t>(t.global_shape.size(), 0)}});
  return full;
}

// The bytes of output `o`. A quantized weight is quantized once for its scales and once more for
// its codes (the writer lays out the F32 scales before the 1-byte codes), so only one tensor is in
// memory at a time.
Tensor output_data(const Metadata& meta, const Output& o, mx::Fp8BlockSize b) {
  if (o.part == Output::as_saved) return load_whole(meta, *o.meta, o.meta->dtype);
  const Tensor w = load_whole(meta, *o.meta, DType::f32);  // [R, C]
  const Shape& shape = o.meta->global_shape;
  Tensor codes = empty(shape, DType::u8);
  Tensor scales = empty(mx::fp8_block_scale_shape(shape[0], shape[1], b), DType::f32);
  mx::fp8_block_quantize(static_cast<const float*>(w.raw_data()), shape[0], shape[1], b,
                         static_cast<uint8_t*>(codes.raw_data()),
                         static_cast<float*>(scales.raw_data()));
  return o.part == Output::fp8_codes ? codes : scales;
}

// config.json of the export with quantization_config for block size `b`.
std::string fp8_config_json(const fs::path& file, mx::Fp8BlockSize b) {
  io::JsonValue j;
  try {
    j = io::parse_json_value(io::read_text_file(file.string(), "ckpt"), file.string());
  } catch (const IoError& e) {
    HP_THROW(IoError, "ckpt", file.string(), ": cannot read: ", e.what());
  }
  if (!j.is_object()) HP_THROW(IoError, "ckpt", file.string(), ": not a JSON object");
  j["quantization_config"] =
      io::JsonValue::object({{"quant_method", "fp8"},
                             {"fmt", "e4m3"},
                             {"activation_scheme", "dynamic"},
                             {"weight_block_size", io::JsonValue::array({b.rows, b.cols})}});
  return j.dump(2) + "\n";
}

}  // namespace

bool fp8_block_quantized(const std::string& fqn, const std::vector<int64_t>& shape) {
  const std::string suffix = ".weight";
  if (shape.size() != 2 || fqn.rfind("model.layers.", 0) != 0 || fqn.size() <= suffix.size() ||
      fqn.compare(fqn.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string module = fqn.substr(0, fqn.size() - suffix.size());
  const std::string leaf = module.substr(module.rfind('.') + 1);
  return leaf != "gate" && leaf.find("norm") == std::string::npos;
}

ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes, bool overwrite,
                      std::optional<mx::Fp8BlockSize> fp8_blocks,
                      const std::function<std::string(const std::string&)>& file_name) {
  if (max_shard_bytes <= 0)
    HP_THROW(ValueError, "ckpt", "max shard bytes must be > 0, got ", max_shard_bytes);
  const Metadata meta = read_metadata(step_dir);
  std::vector<const TensorMeta*> model;
  for (const TensorMeta& t : meta.tensors)
    if (t.fqn.rfind("state.", 0) != 0) model.push_back(&t);
  if (model.empty())
    HP_THROW(IoError, "ckpt", step_dir, ": no model tensors to export (only optimizer state)");
  if (fp8_blocks && !fs::exists(fs::path(step_dir) / "config.json"))
    HP_THROW(IoError, "ckpt", step_dir,
             ": no config.json saved with the checkpoint to record the FP8 quantization_config in");
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

  // The tensors to write, under their names in the files, a quantized weight as its codes and
  // its scales.
  std::vector<Output> outputs;
  for (const TensorMeta* t : model) {
    const size_t numel = static_cast<size_t>(shape_numel(t->global_shape));
    const std::string name = file_name ? file_name(t->fqn) : t->fqn;
    if (!fp8_blocks || !fp8_block_quantized(t->fqn, t->global_shape)) {
      outputs.push_back({t,
                         Output::as_saved,
                         {name, t->dtype, t->global_shape, nullptr, numel * dtype_size(t->dtype)}});
      continue;
    }
    const auto scale_shape =
        mx::fp8_block_scale_shape(t->global_shape[0], t->global_shape[1], *fp8_blocks);
    outputs.push_back(
        {t, Output::fp8_codes, {name, DType::f8e4m3, t->global_shape, nullptr, numel}});
    outputs.push_back({t,
                       Output::fp8_scales,
                       {mx::fp8_block_scale_name(name), DType::f32, scale_shape, nullptr,
                        static_cast<size_t>(shape_numel(scale_shape)) * sizeof(float)}});
  }

  // Greedy sharding in name order, as transformers does (a weight's scales stay in its shard).
  ExportStats stats;
  std::vector<std::vector<const Output*>> shards(1);
  int64_t cur = 0;
  for (const Output& o : outputs) {
    const auto bytes = static_cast<int64_t>(o.entry.nbytes);
    if (cur > 0 && cur + bytes > max_shard_bytes && o.part != Output::fp8_scales) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(&o);
    cur += bytes;
    stats.bytes += bytes;
  }
  stats.tensors = static_cast<int64_t>(outputs.size());
  stats.shards = static_cast<int64_t>(shards.size());

  const size_t n = shards.size();
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (size_t i = 0; i < n; ++i) {
    const std::string file = io::hf_shard_file(i, n);
    std::vector<io::SafetensorsEntry> entries;
    std::map<std::string, const Output*> by_name;
    for (const Output* o : shards[i]) {
      entries.push_back(o->entry);
      by_name[o->entry.name] = o;
      weight_map.emplace_back(o->entry.name, file);
    }
    io::SafetensorsWriter writer((staging / file).string(), entries, {{"format", "pt"}});
    for (const auto& slot : writer.layout()) {
      // One tensor assembled from every piece (quantized when asked), written, then freed.
      const Tensor data =
          output_data(meta, *by_name.at(slot.name), fp8_blocks.value_or(mx::Fp8BlockSize{}));
      writer.append(data.raw_data(), data.nbytes());
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
    if (fp8_blocks && name == "config.json") {
      detail::write_file_synced((staging / name).string(),
                                fp8_config_json(it->path(), *fp8_blocks));
      continue;
    }
    fs::copy_file(it->path(), staging / name, ec);
    if (ec) HP_THROW(IoError, "ckpt", it->path().string(), ": cannot copy: ", ec.message());
  }
  if (ec) HP_THROW(IoError, "ckpt", step_dir, ": cannot list: ", ec.message());
  publish(staging, out, out_dir, overwrite);
  guard.published = true;
  return stats;
}

}  // namespace hp::checkpoint
