// Declarative sharding plans (HyperShard): module-name patterns → parallel styles, applied to an
// nn::Module over one mesh axis without touching model code.
//
// Patterns match module FQNs ("layers.0.mlp.gate_proj"; the root is ""), whole string, with `*`
// matching any run of characters including dots ("*.mlp.*_proj", "layers.*.self_attn.q_proj").
// Every pattern must match at least one module, and a module may match one pattern only.
//
// Applying a style to a module:
//   - replaces each of its parameters by this rank's shard (set_parameter: the shard is a new
//     leaf tensor, so optimizers must be built after the plan is applied), recorded with its
//     placement and global shape in the returned ShardedParameters (checkpoints gather from it);
//   - installs a forward wrapper (nn::Module::set_forward_wrapper) doing the redistributions at
//     the module boundary. A wrapper rather than a replacing subclass because parents call their
//     typed member pointers (GatedMLP::gate_proj), which replace_child does not rebind.
//
// Styles (Megatron's f / g operators):
//   ColwiseParallel   weight [out, in] Shard(0), bias Shard(0); input Replicate whose gradient is
//                     Partial (f: identity forward, all-reduce backward); output this rank's
//                     Shard(-1) columns of the activation, kept local.
//   RowwiseParallel   weight Shard(1), bias replicated; input this rank's Shard(-1) columns (what
//                     a colwise module produced); output Partial → Replicate (g: all-reduce
//                     forward, identity backward); the bias is added after the reduction.
//   SequenceParallel  norms (RMSNorm): input and output this rank's Shard(seq_dim) rows; the
//                     weight stays replicated and its gradient is all-reduced over the axis.
// Sequence parallelism (Megatron-SP, torch input_layouts / output_layouts = Shard(1)): colwise
// with input layout Shard(seq_dim) all-gathers the rows instead of f; rowwise with output layout
// Shard(seq_dim) reduce-scatters them instead of g (bias added on the local rows, its gradient
// all-reduced).
// Uneven sizes follow the torch.chunk rule (shard/placement.h). With head_dim set, colwise /
// rowwise shard whole attention heads and require the head count to divide by the degree.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hp/nn/module.h"
#include "hp/shard/dtensor.h"

namespace hp::shard {

// A parameter after a plan: the module's tensor is local(); placements over the whole mesh.
struct ShardedParameter {
  std::string fqn;
  DTensor tensor;
};

class ShardedParameters {
 public:
  const std::vector<ShardedParameter>& items() const { return items_; }
  // The entry for a parameter FQN; throws ValueError naming it when the plan did not touch it.
  const DTensor& at(const std::string& fqn) const;
  bool contains(const std::string& fqn) const;
  void add(std::string fqn, DTensor t) { items_.push_back({std::move(fqn), std::move(t)}); }

 private:
  std::vector<ShardedParameter> items_;
};

// Where a style applies: the mesh, the axis it shards over, and the module's FQN (for errors).
struct StyleContext {
  MeshPtr mesh;
  int64_t axis = 0;
  std::string fqn;
};

class ParallelStyle {
 public:
  virtual ~ParallelStyle() = default;
  // Throws ValueError when the style cannot take m (wrong type, heads not dividing the degree);
  // parallelize_module checks every match before it applies any.
  virtual void check(nn::Module& m, const StyleContext& ctx) const = 0;
  // Shards m's parameters in place, installs its forward wrapper and records the parameters.
  virtual void apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const = 0;
  virtual std::string name() const = 0;
};
using StylePtr = std::shared_ptr<const ParallelStyle>;

class ColwiseParallel : public ParallelStyle {
 public:
  // head_dim > 0: rows are attention heads of that size, split whole and evenly.
  // input_layout: Replicate (f: identity forward, all-reduce backward) or Shard(seq_dim) (this
  // rank's rows of the activation, all-gathered forward, gradient reduce-scattered backward).
  // std::nullopt: the input is already in the region — a parent's PrepareModuleInput entered it
  // once for several modules (q/k/v share one gather; their gradients meet before its backward).
  explicit ColwiseParallel(int64_t head_dim = 0,
                           std::optional<Placement> input_layout = Placement{Replicate{}})
      : head_dim_(head_dim), input_layout_(input_layout) {}
  void check(nn::Module& m, const StyleContext& ctx) const override;
  void apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const override;
  std::string name() const override { return "ColwiseParallel"; }
  const std::optional<Placement>& input_layout() const { return input_layout_; }
  int64_t head_dim() const { return head_dim_; }

 private:
  int64_t head_dim_;
  std::optional<Placement> input_layout_;
};

class RowwiseParallel : public ParallelStyle {
 public:
  // head_dim > 0: input columns are attention heads of that size, split whole and evenly.
  // output_layout: Replicate (g: all-reduce forward, identity backward) or Shard(seq_dim) (partial
  // sums reduce-scattered to this rank's torch.chunk rows forward, gradient all-gathered backward).
  explicit RowwiseParallel(int64_t head_dim = 0, Placement output_layout = Replicate{})
      : head_dim_(head_dim), output_layout_(output_layout) {}
  void check(nn::Module& m, const StyleContext& ctx) const override;
  void apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const override;
  std::string name() const override { return "RowwiseParallel"; }
  const Placement& output_layout() const { return output_layout_; }

 private:
  int64_t head_dim_;
  Placement output_layout_;
};

// An RMSNorm that sees only this rank's part of the activation (its heads for Qwen3's q_norm /
// k_norm after colwise q/k, its sequence rows under SequenceParallel): the weight stays
// replicated and its gradient, partial per rank, is all-reduced over the axis.
class LocalNormParallel : public ParallelStyle {
 public:
  void check(nn::Module& m, const StyleContext& ctx) const override;
  void apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const override;
  std::string name() const override { return "LocalNormParallel"; }
};

// Norms between tensor-parallel regions: input and output are this rank's Shard(seq_dim) rows of
// [B, T, hidden], kept local; the weight gradient is all-reduced over the axis. The region's
// entry / exit redistributions belong to the neighbouring modules: ColwiseParallel with input
// layout Shard(seq_dim) and RowwiseParallel with output layout Shard(seq_dim).
class SequenceParallel : public LocalNormParallel {
 public:
  std::string name() const override { return "SequenceParallel"; }
};

// A module whose input enters a tensor-parallel region and that shards nothing itself: e.g. the
// output head of a model with tied embeddings, whose weight the embedding's style already split.
// input_layout Replicate → f (identity forward, gradient all-reduced over the axis); Shard(d) →
// all-gather along d (gradient reduce-scattered). The output stays local.
class PrepareModuleInput : public ParallelStyle {
 public:
  explicit PrepareModuleInput(Placement input_layout = Replicate{}) : input_layout_(input_layout) {}
  void check(nn::Module& m, const StyleContext& ctx) const override;
  void apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const override;
  std::string name() const override { return "PrepareModuleInput"; }

 private:
  Placement input_layout_;
};

// Megatron's region operators over one axis's communicator, differentiable; the styles above are
// built from them. Each is the identity on a communicator of size 1.
//   copy_to_region          f: identity forward, gradient all-reduced (sum) backward
//   reduce_from_region      g: all-reduce (sum) forward, identity backward
//   gather_from_region      this rank's part along dim → all of it (all-gather, any split);
//                           backward reduce-scatters the (partial) gradient to the same split
//   reduce_scatter_to_region  partial sums → this rank's torch.chunk part along dim of the sum;
//                           backward all-gathers the gradient
Tensor copy_to_region(const Tensor& x, const dist::CommPtr& comm);
Tensor reduce_from_region(const Tensor& x, const dist::CommPtr& comm);
Tensor gather_from_region(const Tensor& x, int64_t dim, const dist::CommPtr& comm);
Tensor reduce_scatter_to_region(const Tensor& x, int64_t dim, const dist::CommPtr& comm);

// What the region operators sent from this process since it started, counted as ring algorithms
// send: 2·(W−1)/W of the tensor per all-reduce, (W−1)/W of the whole (gathered) tensor per
// all-gather or reduce-scatter — the tensor-parallel communication volume.
struct RegionStats {
  int64_t bytes = 0, calls = 0;
};
RegionStats region_stats();

// Ordered (pattern, style) rules.
using ShardingPlan = std::vector<std::pair<std::string, StylePtr>>;

// Applies plan to root over mesh axis `axis`; returns the parameters it sharded or replicated.
// Throws ValueError ("[shard] ...") naming the pattern that matched nothing, the module matched
// twice, a module a style cannot take, or heads that do not divide by the degree; every rank
// sees the same modules, so every rank throws the same error before any communication.
ShardedParameters parallelize_module(nn::Module& root, const MeshPtr& mesh, const std::string& axis,
                                     const ShardingPlan& plan);

// Whole-string glob match, `*` = any run of characters (dots included), `?` one character.
using nn::glob_match;

}  // namespace hp::shard
