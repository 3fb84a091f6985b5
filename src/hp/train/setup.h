// What the trainer builds from the config tree: the rank layout, the dataset options, the model
// (from a Hugging Face directory or from an architecture and size), and the specs of the model
// transforms (MXFP8, recompute, FSDP / mixed precision).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/models/config.h"
#include "hp/train/config.h"

namespace hp::data {
struct DatasetOptions;
class TokenDataset;
}  // namespace hp::data
namespace hp::models {
class CausalLM;
struct RecomputeSpec;
}  // namespace hp::models
namespace hp::mx {
struct ConvertSpec;
}
namespace hp::fsdp {
struct FsdpOptions;
}

namespace hp::train {

// Data-parallel placement of this rank: world rank = replicate index · dp_shard + shard index.
struct Layout {
  int dp_rank = 0, dp_size = 1;  // for slicing the global batch
  int64_t dp_shard = 1, dp_replicate = 1;
  dist::CommPtr shard_comm;      // the dp_shard axis (FSDP)
  dist::CommPtr replicate_comm;  // the dp_replicate axis (HSDP); null when dp_replicate = 1
};
// Resolves dp_shard -1 and checks the degrees against the world size and the batch split.
// Throws ValueError("[train] ...") naming the config keys and the world size.
Layout parallel_layout(const Config& cfg, const dist::CommPtr& world);

// data.* (tokenizer "" → model.path/tokenizer.json when it exists, else byte-level).
data::DatasetOptions dataset_options(const Config& cfg);

// The models::ModelConfig of an arch-and-size model section; vocab 0 takes `data_vocab`.
models::ModelConfig arch_model_config(const ModelConfig& m, int64_t data_vocab, int64_t seq_len,
                                      int64_t separator_id);
// model.path → loaded in f32 (the masters); model.arch → randomly initialized (HF init) from the
// current default generator. Throws ValueError when the data's ids do not fit the vocabulary.
std::shared_ptr<models::CausalLM> build_causal_lm(const Config& cfg,
                                                  const data::TokenDataset& data);

mx::ConvertSpec mx_convert_spec(const LowPrecisionConfig& c);
models::RecomputeSpec recompute_spec(const RecomputeConfig& c);
fsdp::FsdpOptions fsdp_options(const Config& cfg);

// MFU numerator: model FLOPs per trained token (metrics.h flops_per_token).
double model_flops_per_token(const models::CausalLM& model, const Config& cfg);

// Files stored beside each checkpoint so it exports to a Hugging Face directory on its own:
// config.json, the resolved config.yaml, and the tokenizer files of model.path / data.tokenizer.
std::vector<std::pair<std::string, std::string>> checkpoint_files(const Config& cfg,
                                                                  const models::CausalLM& model);

}  // namespace hp::train
