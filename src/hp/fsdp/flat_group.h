// The flat layout of one FSDP group (docs/ARCHITECTURE.md §4, uneven sharding and FSDP).
//
// Every parameter p [n, ...] is split on dim 0 by the torch.chunk rule over W ranks (chunk =
// ceil(n/W) rows; rank r holds rows [min(n, r·chunk), min(n, (r+1)·chunk))). Each rank keeps one
// flat segment of S elements: for every parameter in order, its chunk rows — the real ones first,
// zero padding after. So one all-gather of the segments ([S] → [W·S]) brings the whole group, and
// one reduce-scatter of a [W·S] buffer of zero-padded gradients leaves each rank its segment of
// the sum. The f32 master weights of this rank are views into its segment.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::fsdp::detail {

struct FlatParam {
  std::string fqn;
  Tensor handle;           // the module's tensor: unsharded data while gathered, no data otherwise
  Shape shape;             // global shape
  int64_t rows = 0;        // dim 0 of the global shape
  int64_t row_numel = 0;   // elements per row
  int64_t chunk = 0;       // rows per rank, padded
  int64_t offset = 0;      // element offset of this parameter's chunk rows in every segment
  int64_t row_offset = 0;  // this rank's first row
  Tensor master;           // f32 [this rank's rows, ...], a view into FlatGroup::master()
};

class FlatGroup {
 public:
  // params: (FQN, module tensor with the full f32 value, the same on every rank). Copies this
  // rank's rows into the master segment; the tensors themselves are left as they are.
  // The master segment lives in `master_tier`, the masters' .grad in `grad_tier` (HyperOffload:
  // offload.params / offload.grads host keep them off the device tier).
  FlatGroup(const std::vector<std::pair<std::string, Tensor>>& params, int64_t world, int64_t rank,
            MemTier master_tier = MemTier::device, MemTier grad_tier = MemTier::device);

  int64_t world() const { return world_; }
  int64_t segment() const { return segment_; }  // S
  MemTier grad_tier() const { return grad_tier_; }
  // f32 [S]: this rank's rows of every parameter, padding zero (the optimizer writes through the
  // per-parameter views, never the padding).
  const Tensor& master() const { return master_; }
  std::vector<FlatParam>& params() { return params_; }
  const std::vector<FlatParam>& params() const { return params_; }

  // Gives every handle its unsharded value in `dt`, copied from `segments` [W·S] (an all-gather
  // result, or the master itself when W = 1) — a cast where dtypes differ.
  void copy_out(const Tensor& segments, DType dt);
  // Points every handle at no data, keeping its shape; its dtype becomes `dt`.
  void release(DType dt);
  // [W·S] in `dt`: every handle's .grad split into its ranks' segments, zero-padded; parameters
  // without a gradient contribute zeros.
  Tensor pack_grads(DType dt) const;
  // Adds segment [S] (a reduce-scatter result) into the masters' .grad (f32; created when
  // undefined, as views of one f32 copy of the segment).
  void accumulate_grads(const Tensor& segment);

 private:
  int64_t world_, rank_;
  MemTier master_tier_, grad_tier_;
  int64_t segment_ = 0;
  Tensor master_;
  std::vector<FlatParam> params_;
};

}  // namespace hp::fsdp::detail
