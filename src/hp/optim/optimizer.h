// The optimizer: AdamW and Muon over named f32 master weights, grouped by FQN globs.
//
// Usage by the trainer loop:
//   Optimizer opt(model.named_parameters(), options);
//   for step: zero_grad(); forward/backward of Σ token losses / global tokens (train/trainer.cpp);
//             clip_grad_norm(opt.parameters(), c);
//             opt.step(peak_lr * lr_factor(schedule, step));
//   checkpoint: opt.state_dict() / opt.load_state_dict(named tensors)
//
// Each parameter is assigned once, at construction, to the first ParamGroup with a glob matching
// its FQN (else to `default_algorithm`); the group fixes its algorithm, lr scale and weight decay.
// Muon follows docs/ARCHITECTURE.md §4 (Moonlight form of Nesterov momentum: buf = μ·buf + g,
// u = g + μ·buf; Newton–Schulz on u; p *= 1 - lr·wd; p -= lr·scale·NS(u)); tensors with more than
// two dims are a stack of [rows, cols] matrices over their last two dims (stacked experts).
// State is created lazily on a parameter's first step; parameters whose .grad is undefined are
// skipped entirely (no decay, no state change), as in torch.
//
// Sharded parameters (FSDP, tensor parallelism; docs/ARCHITECTURE.md §4): a parameter given a
// ShardSpec is this rank's box of a larger tensor. AdamW is elementwise, so it steps the box as is.
// Muon never orthogonalizes a partial matrix: each parameter whose matrices are split across ranks
// is gathered box by box to one owner rank (round-robin over the parameters sorted by size, the
// same on every rank), Newton–Schulz runs there on the full matrices, and each rank gets its box
// back (optim/muon_ortho.h); momentum and weight decay stay local and the update scale uses the
// global shape, so a sharded step equals the unsharded one bitwise. Stacked tensors [E, rows, cols]
// split only on the stack dims hold whole matrices and are orthogonalized where they are.
// state_dict() holds the local box under the same keys.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"
#include "hp/nn/module.h"

namespace hp::optim {

class StateOffload;
struct StateOffloadOptions;
struct TransferStats;

using NamedTensor = std::pair<std::string, Tensor>;

enum class Algorithm {
  adamw,
  muon,
  auto_select,  // muon for tensors with >= 2 dims, adamw otherwise
};

enum class MuonScale {
  rms_match,  // 0.2·sqrt(max(rows, cols)): matches AdamW's update RMS, so both share one lr
  shape,      // sqrt(max(1, rows/cols)) (Keller Jordan)
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

struct MuonOptions {
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;
  MuonScale update_scale = MuonScale::rms_match;
  double weight_decay = 0.01;
};

struct ParamGroup {
  std::string name;                // for messages ("groups[0]" by default)
  std::vector<std::string> globs;  // matched against the whole FQN ('*' any run, '?' one char)
  Algorithm algorithm = Algorithm::adamw;
  double lr_scale = 1.0;               // this group's lr = step lr · lr_scale
  std::optional<double> weight_decay;  // overrides the algorithm's weight decay
};

struct OptimizerOptions {
  AdamWOptions adamw;
  MuonOptions muon;
  std::vector<ParamGroup> groups;  // first match wins
  Algorithm default_algorithm = Algorithm::adamw;
};

// This rank's part of a parameter split over the ranks of `comm`: the box starting at `offsets`
// (one per dim of global_shape) with the local tensor's shape. The boxes of the ranks of comm
// tile the global tensor exactly (every element on exactly one rank; empty boxes allowed) —
// e.g. FSDP's dim-0 torch.chunk rows, a TP Shard(1) column block, or both at once.
struct ShardSpec {
  Shape global_shape;
  std::vector<int64_t> offsets;
  dist::CommPtr comm;
};

// The spec of a dim-0 shard (FSDP's rows): offsets {row_offset, 0, ..., 0}.
ShardSpec row_shard(Shape global_shape, int64_t row_offset, dist::CommPtr comm);

// One rank's box of a sharded parameter: [offsets[d], offsets[d] + sizes[d]) on each dim d.
struct ShardBox {
  std::vector<int64_t> offsets, sizes;
  int64_t numel() const { return shape_numel(sizes); }
};

// '*' matches any (possibly empty) run of characters, dots included; '?' matches one character.
using nn::glob_match;

Algorithm algorithm_from_name(std::string_view name);  // "adamw" | "muon" | "auto"
std::string_view algorithm_name(Algorithm a);
MuonScale muon_scale_from_name(std::string_view name);  // "rms_match" | "shape"
std::string_view muon_scale_name(MuonScale s);
// The Muon update scale for a [rows, cols] matrix.
double muon_update_scale(MuonScale s, int64_t rows, int64_t cols);

class Optimizer {
 public:
  // params: (FQN, f32 contiguous leaf) pairs, e.g. nn::Module::named_parameters(). Throws
  // ValueError("[optim] ...") naming the FQN for a non-f32 or non-contiguous parameter, a
  // duplicate FQN, or a muon group matching a tensor with fewer than 2 dims.
  Optimizer(std::vector<NamedTensor> params, OptimizerOptions options);
  // With `shards` (FQN → ShardSpec) naming the parameters that are boxes of larger tensors.
  // Collective over each distinct communicator (every rank of it constructs with the same sharded
  // FQNs in the same order): the ranks exchange their boxes once. Throws ValueError("[optim] ...")
  // on every rank when a spec names an unknown FQN, its box does not fit the local shape or the
  // global shape, or the ranks' boxes overlap or leave a hole. step() is then collective too: all
  // ranks of a shard group step together.
  Optimizer(std::vector<NamedTensor> params, OptimizerOptions options,
            std::map<std::string, ShardSpec> shards);
  ~Optimizer();

  // Keeps the state in the host tier or on disk from now on (optim/state_offload.h); call before
  // the first step or load_state_dict. Numerics are unchanged.
  void set_state_offload(StateOffloadOptions o);
  // Bytes the state offload moved and the time steps waited on it (zeros without offload).
  TransferStats transfer_stats() const;
  // The tier state tensors are allocated in (device, or host under offload).
  MemTier state_tier() const;

  // One update of every parameter that has a gradient; `lr` is the scheduled peak-group lr.
  // With Muon matrices split across ranks, collective over their shard groups: every rank steps,
  // with gradients for the same sharded parameters (checked: ValueError on every rank).
  // Every gradient element is first multiplied by grad_scale in float (clip_factor in grad.h:
  // the same values as clipping the .grad tensors in place, without a pass of its own; 1 is exact).
  void step(double lr, double grad_scale = 1.0);
  // Drops every gradient (set to undefined, so unused parameters are skipped next step).
  void zero_grad();
  // What runs at the ends of zero_grad() and step(), for state that follows the optimizer's steps
  // without being stepped by it (the MoE routers' correction biases: train/expert_balance.h).
  // Hooks run in the order added; an unset function is skipped.
  struct Hook {
    std::function<void()> after_zero_grad;
    std::function<void()> after_step;  // after the update, collective if the hook is
  };
  void add_hook(Hook hook);

  // "state.<fqn>.step" (i64 []), and "state.<fqn>.exp_avg" / "exp_avg_sq" (AdamW) or
  // "state.<fqn>.momentum_buffer" (Muon), f32 with the parameter's shape; parameters never
  // stepped have no entries. Tensors are copies.
  std::vector<NamedTensor> state_dict() const;
  // Replaces the state from such entries. Throws ValueError naming the key for an unknown FQN or
  // state name, a wrong shape/dtype, or a parameter whose entries are incomplete.
  void load_state_dict(const std::vector<NamedTensor>& state);

  struct Entry {
    std::string fqn;
    Tensor param;         // f32 master weight, updated in place
    Algorithm algorithm;  // adamw or muon (resolved)
    std::string group;    // name of the matching group ("default" if none)
    double lr_scale = 1.0;
    double weight_decay = 0.0;
    int64_t step = 0;                   // number of updates applied
    Tensor exp_avg, exp_avg_sq;         // AdamW moments (undefined until the first step)
    Tensor momentum_buffer;             // Muon momentum (undefined until the first step)
    std::optional<ShardSpec> shard;     // set for a sharded parameter (param holds its box)
    std::vector<ShardBox> shard_boxes;  // the box of each rank of shard->comm
  };
  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Tensor> parameters() const;
  const OptimizerOptions& options() const { return options_; }

 private:
  // step() without its checks and hooks.
  void update(double lr, double grad_scale);
  void step_adamw(const std::vector<size_t>& ids, const std::vector<Tensor>& grads, double lr,
                  double grad_scale);
  void step_muon(const std::vector<size_t>& ids, const std::vector<Tensor>& grads, double lr,
                 double grad_scale);
  void attach_shards(std::map<std::string, ShardSpec> shards);  // shard_spec.cpp
  // state_dict.cpp: e's entries, copies or the tensors themselves.
  void append_state(const Entry& e, bool copy, std::vector<NamedTensor>* out) const;
  // Steps the entries `ids` that have a gradient.
  void step_entries(const std::vector<size_t>& ids, double lr, double grad_scale);

  OptimizerOptions options_;
  std::vector<Entry> entries_;
  // Communicators of the Muon matrices split across ranks, in first-use order (every Muon step
  // is collective over each of them).
  std::vector<dist::Communicator*> muon_split_comms_;
  std::unique_ptr<StateOffload> offload_;  // null: state in the device tier
  std::vector<Hook> hooks_;
};

}  // namespace hp::optim
