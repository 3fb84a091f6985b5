// FSDP: fully sharded data parallelism over module groups (docs/ARCHITECTURE.md §4 "FSDP").
//
// Each group (e.g. every decoder layer) and the root (the parameters no group holds: embeddings,
// final norm, head) keeps only this rank's rows of every parameter, as f32 master weights —
// Shard(0) on the dp_shard axis, uneven dims by the torch.chunk rule with padded collectives.
//   forward:  a group's forward wrapper all-gathers its flat segment in param_dtype, copies it out
//             into the module's own parameter tensors, runs, and frees them again
//             (reshard_after_forward; the root keeps its parameters until finish_grads).
//   backward: an identity op on the group output re-gathers before the group's backward runs;
//             once every parameter's gradient has been accumulated, the zero-padded gradients
//             are reduce-scattered (sum) in reduce_dtype and added into the f32 masters' .grad;
//             with HSDP the result is then all-reduced over the replicate axis.
//             (reduce_at_finish: gradients are kept unsharded through the step and reduced in
//             finish_grads.)
//   overlap:  the next group's all-gather is issued before the current group computes (forward
//             and backward prefetch), and reductions run while backward goes on (non-blocking
//             collectives; at most two groups' reductions in flight).
// Mixed precision on one process is the same machinery over a world of one (shard_comm null or
// of size 1): the "all-gather" is a cast copy of the f32 master, the "reduce-scatter" a cast of
// the gradients. With a world of one, no replicate axis and param_dtype f32, FsdpModel changes
// nothing: the module's parameters are the masters (no copies, no hooks).
//
// Collective order is the same on every rank as long as every rank runs the same graph, which
// data-parallel training does. The module must be identical on every rank at construction (same
// seed or the same checkpoint). Each group module's forward must run through its forward wrappers
// (nn::Module::wrapped_forward, as DecoderLayer does); wrappers added before FSDP (recompute) run
// inside FSDP's. Module tensors hold no data outside their group's forward/backward: read
// parameters through sharded_parameters() / parameters(), not the module. The module cannot run
// once its FsdpModel is gone (its wrappers then pass through, but its tensors hold no data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"
#include "hp/nn/module.h"
#include "hp/shard/dtensor.h"

namespace hp::fsdp {

struct FsdpOptions {
  // Free a group's gathered parameters after its forward (re-gather in backward); false keeps
  // them from forward to the end of the group's backward.
  bool reshard_after_forward = true;
  // dtype of the gathered parameters (compute) and of the gradient reduction (f32, bf16, f16).
  DType param_dtype = DType::bf16, reduce_dtype = DType::f32;
  // Issue the next group's all-gather before the current group computes.
  bool prefetch = true;
  // Where the f32 master shards and their gradients live (HyperOffload, docs/ARCHITECTURE.md
  // §4c): host keeps them off the device tier; each gather then copies a group's shard up and each
  // reduction's result comes down (Stats counts those bytes). Not device → never passthrough.
  MemTier master_tier = MemTier::device, grad_tier = MemTier::device;
  // Reduce every group's gradients once, in finish_grads, instead of each group's at the end of
  // its backward: for split backwards (zero-bubble pipeline schedules, pipeline/weight_grad.h)
  // whose deferred weight gradients arrive in a later backward than the group's input gradients.
  // Gathered parameters are still freed at the end of each backward (the deferred tasks need only
  // activations); the gradients stay unsharded, accumulated in f32 over the step's micro-batches
  // (the group's full parameter size · 4 bytes on every rank until finish_grads), then are
  // reduce-scattered in reduce_dtype once per group and step.
  bool reduce_at_finish = false;
};

// One FSDP group: parameters of `module` (root FQNs "<prefix>.<name>") gathered together before
// it runs. `params` (globs over names relative to the module, '*' any run of characters) takes
// only the matching ones; a group without globs takes those of its module that no group with globs
// claims. Several groups may share a module (e.g. a decoder layer's dense parameters over the
// dp_shard ranks and its local experts over the ranks with the same expert coordinate): its
// forward then gathers all of them. shard_comm: the ranks this group's parameters are sharded
// over (null: the model's shard_comm).
struct Group {
  std::string prefix;
  nn::Module* module = nullptr;
  std::vector<std::string> params;
  dist::CommPtr shard_comm;
};
// In forward order.
using Groups = std::vector<Group>;

class FsdpModel {
 public:
  // Every entry of `groups` becomes one FSDP group; root's remaining parameters form the root
  // group. shard_comm: the dp_shard axis (null = a world of one), for groups without their own;
  // replicate_comm: the dp_replicate axis for HSDP (null = none), for every group.
  // Parameters must be f32 (the masters). Throws ValueError naming the group or FQN at fault.
  FsdpModel(nn::Module& root, Groups groups, dist::CommPtr shard_comm, dist::CommPtr replicate_comm,
            FsdpOptions opt);
  ~FsdpModel();
  FsdpModel(const FsdpModel&) = delete;
  FsdpModel& operator=(const FsdpModel&) = delete;

  // What the optimizer steps: (FQN, f32 contiguous leaf holding this rank's rows [r0, r1) of dim
  // 0 by the torch.chunk rule — possibly 0 rows), in root.named_parameters() order (a tensor
  // registered under two FQNs appears once, under the first). After backward their .grad is the
  // SUM over dp ranks, accumulated across micro-batches in f32; every parameter of a group that
  // took part in a backward gets one (zeros where unused).
  std::vector<std::pair<std::string, Tensor>> sharded_parameters() const;
  // The same tensors described as DTensors: Shard(0) of the module's tensor on a 1-d "dp_shard"
  // mesh over its group's shard communicator (a mesh of one rank without one). What checkpoints and sharded optimizers
  // derive their pieces from (the trainer composes it with tensor-parallel placements: see
  // train/parallelize.h). Collective over shard_comm (the world without one).
  std::vector<std::pair<std::string, shard::DTensor>> parameters() const;
  // Call once after the last micro-batch's backward of a step, before the optimizer step: waits
  // for outstanding reductions so every sharded .grad is final, and frees every gathered
  // parameter (the root's too), so the next forward gathers the updated masters.
  void finish_grads();
  // Frees every gathered parameter (waiting for in-flight all-gathers) without touching
  // gradients: call after changing the masters outside a step (e.g. a checkpoint load).
  void reshard();

  // Communication since construction. Bytes are those this rank sends under ring algorithms:
  // (W-1)·S per all-gather or reduce-scatter of S-element segments over W ranks, 2·(R-1)/R·S per
  // all-reduce over R replicas.
  struct Stats {
    int64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
    // exposed_wait_s: time the caller blocked waiting for collectives; comm_s: time collectives
    // were in flight, from issue until their completion was seen (an upper bound).
    double exposed_wait_s = 0, comm_s = 0;
    // Host-tier masters / gradients: f32 shard bytes copied host → device by gathers and
    // reduction results copied device → host.
    int64_t host_to_device_bytes = 0, device_to_host_bytes = 0;
  };
  Stats stats() const;
  // True when the module's parameters are the masters (world of one, f32, no replicate axis).
  bool passthrough() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// The modules whose FQN matches one of `globs` ('*' any run of characters, dots included), in
// depth-first registration order — forward order for sequential models; a matched module's
// descendants are not searched. E.g. {"model.layers.*"} gives every decoder layer of a CausalLM.
// Throws ValueError naming a glob that matches nothing.
Groups groups_by_glob(nn::Module& root, const std::vector<std::string>& globs);

}  // namespace hp::fsdp
