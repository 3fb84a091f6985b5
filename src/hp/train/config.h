// The typed config tree of a training run (`hp train CONFIG.yaml [--set key=value ...]`).
//
// YAML is only its serialized form: every field is a struct member with a default and a one-line
// doc, registered in its section's describe(Schema&) (see schema.h). `hp config schema` lists them.
// load_config reads a file, applies --set overrides, checks types, ranges and cross-field
// consistency, and throws one ValueError whose lines each read
//   [config] run.yaml:12: training.stpes: unknown key (did you mean training.steps?)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hp/core/enum_names.h"
#include "hp/data/dataset_format.h"
#include "hp/fusion/mode.h"
#include "hp/models/recompute_mode.h"
#include "hp/mx/format.h"
#include "hp/optim/schedule.h"

namespace hp::train {

class Schema;

// The keys that take one of a fixed set of words hold an enum. Each enum's spellings are its
// enum_names table (config_enums.cpp): the enumerator's own name, except auto_ ("auto"), on / off
// ("true" / "false") and one_f_one_b ("1f1b"). The YAML is parsed into them once, at load;
// train/options.cpp translates them into the components' own types. Where a component has the
// same choice (DataFormat, RecomputeMode, LrSchedule, FusionMode, MxElem, MxScaleMode) the config
// holds that very type, its table beside it, so the value reaching the component is the one parsed.
using DataFormat = data::DatasetFormat;
enum class AutoFlag { auto_, on, off };
enum class MuonUpdateScale { rms_match, shape };
enum class OptimizerName { adamw, muon };
enum class GroupOptimizer { auto_, adamw, muon };
using LrSchedule = optim::ScheduleKind;
enum class MixedPrecision { auto_, f32, bf16 };
using FusionMode = fusion::Mode;
enum class ReduceDtype { f32, bf16 };
enum class MoEKernel { megamoe, sequential };
enum class TpStyle { colwise, rowwise, sequence, replicate };
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, zb_h2 };
enum class CpMethod { ring, alltoall };
enum class LowPrecisionRecipe { none, mxfp8 };
using MxElem = mx::ElemFormat;
using MxScaleMode = mx::ScaleMode;
using RecomputeMode = models::RecomputeMode;
enum class OffloadTier { none, host, disk };  // none: the device tier
enum class HostOffload { none, host };
enum class ActivationSelect { all, largest, auto_ };
enum class Progress { auto_, bar, lines, none };

std::span<const EnumName<AutoFlag>> enum_names(AutoFlag);
std::span<const EnumName<MuonUpdateScale>> enum_names(MuonUpdateScale);
std::span<const EnumName<OptimizerName>> enum_names(OptimizerName);
std::span<const EnumName<GroupOptimizer>> enum_names(GroupOptimizer);
std::span<const EnumName<MixedPrecision>> enum_names(MixedPrecision);
std::span<const EnumName<ReduceDtype>> enum_names(ReduceDtype);
std::span<const EnumName<MoEKernel>> enum_names(MoEKernel);
std::span<const EnumName<TpStyle>> enum_names(TpStyle);
std::span<const EnumName<PipelineSchedule>> enum_names(PipelineSchedule);
std::span<const EnumName<CpMethod>> enum_names(CpMethod);
std::span<const EnumName<LowPrecisionRecipe>> enum_names(LowPrecisionRecipe);
std::span<const EnumName<OffloadTier>> enum_names(OffloadTier);
std::span<const EnumName<HostOffload>> enum_names(HostOffload);
std::span<const EnumName<ActivationSelect>> enum_names(ActivationSelect);
std::span<const EnumName<Progress>> enum_names(Progress);

// The model section (not models::ModelConfig, the typed config.json it leads to).
struct ModelSection {
  std::string path;  // Hugging Face directory (config.json + safetensors), or "" with arch
  // Short name of an architecture buildable from sizes (models/hf/registry.h: the table's rows,
  // including registered ones) for a freshly initialized model, or "" with path.
  std::string arch;
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  int64_t head_dim = 0;  // 0 = hidden / heads
  bool tie_embeddings = false;
  double rope_theta = 10000.0;
  // Mixture of experts (qwen3_moe, mixtral): experts > 0.
  int64_t experts = 0, experts_per_token = 0, moe_intermediate = 0;
  double router_aux_loss_coef = 0.001;
  // DeepSeek-V3's auxiliary-loss-free balancing: router bias step per optimizer step (0 = off).
  double router_bias_update_rate = 0.0;
  void describe(Schema& s);
  bool operator==(const ModelSection&) const = default;
};

// One dataset of a blend (data.sources).
struct DataSourceConfig {
  std::string path;    // as data.path
  double weight = 1;   // share of the training samples: weight / Σ weights
  std::optional<DataFormat> format;  // as data.format (unset: data.format)
  void describe(Schema& s);
  bool operator==(const DataSourceConfig&) const = default;
};

struct DataConfig {
  std::string path;  // corpus file or directory; indexed: PREFIX of .bin + .idx; or sources
  std::vector<DataSourceConfig> sources;  // several datasets blended by weight (data/blend.h)
  DataFormat format = DataFormat::text;
  std::string tokenizer;        // tokenizer.json ("" = the one in model.path, else byte-level)
  std::string doc_separator;    // text: splits files into documents ("" = one per file)
  std::string separator_token;  // token after each document ("" = the tokenizer's end-of-text)
  std::string chat_template;    // chat: tokenizer_config.json / .jinja ("" = beside tokenizer)
  bool shuffle = true;
  // Packed documents (docs/DATA.md): attention within each document / RoPE positions restarting
  // at each document. auto = on for chat data.
  AutoFlag document_mask = AutoFlag::auto_;
  AutoFlag reset_position_ids = AutoFlag::auto_;  // auto = as document_mask resolves
  void describe(Schema& s);
  bool operator==(const DataConfig&) const = default;
};

// Validation (train/evaluate.h): off unless data or split is given.
struct EvalConfig {
  std::string data;    // a dataset like data.path (format: eval.format), or "" with split
  std::optional<DataFormat> format;  // unset: data.format
  double split = 0;    // hold out this fraction of data.path's documents (0 = none)
  int64_t interval = 0, steps = 10;
  int64_t batch_size = 0;  // sequences per eval batch; 0 = training.batch_size / grad_accum
  bool enabled() const { return !data.empty() || split > 0; }
  void describe(Schema& s);
  bool operator==(const EvalConfig&) const = default;
};

struct MuonConfig {
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  MuonUpdateScale update_scale = MuonUpdateScale::rms_match;
  std::vector<std::string> adamw_params = {"*embed*", "*lm_head*"};
  void describe(Schema& s);
  bool operator==(const MuonConfig&) const = default;
};

struct ParamGroupConfig {
  std::vector<std::string> params;  // FQN globs
  GroupOptimizer optimizer = GroupOptimizer::auto_;
  std::optional<double> lr;         // absolute peak lr (scaled by the schedule)
  std::optional<double> weight_decay;
  void describe(Schema& s);
  bool operator==(const ParamGroupConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::adamw;
  double lr = 3e-4;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;
  MuonConfig muon;
  std::vector<ParamGroupConfig> groups;
  void describe(Schema& s);
  bool operator==(const OptimizerConfig&) const = default;
};

struct LrSchedulerConfig {
  LrSchedule name = LrSchedule::cosine;
  int64_t warmup_steps = 0;
  double decay_fraction = 0.1;
  double min_lr_ratio = 0.0;
  void describe(Schema& s);
  bool operator==(const LrSchedulerConfig&) const = default;
};

struct TrainingConfig {
  int64_t steps = 1000, seed = 0, batch_size = 8, seq_len = 2048, grad_accum = 1;
  double grad_clip = 1.0;
  MixedPrecision mixed_precision = MixedPrecision::bf16;  // compute dtype (f32 masters either way)
  std::string sample_prompt = "The";  // generated from at the end of the run (rank 0)
  int64_t sample_tokens = 0;          // 0 = no sample
  // Stop (as diverged, without saving) after this many consecutive steps whose update was
  // skipped for a non-finite gradient norm; 0 = never stop.
  int64_t max_skipped_steps = 10;
  // Vector chains of the models through DVM fused regions (fusion/mode.h).
  FusionMode fusion = FusionMode::auto_;
  void describe(Schema& s);
  bool operator==(const TrainingConfig&) const = default;
};

struct FsdpConfig {
  bool reshard_after_forward = true;
  // parallel.fsdp.param_dtype is a deprecated alias of training.mixed_precision (the gather dtype).
  ReduceDtype reduce_dtype = ReduceDtype::f32;
  void describe(Schema& s);
  bool operator==(const FsdpConfig&) const = default;
};

// parallel.moe: how routed experts run under expert parallelism (models::ExpertParallelKernel).
struct MoEParallelConfig {
  MoEKernel kernel = MoEKernel::megamoe;  // used when parallel.ep > 1
  int64_t groups = 2;                     // MegaMoE expert groups (G)
  void describe(Schema& s);
  bool operator==(const MoEParallelConfig&) const = default;
};

// One entry of parallel.plan: modules (FQN globs) and how tensor parallelism splits them.
struct PlanEntryConfig {
  std::vector<std::string> modules;
  TpStyle style = TpStyle::colwise;
  void describe(Schema& s);
  bool operator==(const PlanEntryConfig&) const = default;
};

// parallel.pipeline: how the model is cut into stages and the schedule that runs them (pp > 1).
struct PipelineConfig {
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // (pipeline/schedule.h)
  int64_t microbatches = 0;              // per step; 0 = training.grad_accum (sets it when given)
  std::vector<double> layers_per_stage;  // decoder layers of each stage; [] = balanced by cost
  int64_t virtual_stages = 1;            // model chunks per rank (interleaved_1f1b)
  std::vector<double> stage_ranks;       // ranks of each stage (MPMD); [] = world / pp each
  void describe(Schema& s);
  bool operator==(const PipelineConfig&) const = default;
};

struct ParallelConfig {
  int64_t pp = 1;  // pipeline-parallel degree (outermost mesh axis)
  int64_t dp_shard = -1, dp_replicate = 1, tp = 1, cp = 1;
  int64_t ep = 1;  // expert-parallel degree, borrowed from dp_shard × cp
  CpMethod cp_method = CpMethod::ring;  // (parallel/context_parallel.h)
  bool sequence_parallel = true;
  std::vector<PlanEntryConfig> plan;  // overrides of the architecture's TP plan, per module
  FsdpConfig fsdp;
  PipelineConfig pipeline;
  MoEParallelConfig moe;
  void describe(Schema& s);
  bool operator==(const ParallelConfig&) const = default;
};

struct LowPrecisionConfig {
  LowPrecisionRecipe recipe = LowPrecisionRecipe::none;
  MxElem elem = MxElem::e4m3;
  MxScaleMode scale_mode = MxScaleMode::rceil;
  std::vector<std::string> modules = {"*"};
  std::vector<std::string> exclude = {"*lm_head*"};
  void describe(Schema& s);
  bool operator==(const LowPrecisionConfig&) const = default;
};

struct RecomputeConfig {
  RecomputeMode mode = RecomputeMode::none;
  int64_t every_k_layers = 1;
  std::vector<std::string> modules;  // selective: block globs within a layer (models/recompute.h)
  void describe(Schema& s);
  bool operator==(const RecomputeConfig&) const = default;
};

// Memory tiers (HyperOffload, docs/ARCHITECTURE.md §4c).
struct MemoryConfig {
  // Cap of the device tier, the memory computation runs in ("6GiB", "512MiB"; "" = unlimited).
  std::string device_budget;
  std::string disk_dir;  // the disk tier's files ("" = <run.dir>/offload)
  int64_t io_threads = 4;  // pread/pwrite workers of the disk tier, per rank
  void describe(Schema& s);
  bool operator==(const MemoryConfig&) const = default;
};

// Where state lives between uses: none (the device tier), host or disk.
struct OffloadConfig {
  OffloadTier optimizer = OffloadTier::none;
  HostOffload params = HostOffload::none;  // FSDP's f32 master shards
  HostOffload grads = HostOffload::none;   // their gradients
  // Tensors decoder layers (or their blocks) save for backward (offload/activations.h).
  OffloadTier activations = OffloadTier::none;
  int64_t activations_every_k_layers = 1;        // layers i with i % k == 0
  std::vector<std::string> activations_modules;  // block globs within a layer (empty: whole layers)
  int64_t activations_min_bytes = 65536;         // smaller storages stay on the device
  // all: every block the two keys above select | largest: of those, the largest savers first until
  // the memory plan fits memory.device_budget | auto: as largest, each block recomputed or swapped
  // by cost (train/memory_plan.h)
  ActivationSelect activations_select = ActivationSelect::all;
  void describe(Schema& s);
  bool operator==(const OffloadConfig&) const = default;
};

struct CheckpointConfig {
  int64_t interval = 0, keep = 3;
  bool save_final = true;
  void describe(Schema& s);
  bool operator==(const CheckpointConfig&) const = default;
};

struct MetricsConfig {
  int64_t log_every = 10;
  bool jsonl = true;
  double peak_tflops = 0;         // MFU denominator; 0 = the cached GEMM peak of the compute dtype
  Progress progress = Progress::auto_;  // auto: a bar on a terminal
  std::vector<double> profile_steps;  // [first, last] steps to profile; [] = off (train/profile.h)
  int64_t profile_max_events = 500000;  // the profiler's event cap (profiler::kDefaultMaxEvents)
  void describe(Schema& s);
  bool operator==(const MetricsConfig&) const = default;
};

struct RunConfig {
  std::string dir = "runs/default";
  void describe(Schema& s);
  bool operator==(const RunConfig&) const = default;
};

// Lines a run prints once before its first step: the deprecated keys its config used
// ("[config] parallel.fsdp.param_dtype is deprecated: use training.mixed_precision"). Not part of
// the config's value: configs compare equal whatever their notes, and to_yaml does not write them.
struct ConfigNotes {
  std::vector<std::string> lines;
  bool operator==(const ConfigNotes&) const { return true; }
};

struct Config {
  ModelSection model;
  DataConfig data;
  EvalConfig eval;
  OptimizerConfig optimizer;
  LrSchedulerConfig lr_scheduler;
  TrainingConfig training;
  ParallelConfig parallel;
  LowPrecisionConfig low_precision;
  RecomputeConfig recompute;
  MemoryConfig memory;
  OffloadConfig offload;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  RunConfig run;
  ConfigNotes notes;  // filled by parse_config
  void describe(Schema& s);
  bool operator==(const Config&) const = default;
};

// What `hp train --resume` does with a key whose value differs from the checkpoint's config.yaml
// (train/state.h config_changes): a `math` key changes what the run computes (model, data,
// optimizer, lr schedule, the batch and step count, seed, precision, MX, fusion) and is refused
// without --allow-config-change; a `free` key (the parallel layout, recompute, offload, memory,
// eval passes, logging, checkpoints, run.dir) is logged and allowed. One table beside the schema
// (config.cpp) classifies every field; an unclassified path is an internal error.
enum class ResumeChange { math, free };
ResumeChange resume_change(std::string_view path);

// data.document_mask and data.reset_position_ids as this run applies them: "auto" is on when the
// training data has a loss mask (chat: JSONL or hp data prepare --format chat); reset_position_ids
// "auto" follows the resolved document_mask.
struct DocumentFlags {
  bool mask = false;             // attention within each packed document
  bool reset_positions = false;  // RoPE positions restart at each packed document
  bool any() const { return mask || reset_positions; }
};
DocumentFlags document_flags(const Config& c, bool masked_data);

// Parses YAML text (`source` names it in messages: the file path), applies `sets` ("key=value",
// from --set) and validates. Throws ValueError with every problem found, one per line.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& sets = {});
// Reads the file, then as parse_config.
Config load_config(const std::string& path, const std::vector<std::string>& sets = {});
// The resolved config as YAML; parse_config of it gives back an equal Config.
std::string to_yaml(const Config& config);
// `hp config schema`: every field with its type, default and doc.
std::string schema_text();

}  // namespace hp::train
