#include "hp/shard/plan.h"

#include <atomic>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/ops/ops.h"

namespace hp::shard {

namespace detail {
namespace {

int64_t wrap_dim(int64_t d, int64_t ndim) {
  const int64_t w = d < 0 ? d + ndim : d;
  HP_CHECK(w >= 0 && w < ndim, "sequence dim ", d, " out of range for a ", ndim, "-d activation");
  return w;
}

// Every rank's length along a dim (the counts of the _v collectives).
std::vector<int64_t> gather_lengths(int64_t n, const dist::CommPtr& comm) {
  return comm->all_gather(from_data<int64_t>({n}, {1})).to_vector_as<int64_t>();
}

// The communicator collectives work on dim 0: move `d` there and back.
Tensor all_gather_dim(const Tensor& x, int64_t d, const std::vector<int64_t>& counts,
                      const dist::CommPtr& comm) {
  if (d == 0) return comm->all_gather_v(x.contiguous(), counts);
  return transpose(comm->all_gather_v(transpose(x, 0, d).contiguous(), counts), 0, d).contiguous();
}
Tensor reduce_scatter_dim(const Tensor& x, int64_t d, const std::vector<int64_t>& counts,
                          const dist::CommPtr& comm) {
  if (d == 0) return comm->reduce_scatter_v(x.contiguous(), counts);
  return transpose(comm->reduce_scatter_v(transpose(x, 0, d).contiguous(), counts), 0, d)
      .contiguous();
}

std::atomic<int64_t> g_region_bytes{0}, g_region_calls{0};

// Counts one collective of a region operator: `factor`·(W−1)/W of `nbytes` (ring algorithms).
void count(const Tensor& t, int64_t w, int64_t factor) {
  g_region_bytes += factor * (w - 1) * t.nbytes() / w;
  ++g_region_calls;
}

}  // namespace
}  // namespace detail

RegionStats region_stats() {
  return {detail::g_region_bytes.load(), detail::g_region_calls.load()};
}

Tensor copy_to_region(const Tensor& x, const dist::CommPtr& comm) {
  if (comm->size() == 1 || !autograd::needs_grad({x})) return x;
  Tensor y = x.detach();
  autograd::record("CopyToTpRegion", {x}, {y}, [comm](const std::vector<Tensor>& g) {
    detail::count(g[0], comm->size(), 2);
    return std::vector<Tensor>{comm->all_reduce(g[0].contiguous())};
  });
  return y;
}

// Megatron's g: all-reduce (sum) forward, identity backward.
Tensor reduce_from_region(const Tensor& x, const dist::CommPtr& comm) {
  if (comm->size() == 1) return x;
  Tensor y;
  {
    autograd::NoGradGuard ng;
    detail::count(x, comm->size(), 2);
    y = comm->all_reduce(x.contiguous());
  }
  autograd::record("ReduceFromTpRegion", {x}, {y},
                   [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return y;
}

// Sequence-parallel exit into a tensor-parallel region (Megatron-SP's g-bar): this rank's
// Shard(d) rows → all rows; backward reduce-scatters the gradient (partial on each rank: its
// output columns only) back to this rank's rows. Lengths are exchanged, so any split works; the
// torch.chunk split of a plan's inputs comes back as the same split.
Tensor gather_from_region(const Tensor& x, int64_t dim, const dist::CommPtr& comm) {
  if (comm->size() == 1) return x;
  const int64_t d = detail::wrap_dim(dim, x.dim());
  const std::vector<int64_t> counts = detail::gather_lengths(x.size(d), comm);
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = detail::all_gather_dim(x, d, counts, comm);
    detail::count(y, comm->size(), 1);
  }
  autograd::record("GatherFromSeqRegion", {x}, {y},
                   [comm, d, counts](const std::vector<Tensor>& g) {
                     autograd::NoGradGuard ng;
                     detail::count(g[0], comm->size(), 1);
                     return std::vector<Tensor>{detail::reduce_scatter_dim(g[0], d, counts, comm)};
                   });
  return y;
}

// Tensor-parallel region's exit into sequence parallelism (Megatron-SP's g): partial sums over
// all rows → this rank's torch.chunk rows of the sum; backward all-gathers the gradient.
Tensor reduce_scatter_to_region(const Tensor& x, int64_t dim, const dist::CommPtr& comm) {
  if (comm->size() == 1) return x;
  const int64_t d = detail::wrap_dim(dim, x.dim());
  std::vector<int64_t> counts;
  for (int r = 0; r < comm->size(); ++r)
    counts.push_back(chunk_range(x.size(d), comm->size(), r).length);
  Tensor y;
  {
    autograd::NoGradGuard ng;
    detail::count(x, comm->size(), 1);
    y = detail::reduce_scatter_dim(x, d, counts, comm);
  }
  autograd::record("ReduceScatterToSeqRegion", {x}, {y},
                   [comm, d, counts](const std::vector<Tensor>& g) {
                     autograd::NoGradGuard ng;
                     Tensor full = detail::all_gather_dim(g[0], d, counts, comm);
                     detail::count(full, comm->size(), 1);
                     return std::vector<Tensor>{full};
                   });
  return y;
}

namespace detail {
namespace {

// Activation layouts a Linear style accepts at its sharded boundary: Replicate or Shard(dim).
void check_layout(const Placement& p, const char* which, const std::string& style,
                  const StyleContext& ctx) {
  if (std::holds_alternative<Partial>(p))
    HP_THROW(ValueError, "shard", style, " on '", ctx.fqn, "': ", which,
             " layout must be Replicate or Shard(seq_dim), got Partial");
}

// Placements over the whole mesh: Replicate except p on `axis`.
Placements on_axis(const DeviceMesh& mesh, int64_t axis, Placement p) {
  Placements out(static_cast<size_t>(mesh.ndim()), Replicate{});
  out[static_cast<size_t>(axis)] = p;
  return out;
}

// Replaces parameter `name` of m (typed member `slot`) by this rank's Shard(dim) chunk and
// records it; a Replicate placement keeps the tensor and only records it.
void shard_parameter(nn::Module& m, Tensor& slot, const std::string& name, Placement p,
                     const StyleContext& ctx, ShardedParameters& out) {
  if (!slot.defined()) return;
  const Shape global = slot.shape();
  Tensor local = slot;
  if (is_shard(p)) {
    const int64_t d = std::get<Shard>(p).dim;
    ChunkRange r = chunk_range(global[static_cast<size_t>(d)], ctx.mesh->size(ctx.axis),
                               ctx.mesh->coordinate(ctx.axis));
    // A new leaf: the shard must not keep the full tensor alive through a view.
    local = narrow(slot.detach(), d, r.start, r.length).contiguous().clone();
    slot = m.set_parameter(name, local);
  }
  DTensor t = DTensor::from_local(slot, ctx.mesh, on_axis(*ctx.mesh, ctx.axis, p), global);
  out.add(ctx.fqn.empty() ? name : ctx.fqn + "." + name, std::move(t));
}

nn::Linear& as_linear(nn::Module& m, const std::string& style, const std::string& fqn) {
  if (typeid(m) != typeid(nn::Linear))
    HP_THROW(ValueError, "shard", style, " applies to nn::Linear modules; '", fqn, "' is ",
             typeid(m).name(), " (a Linear subclass may override the forward the style wraps)");
  return static_cast<nn::Linear&>(m);
}

// Whole heads of head_dim along a dim of size n must split evenly over the degree.
void check_heads(int64_t n, int64_t head_dim, const std::string& style, const StyleContext& ctx) {
  if (head_dim <= 0) return;
  const int64_t degree = ctx.mesh->size(ctx.axis);
  if (n % head_dim != 0 || (n / head_dim) % degree != 0)
    HP_THROW(ValueError, "shard", style, " on '", ctx.fqn, "': ", n / head_dim,
             " attention heads (", n, " / head_dim ", head_dim, ") do not divide by the ",
             ctx.mesh->axis_names()[static_cast<size_t>(ctx.axis)], " degree ", degree);
}

// Installs m's wrapper for an input entering a tensor-parallel region in `layout`: Replicate → f,
// Shard(d) → all-gather along d.
void enter_region(nn::Module& m, const Placement& layout, const StyleContext& ctx) {
  dist::CommPtr comm = ctx.mesh->axis_comm(ctx.axis);
  if (is_shard(layout)) {
    const int64_t d = std::get<Shard>(layout).dim;
    m.set_forward_wrapper([comm, d](const Tensor& x, const nn::Module::ForwardFn& inner) {
      return inner(gather_from_region(x, d, comm));
    });
    return;
  }
  m.set_forward_wrapper([comm](const Tensor& x, const nn::Module::ForwardFn& inner) {
    return inner(copy_to_region(x, comm));
  });
}

}  // namespace
}  // namespace detail

const DTensor& ShardedParameters::at(const std::string& fqn) const {
  for (const auto& p : items_)
    if (p.fqn == fqn) return p.tensor;
  HP_THROW(ValueError, "shard", "no sharded parameter named '", fqn, "'");
}

bool ShardedParameters::contains(const std::string& fqn) const {
  for (const auto& p : items_)
    if (p.fqn == fqn) return true;
  return false;
}

void ColwiseParallel::check(nn::Module& m, const StyleContext& ctx) const {
  if (input_layout_) detail::check_layout(*input_layout_, "input", name(), ctx);
  detail::check_heads(detail::as_linear(m, name(), ctx.fqn).weight.size(0), head_dim_, name(), ctx);
}

void ColwiseParallel::apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const {
  check(m, ctx);
  nn::Linear& lin = static_cast<nn::Linear&>(m);
  detail::shard_parameter(lin, lin.weight, "weight", Shard{0}, ctx, out);  // [out/tp, in]
  detail::shard_parameter(lin, lin.bias, "bias", Shard{0}, ctx, out);      // [out/tp]
  // x: replicated [..., in] (f) or this rank's Shard(seq) rows (all-gathered) → this rank's
  // columns [..., out/tp].
  if (input_layout_) detail::enter_region(lin, *input_layout_, ctx);
}

void PrepareModuleInput::check(nn::Module&, const StyleContext& ctx) const {
  detail::check_layout(input_layout_, "input", name(), ctx);
}

void PrepareModuleInput::apply(nn::Module& m, const StyleContext& ctx, ShardedParameters&) const {
  check(m, ctx);
  detail::enter_region(m, input_layout_, ctx);
}

void RowwiseParallel::check(nn::Module& m, const StyleContext& ctx) const {
  detail::check_layout(output_layout_, "output", name(), ctx);
  detail::check_heads(detail::as_linear(m, name(), ctx.fqn).weight.size(1), head_dim_, name(), ctx);
}

void RowwiseParallel::apply(nn::Module& m, const StyleContext& ctx, ShardedParameters& out) const {
  check(m, ctx);
  nn::Linear& lin = static_cast<nn::Linear&>(m);
  detail::shard_parameter(lin, lin.weight, "weight", Shard{1}, ctx, out);  // [out, in/tp]
  detail::shard_parameter(lin, lin.bias, "bias", Replicate{}, ctx, out);   // [out]
  dist::CommPtr comm = ctx.mesh->axis_comm(ctx.axis);
  nn::Linear* self = &lin;  // the wrapper lives in lin, so the pointer outlives it
  if (is_shard(output_layout_)) {
    // x: this rank's columns → partial sums over all rows → reduce-scattered to this rank's
    // Shard(seq) rows, then the bias on those rows. Each rank's bias gradient covers its rows
    // only, so the bias enters through f (gradient all-reduced over the axis).
    const int64_t d = std::get<Shard>(output_layout_).dim;
    lin.set_forward_wrapper([comm, self, d](const Tensor& x, const nn::Module::ForwardFn&) {
      Tensor y = reduce_scatter_to_region(self->gemm(x, self->weight, Tensor()), d, comm);
      return self->bias.defined() ? add(y, copy_to_region(self->bias, comm)) : y;
    });
    return;
  }
  // x: this rank's columns [..., in/tp] → partial sums [..., out] → all-reduced, then the bias
  // (added once, not once per rank).
  lin.set_forward_wrapper([comm, self](const Tensor& x, const nn::Module::ForwardFn&) {
    Tensor y = reduce_from_region(self->gemm(x, self->weight, Tensor()), comm);
    return self->bias.defined() ? add(y, self->bias) : y;
  });
}

void LocalNormParallel::check(nn::Module& m, const StyleContext& ctx) const {
  if (!dynamic_cast<nn::RMSNorm*>(&m))
    HP_THROW(ValueError, "shard", name(), " applies to nn::RMSNorm modules; '", ctx.fqn, "' is ",
             typeid(m).name());
}

void LocalNormParallel::apply(nn::Module& m, const StyleContext& ctx,
                              ShardedParameters& out) const {
  check(m, ctx);
  auto* norm = dynamic_cast<nn::RMSNorm*>(&m);
  detail::shard_parameter(*norm, norm->weight, "weight", Replicate{}, ctx, out);
  dist::CommPtr comm = ctx.mesh->axis_comm(ctx.axis);
  // The weight enters through f, so its per-rank gradient is summed over the axis.
  norm->set_forward_wrapper([comm, norm](const Tensor& x, const nn::Module::ForwardFn&) {
    return rms_norm(x, copy_to_region(norm->weight, comm), norm->eps);
  });
}

ShardedParameters parallelize_module(nn::Module& root, const MeshPtr& mesh, const std::string& axis,
                                     const ShardingPlan& plan) {
  HP_CHECK(mesh != nullptr);
  const int64_t a = mesh->axis(axis);
  const std::vector<std::pair<std::string, nn::Module*>> modules = root.named_modules();
  // Resolve every rule before touching anything, so a bad plan leaves the module as it was.
  std::vector<std::pair<size_t, size_t>> todo;  // (module, rule)
  std::vector<size_t> rule_of(modules.size(), plan.size());
  for (size_t r = 0; r < plan.size(); ++r) {
    HP_CHECK(plan[r].second != nullptr, "null style for pattern '", plan[r].first, "'");
    bool hit = false;
    for (size_t i = 0; i < modules.size(); ++i) {
      if (!glob_match(plan[r].first, modules[i].first)) continue;
      hit = true;
      if (rule_of[i] != plan.size())
        HP_THROW(ValueError, "shard", "module '", modules[i].first, "' matches both '",
                 plan[rule_of[i]].first, "' and '", plan[r].first, "'");
      if (modules[i].second->has_forward_wrapper())
        HP_THROW(ValueError, "shard", "module '", modules[i].first,
                 "' already has a forward wrapper (a plan applied twice?)");
      plan[r].second->check(*modules[i].second, StyleContext{mesh, a, modules[i].first});
      rule_of[i] = r;
      todo.emplace_back(i, r);
    }
    if (!hit)
      HP_THROW(ValueError, "shard", "plan pattern '", plan[r].first, "' (", plan[r].second->name(),
               ") matches no module");
  }
  ShardedParameters out;
  for (auto [i, r] : todo)
    plan[r].second->apply(*modules[i].second, StyleContext{mesh, a, modules[i].first}, out);
  return out;
}

}  // namespace hp::shard
