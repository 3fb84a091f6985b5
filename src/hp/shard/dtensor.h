// DTensor: this rank's local tensor + the global shape + mesh + one placement per mesh axis.
//
// The local tensor is an ordinary autograd tensor, so ops on local() are recorded as usual and
// redistribute() is differentiable. When several mesh axes shard the same tensor dim (FSDP's
// Shard(0) over dp_shard on top of a tensor-parallel Shard(0) over tp), the innermost axis splits
// first and each outer axis splits the piece it left, every split by the torch.chunk rule
// (torch's _StridedShard): such a DTensor describes a shard — local_shape, local_offsets,
// checkpoints, optimizer boxes — but redistribute() rejects it.
//
// Gradient layouts (what backward of redistribute assumes about the incoming gradient):
//   the gradient of an output axis placed Replicate after Shard→Replicate is Partial(sum) — the
//   consumers of a gathered activation are rank-specific (tensor/sequence parallel), so the
//   backward is a reduce-scatter; the gradient of any other Replicate or Shard output has the
//   output's placement, and that of a Partial output is Replicate. The gradient is delivered in
//   the input's placement with Partial replaced by Replicate. Hence, per transition (fwd → bwd):
//     Shard→Replicate    all-gather     → reduce-scatter (Partial→Shard)
//     Partial→Replicate  all-reduce     → identity
//     Partial→Shard      reduce-scatter → all-gather (Shard→Replicate)
//     Shard(i)→Shard(j)  all-to-all     → all-to-all back
//     Replicate→Shard    local slice    → all-gather
//     Replicate→Partial  keep/zero      → identity
//   Pass grad_placements to state the incoming gradient's layout explicitly (also with dst equal
//   to the current layout: Replicate with a Partial gradient is identity forward and all-reduce
//   backward, Megatron's "f" at a tensor-parallel region's entry); full_tensor() assumes
//   a Replicate gradient (a replicated consumer such as the loss), so its backward slices.
#pragma once

#include <optional>

#include "hp/core/random.h"
#include "hp/core/tensor.h"
#include "hp/shard/mesh.h"
#include "hp/shard/placement.h"

namespace hp::shard {

class DTensor {
 public:
  DTensor() = default;
  // Wraps this rank's local part. global_shape empty: inferred from the local shapes (collective
  // over the mesh). Collective check on every rank: placements fit the mesh and tensor, the global
  // shape agrees across ranks and every local shape matches it; else ValueError on every rank.
  static DTensor from_local(const Tensor& local, MeshPtr mesh, Placements placements,
                            Shape global_shape = {});

  const Tensor& local() const { return local_; }
  const Shape& global_shape() const { return global_; }
  const MeshPtr& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  bool defined() const { return local_.defined(); }
  // The global index of local()'s first element on every dim (local_offsets below).
  Shape offsets() const;

  // The same global tensor laid out as dst, planned one mesh axis at a time. Differentiable.
  DTensor redistribute(const Placements& dst,
                       const std::optional<Placements>& grad_placements = std::nullopt) const;
  // The global tensor on every rank (redistribute to all-Replicate; backward slices).
  Tensor full_tensor() const;

 private:
  Tensor local_;
  Shape global_;
  MeshPtr mesh_;
  Placements placements_;
};

// Slices `full` (the same on every rank) into this rank's part of placements. Differentiable.
DTensor distribute_tensor(const Tensor& full, MeshPtr mesh, Placements placements);

// Sharded random init: each rank draws only its local elements, at their global element offsets,
// so the result equals randn/rand of the global shape with the same generator state; every rank
// advances `gen` by the global element count. Partial placements are rejected.
DTensor dtensor_randn(const Shape& global_shape, MeshPtr mesh, Placements placements,
                      DType dt = DType::f32, double mean = 0.0, double std = 1.0,
                      Generator& gen = default_generator());
DTensor dtensor_rand(const Shape& global_shape, MeshPtr mesh, Placements placements,
                     DType dt = DType::f32, double lo = 0.0, double hi = 1.0,
                     Generator& gen = default_generator());

// This rank's local shape and the global offset of its first element on each dim.
Shape local_shape(const Shape& global_shape, const DeviceMesh& mesh, const Placements& placements);
Shape local_offsets(const Shape& global_shape, const DeviceMesh& mesh,
                    const Placements& placements);

namespace detail {
// Throws ValueError naming the problem unless placements fit mesh and a tensor of ndim dims;
// `nested` allows several axes to shard one dim (a description; redistribute does not).
void check_placements(const DeviceMesh& mesh, const Placements& placements, int64_t ndim,
                      bool nested = false);
// Converts a local tensor from src to dst layout; not recorded by autograd.
Tensor redistribute_local(const Tensor& local, const Shape& global, const DeviceMesh& mesh,
                          const Placements& src, const Placements& dst);
}  // namespace detail

}  // namespace hp::shard
