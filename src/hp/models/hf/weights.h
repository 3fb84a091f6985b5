// Hugging Face safetensors weights in and out of a model (name match on parameter FQNs).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hp/models/transformer.h"

namespace hp::models {

// Copies every parameter of `model` from the checkpoint at `path` (a directory with
// model.safetensors or model.safetensors.index.json + shards, or a file), converting dtypes.
// Throws IoError "[models] <path>: ..." naming a missing tensor, an unexpected tensor or a
// shape mismatch (both shapes). lm_head.weight in a tied checkpoint and rotary inv_freq buffers
// are ignored, as transformers does. With the model's `config` (its config.json):
// - FP8 weights are dequantized with their `<name>_scale_inv` block scales
//   (config->fp8_blocks, mx/fp8_blocks.h); a missing scale, one of the wrong shape or dtype, or
//   FP8 weights without quantization_config throw IoError naming the file, tensor and value;
// - next-token-prediction layers (model.layers.<num_hidden_layers + k>.*, k <
//   num_nextn_predict_layers) are skipped with one line on stderr.
// `checkpoint_name` (Architecture::checkpoint_name; null = identity) maps a parameter FQN to
// the tensor's name in the files.
void load_weights(nn::Module& model, const std::string& path, const ModelConfig* config = nullptr,
                  const std::function<std::string(const std::string&)>& checkpoint_name = nullptr);

// Checks `config`'s sizes against the safetensors headers at `path` (no tensor data is read),
// before a model is built for them: the layer count the names model.layers.<i>.* imply must be
// num_hidden_layers (next-token-prediction layers after them not counted), and the tensors whose
// shapes every architecture shares must agree with vocab_size, hidden_size, intermediate_size, the
// attention heads × head_dim, the expert count and the experts' width (moe_intermediate_size;
// Mixtral: intermediate_size). Throws IoError
// "[models] <config file>: <key> = <value> ...: <path> ..." naming the tensor and its shape.
// load_model calls it; other tensors are checked by load_weights.
void check_config_against_weights(const ModelConfig& config, const std::string& path);

// The architecture's FQN → checkpoint-name map (Architecture::checkpoint_name) for the model
// whose config.json is at `path` (a directory or the file); null when the names are the FQNs or
// there is no config.json.
std::function<std::string(const std::string&)> checkpoint_names(const std::string& path);

// Writes `out_dir`/config.json and the weights: model.safetensors when they fit in
// `max_shard_bytes`, else model-0000i-of-0000N.safetensors + model.safetensors.index.json
// (transformers' layout). `tokenizer_dir` (optional) supplies tokenizer.json,
// tokenizer_config.json, special_tokens_map.json and generation_config.json, copied when present.
void save_pretrained(const CausalLM& model, const std::string& out_dir,
                     int64_t max_shard_bytes = int64_t(5) << 30,
                     const std::string& tokenizer_dir = "");

}  // namespace hp::models
