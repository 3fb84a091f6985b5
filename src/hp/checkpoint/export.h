// A DCP checkpoint → a Hugging Face model directory (the model tensors only).
#pragma once

#include <cstdint>
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
// the largest tensor. config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json
// and generation_config.json are copied from the step dir when present. Existing files of the
// same names in out_dir are replaced.
ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes = 2'000'000'000);

}  // namespace hp::checkpoint
