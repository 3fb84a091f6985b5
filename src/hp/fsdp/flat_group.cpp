#include "hp/fsdp/flat_group.h"

#include "hp/core/allocator.h"
#include "hp/core/tensor_data.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/shard/placement.h"

namespace hp::fsdp::detail {

namespace {

// Rows [.., ..) of a contiguous tensor as [rows, row_numel], starting `elem_offset` elements in.
Tensor rows_view(const Tensor& t, int64_t elem_offset, int64_t rows, int64_t row_numel) {
  return t.as_strided({rows, row_numel}, {row_numel, 1}, t.offset() + elem_offset);
}

}  // namespace

FlatGroup::FlatGroup(const std::vector<std::pair<std::string, Tensor>>& params, int64_t world,
                     int64_t rank, MemTier master_tier, MemTier grad_tier)
    : world_(world), rank_(rank), master_tier_(master_tier), grad_tier_(grad_tier) {
  for (const auto& [fqn, t] : params) {
    HP_CHECK(t.dim() > 0, fqn, " is 0-d");  // rejected by FsdpModel
    FlatParam p;
    p.fqn = fqn;
    p.handle = t;
    p.shape = t.shape();
    p.rows = p.shape[0];
    p.row_numel = shape_numel(Shape(p.shape.begin() + 1, p.shape.end()));
    p.chunk = shard::chunk_size(p.rows, world);
    p.offset = segment_;
    segment_ += p.chunk * p.row_numel;
    params_.push_back(std::move(p));
  }
  master_ = zeros({segment_}, DType::f32, master_tier_);
  for (FlatParam& p : params_) {
    const shard::ChunkRange mine = shard::chunk_range(p.rows, world_, rank_);
    p.row_offset = mine.start;
    Shape local = p.shape;
    local[0] = mine.length;
    p.master = master_.as_strided(local, contiguous_strides(local), p.offset);
    if (mine.length > 0) {
      const Tensor src = p.handle.contiguous();
      rows_view(p.master, 0, mine.length, p.row_numel)
          .copy_from(rows_view(src, mine.start * p.row_numel, mine.length, p.row_numel));
    }
    p.master.set_name(p.fqn);
    p.master.requires_grad_();
  }
}

void FlatGroup::copy_out(const Tensor& segments, DType dt) {
  const MemCategoryScope as_params(MemCategory::params);
  HP_CHECK(segments.is_contiguous() && segments.numel() == world_ * segment_, segments.desc(),
           " for ", world_, " segments of ", segment_);
  for (FlatParam& p : params_) {
    Tensor full = empty(p.shape, dt);
    for (int64_t r = 0; r < world_; ++r) {
      const shard::ChunkRange c = shard::chunk_range(p.rows, world_, r);
      if (c.length == 0) continue;
      rows_view(full, c.start * p.row_numel, c.length, p.row_numel)
          .copy_from(rows_view(segments, r * segment_ + p.offset, c.length, p.row_numel));
    }
    set_data(p.handle, full);
  }
}

void FlatGroup::release(DType dt) {
  for (FlatParam& p : params_) set_data(p.handle, meta_tensor(p.shape, dt));
}

Tensor FlatGroup::pack_grads(DType dt) const {
  const MemCategoryScope as_grads(MemCategory::grads);
  Tensor flat = zeros({world_ * segment_}, dt);
  for (const FlatParam& p : params_) {
    Tensor g = p.handle.grad();
    if (!g.defined()) continue;
    HP_CHECK(g.shape() == p.shape, p.fqn, ": gradient ", g.desc());
    g = g.contiguous();
    for (int64_t r = 0; r < world_; ++r) {
      const shard::ChunkRange c = shard::chunk_range(p.rows, world_, r);
      if (c.length == 0) continue;
      rows_view(flat, r * segment_ + p.offset, c.length, p.row_numel)
          .copy_from(rows_view(g, c.start * p.row_numel, c.length, p.row_numel));
    }
  }
  return flat;
}

void FlatGroup::accumulate_grads(const Tensor& segment) {
  const MemCategoryScope as_grads(MemCategory::grads);
  HP_CHECK(segment.is_contiguous() && segment.numel() == segment_, segment.desc());
  Tensor seg = segment;
  if (segment.dtype() != DType::f32 || segment.tier() != grad_tier_) {
    // A cast, or the copy of the reduction's result to the gradients' tier (device → host).
    seg = empty({segment_}, DType::f32, grad_tier_);
    seg.copy_from(segment);
  }
  for (FlatParam& p : params_) {
    const Shape& local = p.master.shape();
    Tensor part = seg.as_strided(local, contiguous_strides(local), seg.offset() + p.offset);
    Tensor g = p.master.grad();
    if (!g.defined())
      p.master.set_grad(part);
    else
      kernels::elementwise_into(kernels::EwOp::add, g, g, part);
  }
}

}  // namespace hp::fsdp::detail
