// What the trainer builds from the config tree: the data (training sources and validation set),
// the model (from a Hugging Face directory or from an architecture and size), and everything a
// run holds before its first step (build_run, shared by `hp train` and `hp eval`). The rank layout
// and the model transforms are the parallelize step's (parallelize.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hp/data/loader.h"
#include "hp/models/hf/config.h"
#include "hp/train/config.h"
#include "hp/train/options.h"
#include "hp/train/parallelize.h"

namespace hp::data {
class TokenDataset;
}  // namespace hp::data
namespace hp::models {
class CausalLM;
}

namespace hp::train {

struct MemoryPlan;

// The run's data: the training sources (data.path alone, weight 1, or data.sources), without the
// documents eval.split holds out, and the validation set (eval.data, or those documents).
struct RunData {
  std::vector<data::LoaderSource> sources;
  std::vector<std::string> names;                  // each source's path as configured
  std::shared_ptr<const data::TokenDataset> eval;  // null without an eval section
  std::string eval_name;                           // eval.data, or "N% of data.path" (split)
  bool blend = false;                              // data.sources given
};
// Loads every dataset (the data errors name its path; a source's also its data.sources[i]).
RunData load_run_data(const Config& cfg);

// model.path → loaded in f32 (the masters); model.arch → randomly initialized (HF init) from the
// current default generator. Throws ValueError when the data's ids do not fit the vocabulary.
std::shared_ptr<models::CausalLM> build_causal_lm(const Config& cfg,
                                                  const data::TokenDataset& data);

// ValueError when `data`'s ids do not fit `model`'s vocabulary (naming `name` and the first id
// outside it); indexed datasets are checked as read instead (data/dataset.h).
void check_data_fits(const models::CausalLM& model, const data::TokenDataset& data,
                     const std::string& name, const Config& cfg);

// MFU numerator: model FLOPs per trained token (metrics.h flops_per_token).
double model_flops_per_token(const models::CausalLM& model, const Config& cfg);

// Files stored beside each checkpoint so it exports to a Hugging Face directory on its own:
// config.json, the resolved config.yaml, and the tokenizer files of model.path / data.tokenizer
// (byte-level text: its vocabulary as a tokenizer.json, io/byte_level_tokenizer.h).
std::vector<std::pair<std::string, std::string>> checkpoint_files(const Config& cfg,
                                                                  const models::CausalLM& model);

// Everything a run holds before its first step, built in this order on every rank: the data, the
// model (seeded by training.seed, checked against every dataset), the parallelize step, the
// optimizer and the training loader (at its start; restore() moves it).
struct RunSetup {
  RunData data;
  std::shared_ptr<models::CausalLM> model;
  int64_t num_parameters = 0;  // of the whole model, before it is split
  double flops_per_token = 0;  // model_flops_per_token, before it is split
  Parallelized par;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<data::DataLoader> loader;
  DocumentFlags documents;  // resolved from the training data; the loader returns positions
  // Runs after each micro-batch's forward of decoder layers [begin, end) (the MoE bias balancer
  // counts their expert loads; the balancer itself is an optimizer hook: train/expert_balance.h).
  std::function<void(int64_t begin, int64_t end)> after_forward;
};
// `plan`: the memory plan of cfg when the caller has one (check_device_budget); with
// offload.activations_select largest | auto it is computed here otherwise.
RunSetup build_run(const Config& cfg, const Layout& layout, const MemoryPlan* plan = nullptr);

class TrainStep;
// The run's training step (step.h): the pipeline step under pp > 1, else the plain one. `run`,
// `layout` and `world` must outlive it.
std::unique_ptr<TrainStep> make_step(RunSetup& run, const Layout& layout, const Config& cfg,
                                     dist::Communicator& world);

}  // namespace hp::train
