// The rank layout of a run: how the world splits into pipeline stages and, inside a stage, into
// data-parallel, context-parallel and tensor-parallel groups (docs/ARCHITECTURE.md §4b).
#pragma once

#include <cstdint>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/shard/mesh.h"
#include "hp/train/config.h"

namespace hp::train {

// The ranks: world = pp × dp_replicate × dp_shard × cp × tp, outermost first (tp innermost, so a
// TP group is neighbouring ranks; a cp group is neighbouring TP groups; a pipeline stage is
// world / pp consecutive ranks). Resolves dp_shard -1 and checks the degrees against the world
// size, the model (heads) and the batch split. Throws ValueError("[train] ...") naming the keys
// and values.
//
// Everything below pp is the layout of one stage: its mesh and communicators span the stage's
// ranks only (each stage holds other parameters), so FSDP, TP, CP and EP work inside a stage.
//
// The parameters' mesh has three axes: "dp_replicate", "dp_shard" and "tp", where "dp_shard"
// spans dp_shard × cp ranks (the FSDP shard group; the cp ranks of a data-parallel slice sit next
// to each other inside it). The cp split itself is the sequence's, not the parameters'.
//
// Expert parallelism borrows ep ranks from dp_shard × cp (ep innermost: an EP group is neighbouring
// ranks of the shard group). A rank's experts live on the expert mesh: the ranks with the same
// expert coordinate, axes "dp_replicate", "dp_shard" (dp_shard × cp / ep ranks) and "tp".
struct Layout {
  int64_t pp = 1;
  int pp_rank = 0;  // this rank's pipeline coordinate (the stages it runs: pipeline/schedule.h)
  // Ranks of each pipeline coordinate, consecutive in world order (world / pp each, or
  // parallel.pipeline.stage_ranks: heterogeneous, MPMD).
  std::vector<int64_t> stage_sizes;
  bool heterogeneous() const;
  // The pp ranks with this rank's coordinates below pp (null when pp is 1 or stages differ in
  // size: then transfers reshard rows between the stages' ranks over the world).
  dist::CommPtr pp_comm;
  dist::CommPtr norm_comm;  // pp × model_comm: the ranks that hold one copy of the whole model
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1;
  int dp_rank = 0, dp_size = 1;  // this rank's data-parallel slice of the global batch
  int cp_rank = 0;               // this rank's place in the sequence split
  int ep_rank = 0;               // this rank's expert coordinate
  shard::MeshPtr mesh;           // axes "dp_replicate", "dp_shard" (dp_shard × cp ranks), "tp"
  shard::MeshPtr expert_mesh;    // mesh when ep = 1
  dist::CommPtr ep_comm;         // the EP group (ep ranks); null when ep = 1
  dist::CommPtr shard_comm;      // dp_shard × cp (FSDP)
  dist::CommPtr replicate_comm;  // dp_replicate (HSDP); null when 1
  dist::CommPtr cp_comm;         // cp
  dist::CommPtr tp_comm;         // tp
  dist::CommPtr model_comm;      // dp_shard × cp × tp: the ranks that hold one copy of the model
};
Layout parallel_layout(const Config& cfg, const dist::CommPtr& world);

}  // namespace hp::train
