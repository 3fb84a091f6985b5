// The rank layout (layout.h).
#include "hp/train/layout.h"

#include <algorithm>

#include "hp/core/error.h"

namespace hp::train {

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

}  // namespace hp::train
