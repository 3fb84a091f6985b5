// What the trainer builds from the config tree: the dataset options and the model (from a Hugging
// Face directory or from an architecture and size). The rank layout and the model transforms are
// the parallelize step's (parallelize.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hp/models/config.h"
#include "hp/train/config.h"

namespace hp::data {
struct DatasetOptions;
class TokenDataset;
}  // namespace hp::data
namespace hp::models {
class CausalLM;
}

namespace hp::train {

// data.* (tokenizer "" → model.path/tokenizer.json when it exists, else byte-level).
data::DatasetOptions dataset_options(const Config& cfg);

// The models::ModelConfig of an arch-and-size model section: the architecture table's row of
// model.arch (models/registry.h) gives the class and model_type; vocab 0 takes `data_vocab`.
// Throws ValueError for an architecture unknown or not buildable from sizes.
models::ModelConfig arch_model_config(const ModelSection& m, int64_t data_vocab, int64_t seq_len,
                                      int64_t separator_id);
// model.path → loaded in f32 (the masters); model.arch → randomly initialized (HF init) from the
// current default generator. Throws ValueError when the data's ids do not fit the vocabulary.
std::shared_ptr<models::CausalLM> build_causal_lm(const Config& cfg,
                                                  const data::TokenDataset& data);

// MFU numerator: model FLOPs per trained token (metrics.h flops_per_token).
double model_flops_per_token(const models::CausalLM& model, const Config& cfg);

// Files stored beside each checkpoint so it exports to a Hugging Face directory on its own:
// config.json, the resolved config.yaml, and the tokenizer files of model.path / data.tokenizer.
std::vector<std::pair<std::string, std::string>> checkpoint_files(const Config& cfg,
                                                                  const models::CausalLM& model);

}  // namespace hp::train
