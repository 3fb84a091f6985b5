#include "hp/train/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

#include "hp/core/byte_size.h"
#include "hp/core/error.h"
#include "hp/core/random.h"
#include "hp/data/dataset.h"
#include "hp/data/encoder.h"
#include "hp/data/loader.h"
#include "hp/dist/communicator.h"
#include "hp/fsdp/fsdp.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/nn/module.h"
#include "hp/offload/activations.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/schedule.h"
#include "hp/train/activation_choice.h"
#include "hp/train/loss.h"
#include "hp/train/parallelize.h"
#include "hp/train/options.h"

namespace hp::train {

namespace {

// The trainer's activation figure (trainer.cpp: peak of forward + backward − live at its start −
// the f32 gradients) for one micro-batch of `rows` × `seq` random tokens through `model`.
int64_t measure_activations(models::CausalLM& model, Parallelized& par, int64_t rows, int64_t seq,
                            int64_t vocab, bool grads_on_device) {
  data::Batch b;
  std::vector<double> ids(static_cast<size_t>(rows * (seq + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = double((i * 7919) % size_t(vocab));
  b.ids = from_vector(ids, {rows, seq + 1}, DType::i64);
  b.targets = b.global_targets = rows * seq;
  auto& a = Allocator::instance();
  int64_t grad_bytes = 0;
  for (const auto& [fqn, t] : par.named_parameters()) {
    t.zero_grad();
    if (grads_on_device) grad_bytes += t.numel() * int64_t(sizeof(float));
  }
  a.reset_peak(MemTier::device);
  const int64_t live = a.stats(MemTier::device).live_bytes;
  {
    const MemCategoryScope as_activations(MemCategory::activations);
    batch_loss(model, b).mean.backward();
  }
  par.fsdp->finish_grads();
  const int64_t act = a.stats(MemTier::device).peak_bytes - live - grad_bytes;
  for (const auto& [fqn, t] : par.named_parameters()) t.zero_grad();
  return act;
}

// The measured shapes: layers[l] layers × rows[t] rows of seqs[t] tokens.
struct Shapes {
  int64_t layers[2] = {}, rows[2] = {}, seqs[2] = {};
};

struct Measured {
  double act[2][2] = {};  // [layers][tokens]
  // Activation offload: the bytes each kind of block saved at layers[1] and the configured
  // micro-batch (rows[1] × seqs[1]), by its name within a layer ("" = the whole layer), in model
  // order; and the layers' FQN prefix ("model.layers.").
  std::vector<std::pair<std::string, int64_t>> blocks;
  std::string layer_prefix;
};

// The configured model at each layer count through the parallelize step in a world of one (`one`).
Measured measure(const Config& cfg, const models::ModelConfig& c, const Layout& one,
                 const Shapes& sh) {
  Measured m;
  const DeviceBudgetScope unlimited(0, "memory.device_budget");
  const RngState rng = default_generator().state();
  for (int li = 0; li < 2; ++li) {
    models::ModelConfig ci = c;
    ci.num_hidden_layers = sh.layers[li];
    Config cl = cfg;
    cl.model.layers = ci.num_hidden_layers;
    cl.recompute.every_k_layers = std::min(cl.recompute.every_k_layers, ci.num_hidden_layers);
    std::shared_ptr<models::CausalLM> model;
    {
      const MemCategoryScope as_params(MemCategory::params);
      model = models::build_model(ci);
    }
    Parallelized par = parallelize(*model, one, cl);
    const bool grads_on_device = cfg.offload.grads != HostOffload::host;
    for (int si = 0; si < 2; ++si)
      m.act[li][si] = double(measure_activations(*model, par, sh.rows[si], sh.seqs[si],
                                                 c.vocab_size, grads_on_device));
    if (li != 1 || !par.activation_offload) continue;
    // "model.layers.2.mlp" → kind "mlp" (the largest of the layers measured).
    const std::vector<int64_t> bytes = par.activation_offload->region_bytes();
    for (size_t r = 0; r < bytes.size(); ++r) {
      const std::string& fqn = par.offload_modules[r];
      const size_t at = fqn.find("layers.");
      HP_CHECK(at != std::string::npos);
      m.layer_prefix = fqn.substr(0, at + 7);
      size_t end = at + 7;
      while (end < fqn.size() && std::isdigit(static_cast<unsigned char>(fqn[end]))) ++end;
      const std::string kind = end < fqn.size() ? fqn.substr(end + 1) : std::string();
      auto it = std::find_if(m.blocks.begin(), m.blocks.end(),
                             [&](const auto& b) { return b.first == kind; });
      if (it == m.blocks.end())
        m.blocks.emplace_back(kind, bytes[r]);
      else
        it->second = std::max(it->second, bytes[r]);
    }
  }
  default_generator().set_state(rng);
  return m;
}

// act[l][t] = base(t) + layers · layer(t), each linear in tokens: p's coefficients.
void fit(MemoryPlan& p, const Measured& m, const Shapes& sh) {
  const int64_t la = sh.layers[0], lb = sh.layers[1];
  const double dl = lb > la ? double(lb - la) : 1.0;
  const double ta = double(sh.rows[0] * sh.seqs[0]), ds = double(sh.rows[1] * sh.seqs[1]) - ta;
  const double layer_a = lb > la ? (m.act[1][0] - m.act[0][0]) / dl : 0.0;
  const double layer_b = lb > la ? (m.act[1][1] - m.act[0][1]) / dl : 0.0;
  p.act_layer_per_token = ds > 0 ? (layer_b - layer_a) / ds : 0.0;
  p.act_layer = layer_a - p.act_layer_per_token * ta;
  const double base_a = m.act[0][0] - double(la) * layer_a;
  const double base_b = m.act[0][1] - double(la) * layer_b;
  p.act_base_per_token = ds > 0 ? (base_b - base_a) / ds : 0.0;
  p.act_base = base_a - p.act_base_per_token * ta;
}

}  // namespace


int64_t device_budget_bytes(const Config& cfg) {
  return cfg.memory.device_budget.empty()
             ? 0
             : parse_byte_size(cfg.memory.device_budget, "memory.device_budget");
}

MemoryPlan plan_memory(const Config& cfg_in) {
  MemoryPlan p;
  const auto world = dist::world();
  const Layout layout = parallel_layout(cfg_in, world);
  p.shard_ranks = layout.dp_shard * layout.cp;
  p.micro_rows = cfg_in.training.batch_size / cfg_in.training.grad_accum / layout.dp_size;
  p.seq_len = cfg_in.training.seq_len;
  p.budget = device_budget_bytes(cfg_in);
  // The model's config without reading the corpus: the vocabulary comes from the tokenizer.
  models::ModelConfig c;
  if (cfg_in.model.path.empty()) {
    const data::DatasetOptions d = dataset_options(cfg_in);
    const data::DocumentEncoder enc(d.tokenizer, d.separator_token);
    c = arch_model_config(cfg_in.model, enc.vocab_size(), cfg_in.training.seq_len,
                          enc.separator_id());
  } else {
    c = models::read_model_config(cfg_in.model.path);
  }
  p.layers = c.num_hidden_layers;
  // Parameters: one layer at a time, weights not drawn.
  int64_t layer_params = 0, layer_matrix = 0;
  {
    nn::SkipInitGuard skip;
    const auto& factory = models::architecture(c.architecture).layers;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      models::DecoderLayer layer(c, factory, i);
      const int64_t n = layer.num_parameters();
      layer_params += n;
      p.largest_layer_params = std::max(p.largest_layer_params, n);
      for (const auto& [fqn, t] : layer.named_parameters())
        if (t.dim() >= 2) layer_matrix += t.numel();
    }
  }
  const int64_t io_params = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) +
                            c.hidden_size;
  p.parameters = io_params + layer_params;
  const int64_t ranks = p.shard_ranks * layout.tp;
  const int64_t f32_shard = 4 * p.parameters / ranks;
  (cfg_in.offload.params == HostOffload::host ? p.host : p.device).params = f32_shard;
  (cfg_in.offload.grads == HostOffload::host ? p.host : p.device).grads = f32_shard;
  // Zero-bubble schedules reduce FSDP's gradients once per step (fsdp.h reduce_at_finish): unless
  // FSDP passes the masters through, the unsharded f32 gradients stay on the device beside the
  // reduced shard until then (the whole model's, as this plan counts every layer on every rank).
  const bool fsdp_passthrough =
      p.shard_ranks == 1 && layout.dp_replicate == 1 && compute_dtype(cfg_in) == DType::f32 &&
      cfg_in.offload.params != HostOffload::host && cfg_in.offload.grads != HostOffload::host;
  if (cfg_in.parallel.pp > 1 && pipeline::splits_backward(pipeline_spec(cfg_in).kind) &&
      !fsdp_passthrough)
    p.device.grads += 4 * p.parameters / layout.tp;
  // AdamW keeps two f32 moments, Muon one momentum buffer (its hidden matrices only).
  const int64_t state = cfg_in.optimizer.name == OptimizerName::muon
                            ? (8 * (p.parameters - layer_matrix) + 4 * layer_matrix) / ranks
                            : 8 * p.parameters / ranks;
  if (cfg_in.offload.optimizer == OffloadTier::none) {
    p.device.optimizer = state;
  } else if (cfg_in.offload.optimizer == OffloadTier::host) {
    p.host.optimizer = state;
  } else {
    p.disk.optimizer = state;
    // One group stepping, one read ahead, two being written back.
    const int64_t group = std::max(io_params, p.largest_layer_params) * 8 / ranks;
    p.host.optimizer = std::min(state, 4 * group);
  }
  // Activations, measured in a world of one at 2 and 3 layers (both have the two gathered layers
  // FSDP holds at its peak) and two short sequences, then extrapolated.
  Config cfg = cfg_in;
  cfg.parallel.dp_shard = cfg.parallel.dp_replicate = cfg.parallel.tp = cfg.parallel.cp = 1;
  cfg.parallel.ep = cfg.parallel.pp = 1;  // (with pp kept, the world of one refused the config)
  // largest | auto: measure the whole selection swapped (and, below, none of it), then choose.
  const ActivationSelect select = cfg_in.offload.activations_select;
  const bool choose =
      cfg.offload.activations != OffloadTier::none && select != ActivationSelect::all;
  cfg.offload.activations_select = ActivationSelect::all;
  // The device side of disk offload is that of host offload (the same copies leave and come
  // back); measuring through the host tier leaves no files behind.
  if (cfg.offload.activations == OffloadTier::disk) cfg.offload.activations = OffloadTier::host;
  const dist::CommPtr self = world->split(world->rank(), 0);
  Shapes sh;
  sh.layers[0] = std::min<int64_t>(2, c.num_hidden_layers);
  sh.layers[1] = std::min<int64_t>(3, c.num_hidden_layers);
  // The configured micro-batch (this rank's rows and sequence slice) and half of it: measured at
  // the real shape, so only the layer count is extrapolated there (fixed buffers, such as the
  // root's gradients at the end of backward, make small shapes unrepresentative).
  const int64_t seq = std::max<int64_t>(1, cfg_in.training.seq_len / layout.cp);
  const int64_t rb = std::max<int64_t>(1, p.micro_rows), sb = seq;
  sh.rows[1] = rb, sh.seqs[1] = sb;
  sh.rows[0] = rb >= 2 ? rb / 2 : 1;
  sh.seqs[0] = rb >= 2 ? seq : std::max<int64_t>(1, seq / 2);
  const Layout one = parallel_layout(cfg, self);
  const Measured m = measure(cfg, c, one, sh);
  for (int li = 0; li < 2; ++li) {
    p.measured_layers[li] = sh.layers[li];
    p.measured_tokens[li] = sh.rows[li] * sh.seqs[li];
    for (int si = 0; si < 2; ++si) p.act_measured[li][si] = int64_t(m.act[li][si]);
  }
  fit(p, m, sh);
  p.device.activations = p.activations_for(rb, sb);
  // The blocks of the configured depth the selection names, with the bytes measured for their
  // kind (layers alike): all swapped, or chosen (train/activation_choice.h).
  p.activation_tier = cfg_in.offload.activations;
  p.activation_select = select;
  const bool by_cost = select == ActivationSelect::auto_;
  std::vector<double> flops(m.blocks.size());
  for (size_t j = 0; j < m.blocks.size() && by_cost; ++j)
    flops[j] = block_forward_flops(c, m.blocks[j].first, rb, sb);
  const int64_t k = cfg.offload.activations_every_k_layers;
  for (int64_t i = 0; i < c.num_hidden_layers && !m.blocks.empty(); ++i)
    for (size_t j = 0; j < m.blocks.size() && i % k == 0; ++j) {
      const auto& [name, bytes] = m.blocks[j];
      MemoryPlan::Block b;
      b.fqn = m.layer_prefix + std::to_string(i) + (name.empty() ? "" : "." + name);
      b.bytes = bytes;
      b.fate = choose ? MemoryPlan::Fate::kept : MemoryPlan::Fate::swapped;
      b.flops = flops[j];
      p.activation_blocks.push_back(std::move(b));
    }
  if (choose) {
    Config none_cfg = cfg;
    none_cfg.offload.activations = OffloadTier::none;
    MemoryPlan none = p;
    fit(none, measure(none_cfg, c, one, sh), sh);
    if (by_cost) {
      p.gemm_flops_per_s = gemm_flops_per_s(cfg_in);
      p.tier_bytes_per_s = tier_bytes_per_s(cfg_in, one);
    }
    // A recomputed region keeps its input [rows, seq, hidden] in the compute dtype.
    const int64_t input = rb * sb * c.hidden_size * int64_t(dtype_size(compute_dtype(cfg_in)));
    choose_blocks(p, none.activations_for(rb, sb), p.activations_for(rb, sb), by_cost, input);
  }
  int64_t moved = 0;
  for (const MemoryPlan::Block& b : p.activation_blocks)
    if (b.fate == MemoryPlan::Fate::swapped) moved += b.bytes;
  (cfg_in.offload.activations == OffloadTier::disk ? p.disk : p.host).activations = moved;
  return p;
}

std::optional<MemoryPlan> check_device_budget(const Config& cfg) {
  if (cfg.memory.device_budget.empty()) return std::nullopt;
  MemoryPlan p = plan_memory(cfg);
  if (p.minimum_device_bytes() <= p.budget) return p;
  HP_THROW(MemoryError, "memory", "memory.device_budget = ", format_bytes(double(p.budget)),
           " cannot hold even one layer's step: the device tier needs at least ",
           format_bytes(double(p.minimum_device_bytes())),
           " (its parameters, gradients and optimizer state plus one layer's activations); "
           "offload more (offload.params|grads|optimizer), or raise the budget. The plan:\n",
           p.to_text());
}

}  // namespace hp::train
