// The config → options translations, all here: each component's options from the config tree
// (the dataset, an arch-and-size model, the parallelize step's transforms — MX, recompute, FSDP,
// expert and context parallelism, activation offload —, the pipeline schedule, the optimizer, its
// lr schedule and state placement, the fusion mode, the metrics log). The components never read
// the config; the trainer, `hp memory plan` and `hp eval` build them from these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/core/dtype.h"
#include "hp/train/config.h"
#include "hp/train/layout.h"

namespace hp::data {
struct DatasetOptions;
}
namespace hp::fsdp {
struct FsdpOptions;
}
namespace hp::fusion {
enum class Mode;
}
namespace hp::models {
struct ExpertParallelKernel;
struct ModelConfig;
struct RecomputeSpec;
}  // namespace hp::models
namespace hp::mx {
struct ConvertSpec;
}
namespace hp::offload {
struct ActivationOffloadOptions;
}
namespace hp::optim {
struct OptimizerOptions;
struct ScheduleSpec;
struct StateOffloadOptions;
}  // namespace hp::optim
namespace hp::parallel {
enum class ContextMethod;
}
namespace hp::pipeline {
struct ScheduleSpec;
}

namespace hp::train {

// data.* (tokenizer "" → model.path/tokenizer.json when it exists, else byte-level).
data::DatasetOptions dataset_options(const Config& cfg);

// The models::ModelConfig of an arch-and-size model section: the architecture table's row of
// model.arch (models/hf/registry.h) gives the class and model_type; vocab 0 takes `data_vocab`.
// Throws ValueError for an architecture unknown or not buildable from sizes.
models::ModelConfig arch_model_config(const ModelSection& m, int64_t data_vocab, int64_t seq_len,
                                      int64_t separator_id);

// The compute dtype (training.mixed_precision; f32 masters either way).
DType compute_dtype(const Config& cfg);

// The parallelize step's transforms (parallelize.h).
mx::ConvertSpec mx_convert_spec(const LowPrecisionConfig& c);
models::RecomputeSpec recompute_spec(const RecomputeConfig& c);
fsdp::FsdpOptions fsdp_options(const Config& cfg);
models::ExpertParallelKernel expert_parallel_kernel(const MoEParallelConfig& c);
parallel::ContextMethod context_method(const ParallelConfig& p);
offload::ActivationOffloadOptions activation_offload_options(const Config& cfg,
                                                             const Layout& layout);

// parallel.pipeline's schedule for the layout.
pipeline::ScheduleSpec pipeline_spec(const Config& cfg);

optim::OptimizerOptions optimizer_options(const OptimizerConfig& c);
optim::ScheduleSpec schedule_spec(const Config& c);

// The disk tier's scratch file for `what` ("optimizer", "activations"): under memory.disk_dir
// (default <run.dir>/offload), per rank and process (ranks share the directory, and so may
// concurrent runs). The files of this rank's `what` that a dead process left (a crash) are
// removed first.
std::string disk_tier_file(const Config& cfg, const Layout& layout, const std::string& what);

// offload.optimizer and memory.* as the optimizer's state placement: streamed per FSDP group
// (`group_prefixes`, Parallelized::fsdp_prefixes), the disk tier's file per rank and process under
// memory.disk_dir (<run.dir>/offload).
optim::StateOffloadOptions state_offload_options(const Config& cfg, const Layout& layout,
                                                 std::vector<std::string> group_prefixes);


// metrics.* for a run over `nranks` ranks (progress auto prints lines, not a bar, under a launch).
MetricsConfig metrics_config(const Config& cfg, int nranks);

}  // namespace hp::train
