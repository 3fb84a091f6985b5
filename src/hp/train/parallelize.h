// The parallelize step: the one place that turns a built model and the resolved config into what
// the training loop trains (docs/ARCHITECTURE.md §4b). Every transform is applied here, in this
// order, so the loop never knows it:
//   0. PP        pipeline parallelism over the pp axis (outermost): the model is cut into stages at
//                layer boundaries and this rank keeps only its stages' modules, global FQNs kept
//                (train/pipeline_step.h; the trainer runs the schedule, pipeline/executor.h)
//   1. TP / SP   the architecture's tensor-parallel plan (models/tp_plan.h) over the mesh's tp
//                axis: column/row-parallel attention and MLP, vocabulary-parallel embedding and
//                head, the loss on the local vocabulary columns; sequence parallelism for the
//                norms and the residual stream (parallel.sequence_parallel)
//   2. EP        expert parallelism over ep ranks of dp_shard × cp: every MoE block keeps only
//                this rank's experts (global FQNs kept) and sends each token's rows to their
//                experts' ranks (moe/expert_parallel.h)
//   3. CP        context parallelism over the cp ranks: loss() trains on this rank's zigzag spans
//                of every row and attention runs across the ranks (ring or Ulysses,
//                parallel/context_parallel.h); parameters stay whole over cp
//   4. MXFP8     low_precision.recipe mxfp8: matched Linears / expert sets run MX kernels (inside
//                the TP wrappers: the kernel hook is the innermost GEMM)
//   5. recompute activation checkpoint regions on decoder layers or their blocks (recompute.*, or
//                the blocks the memory plan chose to recompute: offload.activations_select auto)
//   6. FSDP      every decoder layer and the root become groups whose TP-local tensors are
//                sharded on dim 0 over dp_shard × cp (torchtitan's dp_shard_cp: the cp ranks
//                hold the same parameters, so they shard them too; HSDP: replicated over
//                dp_replicate); with EP a layer's local experts form a second group, sharded over
//                the ranks with the same expert coordinate; mixed precision is this step over a
//                world of one
//   7. offload   offload.activations: host | disk — the selected layers' (or blocks') saved tensors
//                move to the host tier (or the disk tier's file) and are prefetched back for
//                backward (offload/activations.h);
//                outermost, so FSDP's hooks still take its gathered parameters first. (Optimizer
//                state and master/gradient shards are placed by the optimizer and FSDP: §4c.)
//
// Every trained parameter is then described once, as a DTensor over the mesh (global shape and one
// placement per axis, e.g. (Replicate, Shard(0), Shard(1)) for a row-parallel weight under FSDP;
// an expert's over the expert mesh): the optimizer's shard specs and the checkpoint chunks are
// derived from it, so any layout saves and any other layout loads.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hp/optim/optimizer.h"
#include "hp/optim/schedule.h"
#include "hp/shard/dtensor.h"
#include "hp/train/config.h"
#include "hp/train/layout.h"

namespace hp::checkpoint {
struct Chunk;
}
namespace hp::fsdp {
class FsdpModel;
}
namespace hp::models {
class CausalLM;
}

namespace hp::offload {
class ActivationOffload;
}

namespace hp::train {

// "state.<fqn>.<name>" → (fqn, name); throws ValueError for other keys.
std::pair<std::string, std::string> split_state_key(const std::string& key);

struct Parallelized {
  std::unique_ptr<fsdp::FsdpModel> fsdp;
  // Each trained parameter, in the optimizer's order: its FQN and its DTensor, whose local() is
  // the f32 master shard the optimizer steps.
  std::vector<std::pair<std::string, shard::DTensor>> params;
  // The FSDP groups' module prefixes in forward order ("model.layers.0", ...; the root's
  // parameters are those under none): the units optimizer state is streamed in (offload).
  std::vector<std::string> fsdp_prefixes;
  bool sequence_parallel = false;
  std::vector<std::string> mx_modules, recompute_modules, offload_modules;
  // offload.activations: the offloader of the selected blocks (null without it).
  std::shared_ptr<offload::ActivationOffload> activation_offload;
  // Parameters of the model that other ranks hold and this one does not (EP: other experts; PP:
  // other stages).
  std::set<std::string> held_elsewhere;
  // PP: decoder layers of each stage, in model order (train/pipeline_step.h); empty when pp = 1.
  std::vector<int64_t> layers_per_stage;
  // PP with tied embeddings whose first and last stages run on different ranks: Megatron's
  // embedding group. Both ranks hold the matrix (the last as its head's weight) and, after
  // backward, add each other's gradient (add_tied_grads), so they take the same update. The last
  // stage's rank holds the copy: it neither saves it nor counts it in the gradient norm.
  struct Tied {
    std::string fqn;  // "" = none
    int peer = -1;    // the other holder's rank in Layout::pp_comm; -1 on the other stages
    bool copy = false;
  } tied;
  bool is_tied_copy(const std::string& fqn) const { return tied.copy && fqn == tied.fqn; }

  Parallelized();
  ~Parallelized();
  Parallelized(Parallelized&&) noexcept;
  Parallelized& operator=(Parallelized&&) noexcept;

  std::vector<optim::NamedTensor> named_parameters() const;
  // Parameters split across ranks (Muon gathers each whole matrix over `comm`).
  std::map<std::string, optim::ShardSpec> shard_specs(const Layout& layout) const;
  // The parameters this rank counts in the global gradient norm over layout.model_comm (every
  // element of the model once: parameters replicated over tp count on tp rank 0 only; the others
  // are clipped alike, since the clip is the optimizer's gradient scale).
  std::vector<Tensor> norm_parameters(const Layout& layout) const;
  // The embedding group's gradient exchange (tied): grad += the peer's grad, on both ranks (the
  // same sum, in either order); nothing on other ranks.
  void add_tied_grads(const Layout& layout) const;
  // This rank's checkpoint pieces of the parameters and of the optimizer state (moments share
  // their parameter's box; step counters are 0-d tensors written once). Pieces replicated over a
  // mesh axis are written by its coordinate 0 only (`for_save`); loading lists every piece.
  std::vector<checkpoint::Chunk> chunks(const std::vector<optim::NamedTensor>& optimizer_state,
                                        bool for_save) const;
};

// offload.activations_select largest | auto: the memory plan's choice among the blocks the
// offload selection names (train/memory_plan.h: MemoryPlan::offloaded_blocks / recomputed_blocks).
struct ActivationChoice {
  std::vector<std::string> offload;    // saved tensors swapped to offload.activations' tier
  std::vector<std::string> recompute;  // auto: recompute regions instead (step 5)
};

// Applies the steps above to `model` (built with f32 masters, the same on every rank).
// `choice`: required with offload.activations_select largest | auto.
Parallelized parallelize(models::CausalLM& model, const Layout& layout, const Config& cfg,
                         const ActivationChoice* choice = nullptr);

}  // namespace hp::train
