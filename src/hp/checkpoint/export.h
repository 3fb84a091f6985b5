// A DCP checkpoint → a Hugging Face model directory (the model tensors only).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hp/mx/fp8_blocks.h"

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
// `fp8_blocks` (hp ckpt export-hf --fp8-blocks) writes the format of DeepSeek-V3 / Kimi-K2
// checkpoints (mx/fp8_blocks.h): every tensor fp8_block_quantized() names becomes F8_E4M3 codes
// plus an F32 `<name>_scale_inv` per block, and config.json gets the matching
// quantization_config (IoError when the checkpoint has no config.json to put it in).
// `file_name` maps a tensor's FQN to its name in the files (models::checkpoint_names gives the
// architecture's: DeepSeek-V4 keeps its original names); null writes the FQNs.
ExportStats export_hf(const std::string& step_dir, const std::string& out_dir,
                      int64_t max_shard_bytes = 2'000'000'000, bool overwrite = false,
                      std::optional<mx::Fp8BlockSize> fp8_blocks = std::nullopt,
                      const std::function<std::string(const std::string&)>& file_name = nullptr);

// The tensors the FP8 block format quantizes: the 2-D linear weights of the decoder layers
// ("model.layers.<i>.….weight"), not norms ("…norm.weight"), router gates ("….gate.weight" of an
// MoE block), embeddings or lm_head.
bool fp8_block_quantized(const std::string& fqn, const std::vector<int64_t>& shape);

}  // namespace hp::checkpoint
