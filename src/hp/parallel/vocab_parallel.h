// Vocabulary parallelism (Megatron's VocabParallelEmbedding / vocab-parallel cross-entropy,
// torchtitan's RowwiseParallel on the embedding and loss_parallel): the two places where a
// tensor-parallel model touches the whole vocabulary, done on each rank's torch.chunk slice of it.
//
// Both split the vocabulary the same way as the weights they pair with: rank r of the axis holds
// global ids [offset_r, offset_r + V_r) (shard/placement.h chunk_range; uneven and empty slices
// allowed), so a tied or untied lm_head under ColwiseParallel produces exactly the logits columns
// vocab_parallel_cross_entropy expects. Neither ever builds a [.., vocab] tensor on one rank.
#pragma once

#include <cstdint>
#include <string>

#include "hp/dist/communicator.h"
#include "hp/shard/plan.h"

namespace hp::parallel {

// nn::Embedding under tensor parallelism: weight [vocab, hidden] becomes this rank's Shard(0)
// rows [V_r, hidden] by the torch.chunk rule (257 over 2 → 129 + 128; 5 over 4 → 2, 2, 1, 0),
// recorded with its placement and global shape in ShardedParameters like the other styles.
//
// Input ids [B, T] (any shape; i32 / i64) are the same on every rank of the axis. Each rank looks
// up its slice with ids - offset clamped into it and zeroes the rows of foreign ids with a mask,
// so the activation [B, T, hidden] is Partial(sum) over the axis (each id's row comes from the one
// rank that holds it); it is then reduced to the output layout:
//   Replicate       all-reduce forward, identity backward (Megatron's g);
//   Shard(seq_dim)  reduce-scatter to this rank's torch.chunk rows of seq_dim ([B, T_r, hidden]
//                   for seq_dim 1) forward, all-gather backward: the entry of Megatron sequence
//                   parallelism, saving the all-reduce and the first scatter.
// A rank with no rows still joins the graph, so its (empty) weight gradient is defined like
// every other rank's. Ids outside [0, vocab) throw ValueError on every rank before any
// communication (the ids are the same everywhere).
class VocabParallelEmbedding : public shard::ParallelStyle {
 public:
  explicit VocabParallelEmbedding(shard::Placement output_layout = shard::Replicate{})
      : output_layout_(output_layout) {}
  // Throws ValueError unless m is exactly an nn::Embedding (a subclass may override the forward
  // the style wraps) and the output layout is Replicate or Shard.
  void check(nn::Module& m, const shard::StyleContext& ctx) const override;
  // Shards the weight, installs the lookup + reduction wrapper. Collective over the mesh.
  void apply(nn::Module& m, const shard::StyleContext& ctx, shard::ShardedParameters& out) const override;
  std::string name() const override { return "VocabParallelEmbedding"; }
  const shard::Placement& output_layout() const { return output_layout_; }

 private:
  shard::Placement output_layout_;
};

// Cross-entropy over logits whose last dim is this rank's slice of the vocabulary, without ever
// gathering them (torchtitan's loss_parallel, Megatron's vocab_parallel_cross_entropy).
//
// logits [N, V_local] f32: columns [vocab_offset, vocab_offset + V_local) of the global vocabulary
// (V_local may be 0); the slices of the ranks of comm tile [0, V) with V = sum of V_local.
// targets [N] i32 / i64: global ids in [0, V) or ignore_index, the same on every rank; ignored rows
// count as nothing. reduction "mean" (over the non-ignored rows; 0 when every row is ignored,
// like hp::cross_entropy) or "sum". Returns the same 0-d f32 loss on every rank.
//
// Forward: each rank's per-row logsumexp over its columns (the fused row kernel: a max pass and a
// sum-of-exp pass), combined over comm as max (all-reduce max of [N]) and sum of exp(lse_r - max)
// together with the target's logit, which only the rank holding it contributes (one all-reduce
// sum of [2, N] f64); loss row = logsumexp - target logit, summed in row order in f64. Plus one
// small all-gather up front that checks the call collectively.
// Backward (w.r.t. logits; collective-free): this rank's columns of (softmax - onehot(target)) ·
// grad (/ count for "mean"), recomputed in one pass from the saved logits and the [N] global
// logsumexp — no softmax copy is kept.
//
// Throws ValueError on every rank of comm, before the reductions, for a target outside [0, V)
// (naming it and its row), logits that are not 2-d f32, targets that are not [N] i32 / i64, a
// reduction other than mean / sum, row counts or targets that differ across ranks, or slices
// that do not tile [0, V). With comm of size 1 it equals hp::cross_entropy bitwise.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_offset, const dist::CommPtr& comm,
                                    int64_t ignore_index = -100,
                                    const std::string& reduction = "mean");

}  // namespace hp::parallel
