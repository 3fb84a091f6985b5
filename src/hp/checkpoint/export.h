// A DCP checkpoint → a Hugging Face model directory (the model tensors only).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hp::checkpoint {

struct ExportStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
  int64_t shards = 0;
};

// Writes every tensor of the checkpoint at `step_dir` whose FQN does not start with "state." into
// `out_dir` as model.safetensors, or model-0000i-of-0000N.safetensors shards of at most
// `max_shard_bytes` (a larger tensor gets a shard of its own) plus model.safetensors.index.json —
// transformers' layout. Tensors are assembled from their pieces one at a time, so memory stays at
// the largest tensor. The extra files saved with the checkpoint (config.json and the tokenizer's:
// tokenizer.json, tokenizer_config.json, generation_config.json, ...; every file of the step dir
// but metadata.json, rank-* and the training config.yaml) are copied along.
//
// Everything is written into a staging directory beside out_dir (`<out_dir>.partial-<pid>`),
// removed if the export fails, and renamed to out_dir at the end, so out_dir never holds a mix of
// two exports. An out_dir that exists and is not empty is refused (IoError naming it) unless
// `overwrite`, which replaces it whole: the old directory is renamed away, the new one in, and
// the old one deleted.
//
// `file_name` maps a tensor's FQN to its name in the files (models::checkpoint_names gives the
// architecture's: DeepSeek-V4 keeps its original names); null writes the FQNs.
ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes = 2'000'000'000, bool overwrite = false,
                      const std::function<std::string(const std::string&)>& file_name = nullptr);

}  // namespace hp::checkpoint
