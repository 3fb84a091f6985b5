// The parallelize step (parallelize.h).
#include "hp/train/parallelize.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "hp/checkpoint/dcp.h"
#include "hp/core/error.h"
#include "hp/fsdp/fsdp.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/models/moe.h"
#include "hp/models/recompute.h"
#include "hp/models/hf/registry.h"
#include "hp/models/tp_plan.h"
#include "hp/models/transformer.h"
#include "hp/mx/convert.h"
#include "hp/offload/activations.h"
#include "hp/parallel/context_parallel.h"
#include "hp/moe/expert_parallel.h"
#include "hp/parallel/vocab_parallel.h"
#include "hp/train/pipeline_step.h"
#include "hp/train/state.h"

namespace hp::train {

namespace {

mx::ConvertSpec mx_convert_spec(const LowPrecisionConfig& c) {
  mx::ConvertSpec s;
  s.quant.elem = c.elem == "e5m2" ? mx::ElemFormat::e5m2 : mx::ElemFormat::e4m3;
  s.quant.scale_mode = c.scale_mode == "floor" ? mx::ScaleMode::floor : mx::ScaleMode::rceil;
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
  o.reduce_dtype = f.reduce_dtype == "bf16" ? DType::bf16 : DType::f32;
  o.master_tier = cfg.offload.params == "host" ? MemTier::host : MemTier::device;
  o.grad_tier = cfg.offload.grads == "host" ? MemTier::host : MemTier::device;
  // Zero-bubble schedules add a layer's weight gradients (W) after the backward that ends its
  // input gradients (I): its gradients are reduced once, after the step's last W.
  o.reduce_at_finish = cfg.parallel.pp > 1 && pipeline::splits_backward(pipeline_spec(cfg).kind);
  return o;
}

// Step 1: the architecture's plan over tp; returns the DTensors of the parameters it split.
shard::StylePtr style_by_name(const std::string& name, bool sequence_parallel) {
  const shard::Placement region =
      sequence_parallel ? shard::Placement{shard::Shard{1}} : shard::Placement{shard::Replicate{}};
  if (name == "colwise") return std::make_shared<shard::ColwiseParallel>(0, region);
  if (name == "rowwise") return std::make_shared<shard::RowwiseParallel>(0, region);
  if (name == "sequence") return std::make_shared<shard::SequenceParallel>();
  return nullptr;  // replicate
}

// The architecture's plan with parallel.plan applied module by module: both are resolved to exact
// module FQNs, and a module a user entry matches takes that entry's style (replicate: none). A
// block whose children a user entry changed no longer enters the region once for all of them:
// its remaining column-parallel children enter it themselves.
shard::ShardingPlan with_overrides(models::CausalLM& model, const shard::ShardingPlan& plan,
                                   const std::vector<PlanEntryConfig>& overrides,
                                   bool sequence_parallel) {
  if (overrides.empty()) return plan;
  struct Rule {
    std::string fqn;
    shard::StylePtr style;
    bool user = false;
  };
  std::vector<Rule> rules;
  std::vector<bool> used(overrides.size(), false);
  for (const auto& [fqn, m] : model.named_modules()) {
    Rule rule{fqn, nullptr, false};
    for (size_t i = 0; i < overrides.size() && !rule.user; ++i)
      for (const std::string& glob : overrides[i].modules)
        if (nn::glob_match(glob, fqn)) {
          rule.style = style_by_name(overrides[i].style, sequence_parallel);
          rule.user = used[i] = true;
          break;
        }
    for (size_t r = 0; r < plan.size() && !rule.user && !rule.style; ++r)
      if (nn::glob_match(plan[r].first, fqn)) rule.style = plan[r].second;
    rules.push_back(std::move(rule));
  }
  for (size_t i = 0; i < overrides.size(); ++i)
    if (!used[i])
      HP_THROW(ValueError, "train", "parallel.plan[", i, "].modules matches no module of the model",
               " (first glob: '", overrides[i].modules.front(), "')");
  const shard::Placement region =
      sequence_parallel ? shard::Placement{shard::Shard{1}} : shard::Placement{shard::Replicate{}};
  auto under = [](const std::string& fqn, const std::string& block) {
    return fqn.rfind(block + ".", 0) == 0;
  };
  for (Rule& block : rules) {
    if (block.user || !std::dynamic_pointer_cast<const shard::PrepareModuleInput>(block.style))
      continue;
    bool changed = false;
    for (const Rule& r : rules) changed |= r.user && under(r.fqn, block.fqn);
    if (!changed) continue;
    block.style = nullptr;
    for (Rule& r : rules)
      if (auto col = std::dynamic_pointer_cast<const shard::ColwiseParallel>(r.style);
          col && !r.user && under(r.fqn, block.fqn) && !col->input_layout())
        r.style = std::make_shared<shard::ColwiseParallel>(col->head_dim(), region);
  }
  shard::ShardingPlan out;
  for (const Rule& r : rules)
    if (r.style) out.emplace_back(r.fqn, r.style);
  return out;
}

shard::ShardedParameters apply_tensor_parallel(models::CausalLM& model, const Layout& l,
                                               bool sequence_parallel,
                                               const std::vector<PlanEntryConfig>& overrides) {
  if (l.tp == 1) return {};
  const models::ModelConfig& c = model.config();
  // First: an architecture without a plan (DeepSeek-V3) is named before its head counts.
  const shard::ShardingPlan arch_plan = models::tp_plan(c, sequence_parallel);
  // What the plan splits evenly (the vocabulary need not divide: its shards follow the chunk rule).
  const std::pair<const char*, int64_t> even[] = {
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads",
       models::architecture(c.architecture).shared_kv_head ? 0 : c.num_key_value_heads},
      {"intermediate_size", c.num_experts > 0 ? 0 : c.intermediate_size}};
  for (auto [key, v] : even)
    if (v % l.tp != 0)
      HP_THROW(ValueError, "train", "parallel.tp = ", l.tp, " does not divide the model's ", key,
               " (", v, ")");
  shard::ShardingPlan plan =
      with_overrides(model, arch_plan, overrides, sequence_parallel);
  if (l.pp > 1) {
    // A pipeline stage holds some of the modules the architecture's plan names.
    const auto modules = model.named_modules();
    std::erase_if(plan, [&](const auto& entry) {
      return std::none_of(modules.begin(), modules.end(),
                          [&](const auto& m) { return nn::glob_match(entry.first, m.first); });
    });
  }
  shard::ShardedParameters tp = shard::parallelize_module(model, l.mesh, "tp", plan);
  // The head gives this rank's vocabulary columns: the loss runs on them, and forward (generation)
  // gathers them.
  if (!model.lm_head && !model.tied_head) return tp;  // the head is on another pipeline stage
  const int64_t offset = shard::chunk_range(c.vocab_size, l.tp, l.tp_comm->rank()).start;
  dist::CommPtr comm = l.tp_comm;
  models::VocabSplit split;
  split.gather = [comm](const Tensor& x) { return shard::gather_from_region(x, -1, comm); };
  split.cross_entropy = [comm, offset](const Tensor& logits, const Tensor& targets) {
    return parallel::vocab_parallel_cross_entropy(logits, targets, offset, comm);
  };
  model.set_vocab_split(std::move(split));
  return tp;
}

// The parameters of routed experts (`<layer>.mlp.experts.<e>.…`; shared experts are dense).
constexpr const char* kExpertGlob = "*.experts.*";
bool is_expert_param(const std::string& fqn) {
  return nn::glob_match(kExpertGlob, fqn);
}

// Step 2: every MoE block runs this rank's experts over the EP group and drops the others; returns
// the FQNs of the parameters dropped (other ranks hold them).
std::set<std::string> apply_expert_parallel(models::CausalLM& model, const Layout& l,
                                            const MoEParallelConfig& moe_cfg) {
  std::set<std::string> dropped;
  if (l.ep == 1) return dropped;
  for (const auto& [fqn, t] : model.named_parameters()) dropped.insert(fqn);
  // Found first: dropping experts frees modules named_modules() lists.
  std::vector<std::pair<std::string, models::ExpertParallelBlock*>> blocks;
  for (auto& [fqn, m] : model.named_modules())
    if (auto* moe = dynamic_cast<models::ExpertParallelBlock*>(m)) blocks.emplace_back(fqn, moe);
  for (auto& [fqn, moe] : blocks) {
    const int64_t e = moe->num_experts();
    if (moe::local_experts(e, l.ep, l.ep - 1).count == 0)
      HP_THROW(ValueError, "train", "parallel.ep = ", l.ep, " leaves an ep rank without an ",
               "expert (", fqn, " has ", e, " experts, in chunks of ", (e + l.ep - 1) / l.ep, ")");
    moe->set_expert_parallel(l.ep_comm, {moe_cfg.kernel == "megamoe", moe_cfg.groups});
    moe->keep_local_experts();
  }
  if (blocks.empty())
    HP_THROW(ValueError, "train", "parallel.ep = ", l.ep,
             " needs a mixture-of-experts model; this one has no MoE layer");
  for (const auto& [fqn, t] : model.named_parameters()) dropped.erase(fqn);
  return dropped;
}

// Step 6's groups: every decoder layer, and with EP its local experts as a second group sharded
// over the ranks with the same expert coordinate (the layer's forward gathers both).
fsdp::Groups fsdp_groups(models::CausalLM& model, const Layout& l) {
  fsdp::Groups layers = fsdp::groups_by_glob(model, {"model.layers.*"});
  if (l.ep == 1) return layers;
  fsdp::Groups out;
  const dist::CommPtr expert_shard = l.expert_mesh->axis_comm("dp_shard");
  for (const fsdp::Group& g : layers) {
    out.push_back(g);
    bool experts = false;
    for (const auto& [name, t] : g.module->named_parameters()) experts |= is_expert_param(name);
    if (experts) out.push_back({g.prefix, g.module, {kExpertGlob}, expert_shard});
  }
  return out;
}

// Step 3: the sequence split over cp (the parameters stay whole over cp).
void apply_context_parallel(models::CausalLM& model, const Layout& l, const ParallelConfig& p) {
  if (l.cp == 1) return;
  const parallel::ContextMethod method = parallel::context_method_from_name(p.cp_method);
  const int64_t heads = model.config().num_attention_heads;
  if (method == parallel::ContextMethod::alltoall && (heads / l.tp) % l.cp != 0)
    HP_THROW(ValueError, "train", "parallel.cp = ", l.cp, " does not divide the query heads per ",
             "tp rank (num_attention_heads ", heads, " / parallel.tp ", l.tp,
             "), which Ulysses (parallel.cp_method alltoall) splits; use cp_method ring");
  models::ContextSplit split;
  split.degree = l.cp;
  split.index = l.cp_rank;
  split.attention = [comm = l.cp_comm, method](const Tensor& q, const Tensor& k, const Tensor& v,
                                               double scale, const Tensor& segments) {
    return parallel::context_attention(q, k, v, scale, method, comm, segments);
  };
  split.sum = [comm = l.cp_comm](const std::vector<double>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    return comm->all_reduce(from_data<double>(x, {n}), dist::ReduceOp::sum).to_vector();
  };
  model.set_context_split(std::move(split));
}

}  // namespace

optim::OptimizerOptions optimizer_options(const OptimizerConfig& c) {
  optim::OptimizerOptions o;
  o.adamw = {c.betas.at(0), c.betas.at(1), c.eps, c.weight_decay};
  o.muon.momentum = c.muon.momentum;
  o.muon.nesterov = c.muon.nesterov;
  o.muon.ns_steps = static_cast<int>(c.muon.ns_steps);
  o.muon.update_scale = optim::muon_scale_from_name(c.muon.update_scale);
  o.muon.weight_decay = c.weight_decay;
  const bool muon = c.name == "muon";
  const auto run_rule = muon ? optim::Algorithm::auto_select : optim::Algorithm::adamw;
  // The routers' correction biases get no gradient (train/expert_balance.h moves them), nor do
  // DeepSeek-V4's hash-routing tables (expert ids): first, so that no group's weight decay
  // shrinks them either (AdamW leaves a zero-gradient parameter unchanged).
  o.groups.push_back({"router correction biases", {"*.e_score_correction_bias", "*.tid2eid"},
                      optim::Algorithm::adamw, 1.0, 0.0});
  for (size_t i = 0; i < c.groups.size(); ++i) {
    const ParamGroupConfig& g = c.groups[i];
    optim::ParamGroup pg;
    pg.name = "optimizer.groups[" + std::to_string(i) + "]";
    pg.globs = g.params;
    pg.algorithm = g.optimizer == "auto" ? run_rule : optim::algorithm_from_name(g.optimizer);
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
  return {optim::schedule_kind_from_name(c.lr_scheduler.name), c.training.steps,
          c.lr_scheduler.warmup_steps, c.lr_scheduler.decay_fraction, c.lr_scheduler.min_lr_ratio};
}

DType compute_dtype(const Config& cfg) {
  const std::string& mp = cfg.training.mixed_precision;
  // auto: bf16 only where native bf16 multiplies beat f32 ones (measured: AVX512_BF16 alone does
  // not say); elsewhere bf16 GEMMs widen to f32 and the conversions make bf16 the slower dtype.
  if (mp == "auto") return kernels::bf16_compute_pays() ? DType::bf16 : DType::f32;
  return mp == "bf16" ? DType::bf16 : DType::f32;
}

namespace {

// The layout of one pipeline stage over its ranks `world` (the whole world when pp = 1).
Layout stage_layout(const Config& cfg, const dist::CommPtr& world) {
  const int64_t n = world->size();
  // What n is, for the errors below.
  const std::string ranks =
      cfg.parallel.pp == 1
          ? detail::cat("the world size ", n, " (launched ranks)")
          : detail::cat("the ranks of a pipeline stage, ", n, " (launched ranks ",
                        n * cfg.parallel.pp, " / parallel.pp ", cfg.parallel.pp, ")");
  const ParallelConfig& p = cfg.parallel;
  Layout l;
  l.tp = p.tp;
  l.cp = p.cp;
  l.dp_replicate = p.dp_replicate;
  // parse_config rejects these; a Config built in code must not reach the divisions below.
  for (const auto& [key, v] :
       {std::pair<const char*, int64_t>{"parallel.dp_replicate", p.dp_replicate},
        {"parallel.tp", p.tp},
        {"parallel.cp", p.cp},
        {"parallel.ep", p.ep},
        {"training.grad_accum", cfg.training.grad_accum}})
    if (v < 1) HP_THROW(ValueError, "train", key, " must be >= 1, got ", v);
  if (p.dp_shard != -1 && p.dp_shard < 1)
    HP_THROW(ValueError, "train", "parallel.dp_shard must be -1 or >= 1, got ", p.dp_shard);
  const int64_t fixed = p.dp_replicate * p.cp * p.tp;
  if (n % fixed != 0)
    HP_THROW(ValueError, "train",
             "parallel.dp_replicate × parallel.cp × parallel.tp = ", p.dp_replicate, " × ", p.cp,
             " × ", p.tp, " does not divide ", ranks);
  l.dp_shard = p.dp_shard == -1 ? n / fixed : p.dp_shard;
  if (l.dp_replicate * l.dp_shard * l.cp * l.tp != n)
    HP_THROW(ValueError, "train",
             "parallel.dp_replicate × parallel.dp_shard × parallel.cp × parallel.tp = ",
             l.dp_replicate, " × ", l.dp_shard, " × ", l.cp, " × ", l.tp, " must equal ", ranks);
  if (cfg.training.seq_len % (2 * l.cp) != 0 && l.cp > 1)
    HP_THROW(ValueError, "train", "training.seq_len = ", cfg.training.seq_len,
             " does not split into 2 × parallel.cp = ", 2 * l.cp, " equal chunks");
  l.dp_size = static_cast<int>(l.dp_replicate * l.dp_shard);
  const int64_t split = cfg.training.grad_accum * l.dp_size;
  if (cfg.training.batch_size % split != 0)
    HP_THROW(ValueError, "train", "training.batch_size = ", cfg.training.batch_size,
             " does not divide into training.grad_accum × data-parallel ranks = ", split,
             " equal micro-batches");
  l.mesh = std::make_shared<shard::DeviceMesh>(
      std::vector<std::pair<std::string, int64_t>>{
          {"dp_replicate", l.dp_replicate}, {"dp_shard", l.dp_shard * l.cp}, {"tp", l.tp}},
      world);
  const int64_t shard_coord = l.mesh->coordinate(1);  // dp_shard index · cp + cp index
  l.dp_rank = static_cast<int>(l.mesh->coordinate(0) * l.dp_shard + shard_coord / l.cp);
  l.cp_rank = static_cast<int>(shard_coord % l.cp);
  l.shard_comm = l.mesh->axis_comm("dp_shard");
  if (l.dp_replicate > 1) l.replicate_comm = l.mesh->axis_comm("dp_replicate");
  l.tp_comm = l.mesh->axis_comm("tp");
  // cp groups: the ranks of one shard group with the same dp_shard index (neighbours in it).
  l.cp_comm = l.cp == 1 ? l.shard_comm->split(static_cast<int>(l.shard_comm->rank()), 0)
                        : l.shard_comm->split(static_cast<int>(shard_coord / l.cp), l.cp_rank);
  l.model_comm = l.tp == 1 ? l.shard_comm : l.mesh->sub_mesh({"dp_shard", "tp"})->comm();
  // EP groups: ep neighbouring ranks of the shard group; the expert mesh: the ranks with this
  // rank's expert coordinate, in world order (so row-major over dp_replicate, dp_shard / ep, tp).
  l.ep = p.ep;
  l.expert_mesh = l.mesh;
  if (l.ep > 1) {
    if ((l.dp_shard * l.cp) % l.ep != 0)
      HP_THROW(ValueError, "train", "parallel.ep = ", l.ep, " does not divide parallel.dp_shard × ",
               "parallel.cp = ", l.dp_shard, " × ", l.cp, " (the ranks experts split over)");
    l.ep_rank = static_cast<int>(shard_coord % l.ep);
    l.ep_comm = l.shard_comm->split(static_cast<int>(shard_coord / l.ep), l.ep_rank);
    l.expert_mesh = std::make_shared<shard::DeviceMesh>(
        std::vector<std::pair<std::string, int64_t>>{{"dp_replicate", l.dp_replicate},
                                                     {"dp_shard", l.dp_shard * l.cp / l.ep},
                                                     {"tp", l.tp}},
        world->split(l.ep_rank, world->rank()));
  }
  return l;
}

}  // namespace

Layout parallel_layout(const Config& cfg, const dist::CommPtr& world) {
  const int64_t pp = cfg.parallel.pp, n = world->size();
  if (pp < 1) HP_THROW(ValueError, "train", "parallel.pp must be >= 1, got ", pp);
  if (n % pp != 0 && cfg.parallel.pipeline.stage_ranks.empty())
    HP_THROW(ValueError, "train", "parallel.pp = ", pp, " does not divide the world size ", n,
             " (launched ranks)");
  if (pp == 1) {
    Layout l = stage_layout(cfg, world);
    l.norm_comm = l.model_comm;
    l.stage_sizes = {n};
    return l;
  }
  const PipelineConfig& pl = cfg.parallel.pipeline;
  if (pl.microbatches > 0 && pl.microbatches != cfg.training.grad_accum)
    HP_THROW(ValueError, "train", "parallel.pipeline.microbatches = ", pl.microbatches,
             " differs from training.grad_accum = ", cfg.training.grad_accum);
  // pp outermost: stage k is the next stage_sizes[k] ranks.
  std::vector<int64_t> sizes(static_cast<size_t>(pp), n / pp);
  if (!pl.stage_ranks.empty()) {
    sizes.clear();
    int64_t sum = 0;
    for (double v : pl.stage_ranks) sum += sizes.emplace_back(static_cast<int64_t>(v));
    if (static_cast<int64_t>(sizes.size()) != pp || sum != n)
      HP_THROW(ValueError, "train", "parallel.pipeline.stage_ranks has ", sizes.size(),
               " entries summing to ", sum, "; the run needs parallel.pp = ", pp,
               " entries summing to the world size ", n, " (launched ranks)");
  }
  int pp_rank = 0;
  for (int64_t first = 0; world->rank() >= first + sizes[size_t(pp_rank)];)
    first += sizes[size_t(pp_rank++)];
  Layout l = stage_layout(cfg, world->split(pp_rank, world->rank()));
  l.pp = pp;
  l.pp_rank = pp_rank;
  l.stage_sizes = sizes;
  if (l.heterogeneous()) {
    l.norm_comm = world;  // dp_replicate 1: every rank holds a part of the one copy
    return l;
  }
  const int inner = static_cast<int>(n / pp);
  l.pp_comm = world->split(world->rank() % inner, pp_rank);
  // One copy of the model: this rank's replica (its dp_replicate coordinate) over every stage.
  l.norm_comm = world->split(static_cast<int>(l.mesh->coordinate(0)), world->rank());
  return l;
}

bool Layout::heterogeneous() const {
  return std::any_of(stage_sizes.begin(), stage_sizes.end(),
                     [&](int64_t k) { return k != stage_sizes.front(); });
}

std::string disk_tier_file(const Config& cfg, const Layout& layout, const std::string& what) {
  const std::filesystem::path dir = cfg.memory.disk_dir.empty()
                                        ? std::filesystem::path(cfg.run.dir) / "offload"
                                        : std::filesystem::path(cfg.memory.disk_dir);
  const int rank = layout.mesh->comm()->rank();
  return (dir / (what + "-rank" + std::to_string(rank) + "-pid" + std::to_string(::getpid()) +
                 ".bin"))
      .string();
}

Parallelized::Parallelized() = default;
Parallelized::~Parallelized() = default;
Parallelized::Parallelized(Parallelized&&) noexcept = default;
Parallelized& Parallelized::operator=(Parallelized&&) noexcept = default;

namespace {
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

Parallelized parallelize(models::CausalLM& model, const Layout& l, const Config& cfg,
                         const ActivationChoice* choice) {
  const OffloadConfig& o = cfg.offload;
  HP_CHECK(o.activations_select == "all" || choice != nullptr);  // the plan's (setup.cpp)
  Parallelized out;
  out.sequence_parallel = l.tp > 1 && cfg.parallel.sequence_parallel &&
                          models::supports_sequence_parallel(model.config());
  // 0. PP: this rank keeps its stages' modules only.
  if (l.pp > 1) out.layers_per_stage = apply_pipeline(model, l, cfg, &out.held_elsewhere);
  // 1. TP / SP.
  const shard::ShardedParameters tp =
      apply_tensor_parallel(model, l, out.sequence_parallel, cfg.parallel.plan);
  // 2. EP.
  const std::set<std::string> experts = apply_expert_parallel(model, l, cfg.parallel.moe);
  out.held_elsewhere.insert(experts.begin(), experts.end());
  // 3. CP.
  apply_context_parallel(model, l, cfg.parallel);
  // 4. MXFP8 (the kernel hook sits under the TP wrappers).
  if (cfg.low_precision.recipe == "mxfp8")
    out.mx_modules = mx::convert_to_mx(model, mx_convert_spec(cfg.low_precision));
  // 5. Recompute (FSDP's wrappers go outside it, so a recomputed forward re-gathers).
  out.recompute_modules = models::apply_recompute(model, recompute_spec(cfg.recompute));
  if (choice && !choice->recompute.empty())  // offload.activations_select auto
    for (const models::SelectedBlock& b : models::select_blocks(
             model, o.activations_every_k_layers, o.activations_modules, "offload"))
      if (contains(choice->recompute, b.fqn)) {
        models::install_recompute(b);
        out.recompute_modules.push_back(b.fqn);
      }
  // 6. FSDP over dp_shard × cp (HSDP over dp_replicate), on the TP-local tensors.
  fsdp::Groups groups = fsdp_groups(model, l);
  for (const fsdp::Group& g : groups)
    if (out.fsdp_prefixes.empty() || out.fsdp_prefixes.back() != g.prefix)
      out.fsdp_prefixes.push_back(g.prefix);
  out.fsdp = std::make_unique<fsdp::FsdpModel>(model, std::move(groups), l.shard_comm,
                                               l.replicate_comm, fsdp_options(cfg));
  // 7. Activation offload, outside FSDP's wrappers.
  if (o.activations != "none") {
    offload::ActivationOffloadOptions ao;
    ao.min_bytes = o.activations_min_bytes;
    if (o.activations == "disk") ao.disk_file = disk_tier_file(cfg, l, "activations");
    ao.io_threads = static_cast<int>(cfg.memory.io_threads);
    out.activation_offload = std::make_shared<offload::ActivationOffload>(ao);
    for (const models::SelectedBlock& b :
         models::select_blocks(model, o.activations_every_k_layers, o.activations_modules,
                               "offload")) {
      if (choice && !contains(choice->offload, b.fqn)) continue;
      out.activation_offload->install_region(*b.module);
      out.offload_modules.push_back(b.fqn);
    }
  }

  // One description per parameter: FSDP's Shard(0) over dp_shard on top of its TP placement (the
  // tp axis is innermost, so it splits first: shard/dtensor.h). from_local checks that FSDP's rows
  // are the ones that rule gives. Experts live on the expert mesh (the same axes).
  const auto dp_axis = static_cast<size_t>(l.mesh->axis("dp_shard"));
  for (auto& [fqn, d] : out.fsdp->parameters()) {
    const shard::MeshPtr& mesh = l.ep > 1 && is_expert_param(fqn) ? l.expert_mesh : l.mesh;
    shard::Placements p(static_cast<size_t>(l.mesh->ndim()), shard::Replicate{});
    Shape global = d.global_shape();
    if (tp.contains(fqn)) {
      p = tp.at(fqn).placements();
      global = tp.at(fqn).global_shape();
    }
    p[dp_axis] = d.placements()[0];
    out.params.emplace_back(fqn, shard::DTensor::from_local(d.local(), mesh, p, global));
  }
  return out;
}

std::vector<optim::NamedTensor> Parallelized::named_parameters() const {
  std::vector<optim::NamedTensor> out;
  for (const auto& [fqn, t] : params) out.emplace_back(fqn, t.local());
  return out;
}

namespace {
bool split_over_tp(const shard::DTensor& t) {
  return shard::is_shard(t.placements()[static_cast<size_t>(t.mesh()->axis("tp"))]);
}
}  // namespace

std::map<std::string, optim::ShardSpec> Parallelized::shard_specs(const Layout& l) const {
  std::map<std::string, optim::ShardSpec> specs;
  for (const auto& [fqn, t] : params) {
    // (an expert's: the dp_shard axis of the expert mesh)
    const dist::CommPtr& comm = split_over_tp(t) ? l.model_comm : t.mesh()->axis_comm("dp_shard");
    if (comm->size() == 1) continue;
    specs[fqn] = {t.global_shape(), t.offsets(), comm};
  }
  return specs;
}

std::vector<Tensor> Parallelized::norm_parameters(const Layout& l) const {
  std::vector<Tensor> out;
  const bool tp_lead = l.tp_comm->rank() == 0;
  for (const auto& [fqn, t] : params)
    if (tp_lead || split_over_tp(t)) out.push_back(t.local());
  return out;
}

std::vector<checkpoint::Chunk> Parallelized::chunks(
    const std::vector<optim::NamedTensor>& optimizer_state, bool for_save) const {
  std::vector<checkpoint::Chunk> out;
  std::map<std::string, const shard::DTensor*> by_fqn;
  // A piece replicated over an axis is written by that axis's coordinate 0 only.
  auto writes = [&](const shard::DTensor& t) {
    if (!for_save) return true;
    const auto& m = *t.mesh();
    for (int64_t a = 0; a < m.ndim(); ++a)
      if (shard::is_replicate(t.placements()[static_cast<size_t>(a)]) && m.coordinate(a) != 0)
        return false;
    return true;
  };
  for (const auto& [fqn, t] : params) {
    by_fqn[fqn] = &t;
    if (!writes(t)) continue;
    out.push_back({fqn, t.local(), t.global_shape(), t.offsets()});
  }
  for (const auto& [key, v] : optimizer_state) {
    const auto [fqn, name] = split_state_key(key);
    auto it = by_fqn.find(fqn);
    if (it == by_fqn.end())
      HP_THROW(ValueError, "train", "optimizer state ", key,
               " is for a parameter this model does not have");
    const shard::DTensor& t = *it->second;
    if (name == "step") {
      // One scalar per parameter, written by the rank at coordinate 0 of every axis of the
      // parameter's mesh: rank 0, except for experts, whose mesh holds their expert coordinate.
      const auto& coords = t.mesh()->coordinates();
      if (!for_save || std::all_of(coords.begin(), coords.end(), [](int64_t c) { return c == 0; }))
        out.push_back({key, v, Shape{}, {}});
      continue;
    }
    if (!writes(t)) continue;
    out.push_back({key, v, t.global_shape(), t.offsets()});
  }
  return out;
}

}  // namespace hp::train
