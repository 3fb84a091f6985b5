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
#include "hp/models/context_plan.h"
#include "hp/models/hf/registry.h"
#include "hp/models/moe.h"
#include "hp/models/recompute.h"
#include "hp/models/tp_plan.h"
#include "hp/models/transformer.h"
#include "hp/moe/expert_parallel.h"
#include "hp/mx/convert.h"
#include "hp/offload/activations.h"
#include "hp/ops/ops.h"
#include "hp/parallel/context_parallel.h"
#include "hp/parallel/vocab_parallel.h"
#include "hp/train/options.h"
#include "hp/train/pipeline_cut.h"

namespace hp::train {

namespace {

// Step 1: the architecture's plan over tp; returns the DTensors of the parameters it split.
shard::StylePtr style_of(TpStyle style, bool sequence_parallel) {
  const shard::Placement region =
      sequence_parallel ? shard::Placement{shard::Shard{1}} : shard::Placement{shard::Replicate{}};
  if (style == TpStyle::colwise) return std::make_shared<shard::ColwiseParallel>(0, region);
  if (style == TpStyle::rowwise) return std::make_shared<shard::RowwiseParallel>(0, region);
  if (style == TpStyle::sequence) return std::make_shared<shard::SequenceParallel>();
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
          rule.style = style_of(overrides[i].style, sequence_parallel);
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
    moe->set_expert_parallel(l.ep_comm, expert_parallel_kernel(moe_cfg));
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
  const parallel::ContextMethod method = context_method(p);
  const int64_t heads = model.config().num_attention_heads;
  if (method == parallel::ContextMethod::alltoall && (heads / l.tp) % l.cp != 0)
    HP_THROW(ValueError, "train", "parallel.cp = ", l.cp, " does not divide the query heads per ",
             "tp rank (num_attention_heads ", heads, " / parallel.tp ", l.tp,
             "), which Ulysses (parallel.cp_method alltoall) splits; use cp_method ring");
  auto attention = [comm = l.cp_comm, method](const Tensor& q, const Tensor& k, const Tensor& v,
                                              double scale, const Tensor& segments) {
    return parallel::context_attention(q, k, v, scale, method, comm, segments);
  };
  auto sum = [comm = l.cp_comm](const std::vector<double>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    return comm->all_reduce(from_data<double>(x, {n}), dist::ReduceOp::sum).to_vector();
  };
  model.set_context_split(models::context_parallel_split(l.cp, l.cp_rank, attention, sum));
}

}  // namespace

std::pair<std::string, std::string> split_state_key(const std::string& key) {
  const auto dot = key.rfind('.');
  if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot <= 6)
    HP_THROW(ValueError, "train", "not an optimizer state key: ", key);
  return {key.substr(6, dot - 6), key.substr(dot + 1)};
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
  HP_CHECK(o.activations_select == ActivationSelect::all ||
           choice != nullptr);  // the plan's (setup.cpp)
  Parallelized out;
  out.sequence_parallel = l.tp > 1 && cfg.parallel.sequence_parallel &&
                          models::supports_sequence_parallel(model.config());
  // 0. PP: this rank keeps its stages' modules only.
  if (l.pp > 1) apply_pipeline(model, l, cfg, &out);
  // 1. TP / SP.
  const shard::ShardedParameters tp =
      apply_tensor_parallel(model, l, out.sequence_parallel, cfg.parallel.plan);
  // 2. EP.
  const std::set<std::string> experts = apply_expert_parallel(model, l, cfg.parallel.moe);
  out.held_elsewhere.insert(experts.begin(), experts.end());
  // 3. CP.
  apply_context_parallel(model, l, cfg.parallel);
  // 4. MXFP8 (the kernel hook sits under the TP wrappers).
  if (cfg.low_precision.recipe == LowPrecisionRecipe::mxfp8)
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
  if (o.activations != OffloadTier::none) {
    out.activation_offload = std::make_shared<offload::ActivationOffload>(
        activation_offload_options(cfg, l));
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
    if ((tp_lead || split_over_tp(t)) && !is_tied_copy(fqn)) out.push_back(t.local());
  return out;
}

void Parallelized::add_tied_grads(const Layout& l) const {
  if (tied.peer < 0) return;
  for (const auto& [fqn, t] : params) {
    if (fqn != tied.fqn) continue;
    // Both holders see the same shard boxes: equal stages shard the matrix alike.
    const Tensor p = t.local();
    const Tensor g = p.grad().defined() ? p.grad() : zeros(p.shape(), DType::f32, p.tier());
    const dist::WorkPtr sent = l.pp_comm->isend(g, tied.peer, /*tag=*/7);
    const dist::WorkPtr got = l.pp_comm->irecv(g.shape(), g.dtype(), tied.peer, /*tag=*/7);
    sent->wait();
    const Tensor other = got->result();
    // a + b on one rank and b + a on the other: IEEE addition commutes, so both hold one value.
    p.set_grad(add(g, other));
    return;
  }
  HP_CHECK(false, "tied parameter ", tied.fqn, " not among this rank's parameters");
}

std::vector<checkpoint::Chunk> Parallelized::chunks(
    const std::vector<optim::NamedTensor>& optimizer_state, bool for_save) const {
  std::vector<checkpoint::Chunk> out;
  std::map<std::string, const shard::DTensor*> by_fqn;
  // A piece replicated over an axis is written by that axis's coordinate 0 only, and the embedding
  // group's copy (tied) by the first stage only.
  auto writes = [&](const std::string& fqn, const shard::DTensor& t) {
    if (!for_save) return true;
    if (is_tied_copy(fqn)) return false;
    const auto& m = *t.mesh();
    for (int64_t a = 0; a < m.ndim(); ++a)
      if (shard::is_replicate(t.placements()[static_cast<size_t>(a)]) && m.coordinate(a) != 0)
        return false;
    return true;
  };
  for (const auto& [fqn, t] : params) {
    by_fqn[fqn] = &t;
    if (!writes(fqn, t)) continue;
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
      if (!for_save || (!is_tied_copy(fqn) && std::all_of(coords.begin(), coords.end(), [](int64_t c) { return c == 0; })))
        out.push_back({key, v, Shape{}, {}});
      continue;
    }
    if (!writes(fqn, t)) continue;
    out.push_back({key, v, t.global_shape(), t.offsets()});
  }
  return out;
}

}  // namespace hp::train
