// DeepSeek-V4's tensor-parallel plan (tp_plan.h): attention split by query heads, everything that
// all heads share kept whole on every rank, the experts replicated as in the other MoE plans.
//
// Shapes (H heads of d, g = o_groups, r = o_lora_rank, tp ranks):
//   q_a_proj, q_a_norm          replicated: q_res [B, T, q_lora] is whole on every rank (the
//                               indexer reads it too)
//   q_b_proj                    colwise by heads, entering the region (f on q_res): this rank's
//                               H / tp heads [B, T, H / tp · d]
//   kv_proj, kv_norm            replicated: the one K = V head [B, T, d] serves every query head;
//                               kv_norm's output enters the region (f), so the partial gradients
//                               of this rank's heads are summed before kv_norm / kv_proj see them
//   compressor (CSA / HCA)      replicated likewise, its kv_norm's output entering the region; the
//                               indexer (no gradient) stays whole
//   sinks [H]                   Shard(0): this rank's heads' sink logits
//   o_a_proj [g · r, H · d / g] Shard(0) by whole groups: group j reads heads
//                               [j · H / g, (j + 1) · H / g), so with tp dividing g this rank's
//                               heads are exactly its g / tp groups' inputs — exact, no exchange
//   o_b_proj [D, g · r]         rowwise by the same groups (chunks of r): partial sums all-reduced
// Splitting the shared K = V head or the compressors is not possible (one head); splitting o_a
// anywhere but at group edges would mix ranks' heads inside a group, hence tp must divide o_groups
// (and num_attention_heads), checked first with both numbers.
#include "hp/core/error.h"
#include "hp/models/deepseek_v4.h"
#include "hp/models/tp_plan.h"
#include "hp/ops/ops.h"
#include "hp/shard/placement.h"

namespace hp::models {

namespace {

// The output of a replicated module enters the tensor-parallel region (f on the output: identity
// forward, gradient all-reduced backward): its consumers are split, so each rank's gradient of it
// is partial. Its own parameters stay replicated.
class OutputEntersRegion : public shard::ParallelStyle {
 public:
  void check(nn::Module&, const shard::StyleContext&) const override {}
  void apply(nn::Module& m, const shard::StyleContext& ctx,
             shard::ShardedParameters&) const override {
    dist::CommPtr comm = ctx.mesh->axis_comm(ctx.axis);
    m.set_forward_wrapper([comm](const Tensor& x, const nn::Module::ForwardFn& inner) {
      return shard::copy_to_region(inner(x), comm);
    });
  }
  std::string name() const override { return "OutputEntersRegion"; }
};

// DeepseekV4Attention's per-head sinks [H]: this rank's heads (the torch.chunk rows of the heads
// q_b_proj gave it). Checked first (parents before children), so a degree that splits neither the
// heads nor the output groups evenly is named by its config key.
class SinksByHead : public shard::ParallelStyle {
 public:
  explicit SinksByHead(int64_t o_groups) : o_groups_(o_groups) {}
  void check(nn::Module& m, const shard::StyleContext& ctx) const override {
    auto* a = dynamic_cast<DeepseekV4Attention*>(&m);
    if (!a)
      HP_THROW(ValueError, "models", name(), " applies to DeepseekV4Attention; '", ctx.fqn,
               "' is not one");
    const int64_t h = a->sinks.size(0), degree = ctx.mesh->size(ctx.axis);
    if (h % degree != 0 || o_groups_ % degree != 0)
      HP_THROW(ValueError, "models", "DeepSeek-V4 tensor parallelism on '", ctx.fqn,
               "': parallel.tp = ", degree, " must divide num_attention_heads (", h,
               ") and o_groups (", o_groups_, "): a rank holds whole output groups");
  }
  void apply(nn::Module& m, const shard::StyleContext& ctx,
             shard::ShardedParameters& out) const override {
    check(m, ctx);
    auto& a = static_cast<DeepseekV4Attention&>(m);
    const Shape global = a.sinks.shape();
    const shard::ChunkRange r =
        shard::chunk_range(global[0], ctx.mesh->size(ctx.axis), ctx.mesh->coordinate(ctx.axis));
    a.sinks = a.set_parameter("sinks", narrow(a.sinks.detach(), 0, r.start, r.length).clone());
    shard::Placements p(static_cast<size_t>(ctx.mesh->ndim()), shard::Replicate{});
    p[static_cast<size_t>(ctx.axis)] = shard::Shard{0};
    out.add(ctx.fqn + ".sinks", shard::DTensor::from_local(a.sinks, ctx.mesh, p, global));
  }
  std::string name() const override { return "SinksByHead"; }

 private:
  int64_t o_groups_;
};

}  // namespace

shard::ShardingPlan deepseek_v4_tp_plan(const ModelConfig& c, bool sequence_parallel) {
  using namespace shard;
  if (sequence_parallel)
    HP_THROW(ValueError, "models", c.architecture,
             ": sequence parallelism with experts is not supported (the router would see a slice "
             "of the sequence); set parallel.sequence_parallel: false");
  auto enters = std::make_shared<OutputEntersRegion>();
  ShardingPlan plan{
      {"*self_attn", std::make_shared<SinksByHead>(c.o_groups)},
      {"*self_attn.q_b_proj",
       std::make_shared<ColwiseParallel>(c.head_dim, Placement{Replicate{}})},
      {"*self_attn.kv_norm", enters},
      // Applied by weight in the grouped projection (no forward wrapper runs): rows split only.
      {"*self_attn.o_a_proj", std::make_shared<ColwiseParallel>(c.o_lora_rank, std::nullopt)},
      {"*self_attn.o_b_proj", std::make_shared<RowwiseParallel>(c.o_lora_rank, Replicate{})},
  };
  bool compressed = false;
  for (const std::string& t : c.layer_types) compressed |= t != kSlidingAttention;
  if (compressed) plan.emplace_back("*self_attn.compressor.kv_norm", enters);
  add_vocab_parallel_ends(plan, c, false);
  return plan;
}

}  // namespace hp::models
