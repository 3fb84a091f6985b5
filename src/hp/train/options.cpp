// The config → options translations (options.h).
#include "hp/train/options.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "hp/core/error.h"
#include "hp/data/dataset.h"
#include "hp/fsdp/fsdp.h"
#include "hp/fusion/mode.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/models/hf/registry.h"
#include "hp/models/moe.h"
#include "hp/models/recompute.h"
#include "hp/mx/convert.h"
#include "hp/offload/activations.h"
#include "hp/offload/async_file.h"
#include "hp/optim/optimizer.h"
#include "hp/optim/schedule.h"
#include "hp/optim/state_offload.h"
#include "hp/parallel/context_parallel.h"
#include "hp/pipeline/schedule.h"

namespace hp::train {

data::DatasetOptions dataset_options(const Config& cfg) {
  data::DatasetOptions o;
  o.path = cfg.data.path;
  o.format = cfg.data.format;
  o.tokenizer = cfg.data.tokenizer;
  // A model directory's own tokenizer (tokenizer.json, or Kimi's tiktoken.model directory).
  if (o.tokenizer.empty() && !cfg.model.path.empty() && io::Tokenizer::in_dir(cfg.model.path))
    o.tokenizer = cfg.model.path;
  o.doc_separator = cfg.data.doc_separator;
  o.separator_token = cfg.data.separator_token;
  o.chat_template = cfg.data.chat_template;
  return o;
}

models::ModelConfig arch_model_config(const ModelSection& m, int64_t data_vocab, int64_t seq_len,
                                      int64_t separator_id) {
  const models::Architecture& arch = models::architecture_by_short_name(m.arch);
  if (!arch.buildable_from_sizes)
    HP_THROW(ValueError, "train", "model.arch = '", m.arch, "' (", arch.hf_class,
             ") cannot be built from sizes: use model.path");
  models::ModelConfig c;
  c.file = "model (config)";
  c.architecture = arch.hf_class;
  c.model_type = arch.model_type;
  c.vocab_size = m.vocab > 0 ? m.vocab : data_vocab;
  c.hidden_size = m.hidden;
  c.intermediate_size = m.intermediate;
  c.num_hidden_layers = m.layers;
  c.num_attention_heads = m.heads;
  c.num_key_value_heads = m.kv_heads;
  c.head_dim = m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
  c.max_position_embeddings = std::max<int64_t>(2048, seq_len + 1);
  c.rope_theta = m.rope_theta;
  c.tie_word_embeddings = m.tie_embeddings;
  c.attention_bias = arch.qkv_bias;
  if (separator_id >= 0) c.eos_token_ids = {separator_id};
  if (m.experts > 0) {
    c.num_experts = m.experts;
    c.num_experts_per_tok = m.experts_per_token;
    c.moe_intermediate_size = m.moe_intermediate > 0 ? m.moe_intermediate : m.intermediate;
    c.norm_topk_prob = true;
    c.router_aux_loss_coef = m.router_aux_loss_coef;
    c.output_router_logits = m.router_aux_loss_coef > 0;
  }
  // The family's own config.json keys at the defaults its transformers config gives them
  // (DeepSeek-V4: layer_types, mlp_layer_types, compress rates, hc_mult, index_topk, ...).
  if (arch.parse_extra) arch.parse_extra(io::parse_json("{}", c.file), c);
  // Sizes whose parameter count overflows int64 can only be mistakes: name the key before any
  // allocation (which would otherwise overflow its element count).
  const models::SizeKeys keys{"model.vocab",    "model.hidden",  "model.intermediate",
                              "model.layers",   "model.heads",   "model.kv_heads",
                              "model.head_dim", "model.experts", "model.moe_intermediate"};
  if (const models::SizeOverflow o = models::parameter_count_overflow(c, keys); !o.key.empty())
    HP_THROW(ValueError, "train", o.key, ": ", o.what);
  return c;
}

mx::ConvertSpec mx_convert_spec(const LowPrecisionConfig& c) {
  mx::ConvertSpec s;
  s.quant.elem = c.elem;
  s.quant.scale_mode = c.scale_mode;
  s.modules = c.modules;
  s.exclude = c.exclude;
  return s;
}

models::RecomputeSpec recompute_spec(const RecomputeConfig& c) {
  models::RecomputeSpec s;
  s.mode = c.mode;
  s.every_k_layers = c.every_k_layers;
  s.modules = c.modules;
  return s;
}

fsdp::FsdpOptions fsdp_options(const Config& cfg) {
  fsdp::FsdpOptions o;
  const FsdpConfig& f = cfg.parallel.fsdp;
  o.reshard_after_forward = f.reshard_after_forward;
  o.param_dtype = compute_dtype(cfg);
  o.reduce_dtype = f.reduce_dtype == ReduceDtype::bf16 ? DType::bf16 : DType::f32;
  o.master_tier = cfg.offload.params == HostOffload::host ? MemTier::host : MemTier::device;
  o.grad_tier = cfg.offload.grads == HostOffload::host ? MemTier::host : MemTier::device;
  // Zero-bubble schedules add a layer's weight gradients (W) after the backward that ends its
  // input gradients (I): its gradients are reduced once, after the step's last W.
  o.reduce_at_finish = cfg.parallel.pp > 1 && pipeline::splits_backward(pipeline_spec(cfg).kind);
  return o;
}

pipeline::ScheduleSpec pipeline_spec(const Config& cfg) {
  const PipelineConfig& p = cfg.parallel.pipeline;
  using K = pipeline::ScheduleKind;
  const PipelineSchedule s = p.schedule;
  const K kind = s == PipelineSchedule::gpipe              ? K::gpipe
                 : s == PipelineSchedule::one_f_one_b      ? K::one_f_one_b
                 : s == PipelineSchedule::interleaved_1f1b ? K::interleaved_1f1b
                 : s == PipelineSchedule::zb_h1            ? K::zb_h1
                                                           : K::zb_h2;
  return {kind, cfg.parallel.pp, cfg.training.grad_accum, p.virtual_stages};
}

optim::OptimizerOptions optimizer_options(const OptimizerConfig& c) {
  optim::OptimizerOptions o;
  o.adamw = {c.betas.at(0), c.betas.at(1), c.eps, c.weight_decay};
  o.muon.momentum = c.muon.momentum;
  o.muon.nesterov = c.muon.nesterov;
  o.muon.ns_steps = static_cast<int>(c.muon.ns_steps);
  o.muon.update_scale = c.muon.update_scale == MuonUpdateScale::shape ? optim::MuonScale::shape
                                                                      : optim::MuonScale::rms_match;
  o.muon.weight_decay = c.weight_decay;
  const bool muon = c.name == OptimizerName::muon;
  const auto run_rule = muon ? optim::Algorithm::auto_select : optim::Algorithm::adamw;
  // The routers' correction biases get no gradient (train/expert_balance.h moves them), nor do
  // DeepSeek-V4's hash-routing tables (expert ids): first, so that no group's weight decay
  // shrinks them either (AdamW leaves a zero-gradient parameter unchanged).
  o.groups.push_back({"router correction biases",
                      {"*.e_score_correction_bias", "*.tid2eid"},
                      optim::Algorithm::adamw,
                      1.0,
                      0.0});
  for (size_t i = 0; i < c.groups.size(); ++i) {
    const ParamGroupConfig& g = c.groups[i];
    optim::ParamGroup pg;
    pg.name = "optimizer.groups[" + std::to_string(i) + "]";
    pg.globs = g.params;
    pg.algorithm = g.optimizer == GroupOptimizer::auto_  ? run_rule
                   : g.optimizer == GroupOptimizer::muon ? optim::Algorithm::muon
                                                         : optim::Algorithm::adamw;
    pg.lr_scale = g.lr ? *g.lr / c.lr : 1.0;
    pg.weight_decay = g.weight_decay;
    o.groups.push_back(std::move(pg));
  }
  if (muon)
    o.groups.push_back({"optimizer.muon.adamw_params", c.muon.adamw_params, optim::Algorithm::adamw,
                        1.0, std::nullopt});
  o.default_algorithm = run_rule;
  return o;
}

optim::ScheduleSpec schedule_spec(const Config& c) {
  return {c.lr_scheduler.name, c.training.steps, c.lr_scheduler.warmup_steps,
          c.lr_scheduler.decay_fraction, c.lr_scheduler.min_lr_ratio};
}

DType compute_dtype(const Config& cfg) {
  const MixedPrecision mp = cfg.training.mixed_precision;
  // auto: bf16 only where native bf16 multiplies beat f32 ones (measured: AVX512_BF16 alone does
  // not say); elsewhere bf16 GEMMs widen to f32 and the conversions make bf16 the slower dtype.
  if (mp == MixedPrecision::auto_) return kernels::bf16_compute_pays() ? DType::bf16 : DType::f32;
  return mp == MixedPrecision::bf16 ? DType::bf16 : DType::f32;
}

std::string disk_tier_file(const Config& cfg, const Layout& layout, const std::string& what) {
  const std::filesystem::path dir = cfg.memory.disk_dir.empty()
                                        ? std::filesystem::path(cfg.run.dir) / "offload"
                                        : std::filesystem::path(cfg.memory.disk_dir);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // A crashed run's files would stay forever (every run names its own by host and pid), those of
  // ranks a resume at fewer ranks lacks included: each rank sweeps every dead one of its host.
  offload::remove_files_of_dead_processes(dir.string(), what, host);
  return (dir / offload::scratch_file_name(what, layout.mesh->comm()->rank(), host, ::getpid()))
      .string();
}

optim::StateOffloadOptions state_offload_options(const Config& cfg, const Layout& layout,
                                                 std::vector<std::string> group_prefixes) {
  optim::StateOffloadOptions o;
  const OffloadTier tier = cfg.offload.optimizer;
  o.placement = tier == OffloadTier::host   ? optim::StatePlacement::host
                : tier == OffloadTier::disk ? optim::StatePlacement::disk
                                            : optim::StatePlacement::device;
  o.group_prefixes = std::move(group_prefixes);
  o.file = disk_tier_file(cfg, layout, "optimizer");
  o.io_threads = static_cast<int>(cfg.memory.io_threads);
  o.params_on_host = cfg.offload.params == HostOffload::host;
  o.grads_on_host = cfg.offload.grads == HostOffload::host;
  return o;
}

models::ExpertParallelKernel expert_parallel_kernel(const MoEParallelConfig& c) {
  return {c.kernel == MoEKernel::megamoe, c.groups};
}

parallel::ContextMethod context_method(const ParallelConfig& p) {
  return p.cp_method == CpMethod::alltoall ? parallel::ContextMethod::alltoall
                                           : parallel::ContextMethod::ring;
}

offload::ActivationOffloadOptions activation_offload_options(const Config& cfg,
                                                             const Layout& layout) {
  offload::ActivationOffloadOptions o;
  o.min_bytes = cfg.offload.activations_min_bytes;
  if (cfg.offload.activations == OffloadTier::disk)
    o.disk_file = disk_tier_file(cfg, layout, "activations");
  o.io_threads = static_cast<int>(cfg.memory.io_threads);
  return o;
}

MetricsConfig metrics_config(const Config& cfg, int nranks) {
  MetricsConfig m = cfg.metrics;
  // mpirun hands ranks a pseudo-terminal: a bar would look right there but not in captured logs.
  if (nranks > 1 && m.progress == Progress::auto_) m.progress = Progress::lines;
  return m;
}

}  // namespace hp::train
