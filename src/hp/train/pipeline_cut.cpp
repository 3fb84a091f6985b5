// The pipeline cut (pipeline_cut.h).
#include "hp/train/pipeline_cut.h"

#include <algorithm>

#include "hp/core/error.h"
#include "hp/models/transformer.h"
#include "hp/pipeline/schedule.h"
#include "hp/pipeline/stage.h"
#include "hp/train/options.h"

namespace hp::train {

StageCosts stage_costs(const models::CausalLM& model, int64_t seq_len) {
  const models::ModelConfig& c = model.config();
  StageCosts out;
  out.layers.assign(static_cast<size_t>(c.num_hidden_layers), 0.0);
  // 2 FLOPs per weight per token (routed experts: the active share), plus causal attention:
  // scores and values, 2 · 2 · T · heads · head_dim / 2 per token.
  const double active =
      c.num_experts > 0 ? double(c.num_experts_per_tok) / double(c.num_experts) : 1;
  for (const auto& [fqn, t] : model.named_parameters()) {
    const std::string prefix = "model.layers.";
    if (fqn.rfind(prefix, 0) != 0) continue;
    const auto layer = std::stoll(fqn.substr(prefix.size()));
    const bool expert = fqn.find(".experts.") != std::string::npos;
    out.layers[size_t(layer)] += 2.0 * double(t.numel()) * (expert ? active : 1.0);
  }
  for (double& l : out.layers)
    l += 2.0 * double(seq_len) * double(c.num_attention_heads * c.head_dim);
  // The embedding is a row copy (hidden per token); the head a GEMM, the loss a softmax.
  out.first = double(c.hidden_size);
  out.last = 2.0 * double(c.hidden_size) * double(c.vocab_size) + 5.0 * double(c.vocab_size) +
             4.0 * double(c.hidden_size);
  return out;
}

void apply_pipeline(models::CausalLM& model, const Layout& l, const Config& cfg, Parallelized* out) {
  const PipelineConfig& pc = cfg.parallel.pipeline;
  const pipeline::ScheduleSpec spec = pipeline_spec(cfg);
  const int64_t stages = spec.ranks * spec.virtual_stages;
  const int64_t layers = model.config().num_hidden_layers;
  const int last_rank = static_cast<int>((stages - 1) % l.pp);  // holds the head
  if (model.config().tie_word_embeddings && last_rank != 0) {
    // The embedding group: the first stage's rank and the last's each hold the matrix.
    if (l.heterogeneous())
      HP_THROW(ValueError, "train", "parallel.pipeline.stage_ranks with tied embeddings ",
               "(tie_word_embeddings): the first and last stages shard the embedding differently, ",
               "so they cannot add its gradients shard by shard; give equal stages");
    out->tied.fqn = "model.embed_tokens.weight";
    out->tied.peer = l.pp_rank == 0 ? last_rank : l.pp_rank == last_rank ? 0 : -1;
    out->tied.copy = l.pp_rank == last_rank;
  }
  if (model.has_router_loss() && l.heterogeneous())
    HP_THROW(ValueError, "train", "parallel.pipeline.stage_ranks of different sizes with a ",
             "router load-balancing loss (router_aux_loss_coef ",
             model.config().router_aux_loss_coef, "): its statistics travel between equal stages ",
             "only; give equal stages");
  std::vector<int64_t> cut;
  if (pc.layers_per_stage.empty()) {
    const StageCosts costs = stage_costs(model, cfg.training.seq_len);
    if (layers < stages)
      HP_THROW(ValueError, "train", "parallel.pp × parallel.pipeline.virtual_stages = ", stages,
               " stages for a model of ", layers, " layers: every stage needs a layer");
    cut = pipeline::balanced_cut(costs.layers, costs.first, costs.last, stages);
  } else {
    int64_t sum = 0;
    for (double v : pc.layers_per_stage) {
      cut.push_back(static_cast<int64_t>(v));
      sum += cut.back();
    }
    if (static_cast<int64_t>(cut.size()) != stages || sum != layers)
      HP_THROW(ValueError, "train", "parallel.pipeline.layers_per_stage has ", cut.size(),
               " entries summing to ", sum, "; the model needs ", stages, " entries (stages) ",
               "summing to its ", layers, " layers");
  }
  const auto ranges = pipeline::stage_ranges(cut);
  std::vector<bool> keep(static_cast<size_t>(layers), false);
  for (int64_t s = l.pp_rank; s < stages; s += l.pp)
    for (int64_t i = ranges[size_t(s)].first; i < ranges[size_t(s)].second; ++i)
      keep[size_t(i)] = true;
  std::set<std::string> before;
  for (const auto& [fqn, t] : model.named_parameters()) before.insert(fqn);
  model.keep_pipeline_stages([&](int64_t i) { return keep[size_t(i)]; }, l.pp_rank == 0,
                             l.pp_rank == last_rank);
  for (const auto& [fqn, t] : model.named_parameters()) before.erase(fqn);
  out->held_elsewhere.insert(before.begin(), before.end());
  out->layers_per_stage = cut;
}

}  // namespace hp::train
