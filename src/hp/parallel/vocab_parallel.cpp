#include "hp/parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <typeinfo>
#include <utility>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/kernels/cpu/softmax.h"
#include "hp/ops/ops.h"

namespace hp::parallel {

// The style is a shard::ParallelStyle over shard's layout algebra.
using namespace shard;

namespace {

// Element i of a contiguous i32 / i64 index tensor.
int64_t load_id(const Tensor& t, int64_t i) {
  return t.dtype() == DType::i64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

bool is_index_dtype(const Tensor& t) {
  return t.dtype() == DType::i64 || t.dtype() == DType::i32;
}

}  // namespace

// ---------- VocabParallelEmbedding ----------

void VocabParallelEmbedding::check(nn::Module& m, const StyleContext& ctx) const {
  if (is_partial(output_layout_))
    HP_THROW(ValueError, "shard", name(), " on '", ctx.fqn,
             "': output layout must be Replicate or Shard(seq_dim), got Partial");
  if (typeid(m) != typeid(nn::Embedding))
    HP_THROW(ValueError, "shard", name(), " applies to nn::Embedding modules; '", ctx.fqn, "' is ",
             typeid(m).name(), " (a subclass may override the forward the style wraps)");
}

void VocabParallelEmbedding::apply(nn::Module& m, const StyleContext& ctx,
                                   ShardedParameters& out) const {
  check(m, ctx);
  auto& emb = static_cast<nn::Embedding&>(m);
  const DeviceMesh& mesh = *ctx.mesh;
  const int64_t degree = mesh.size(ctx.axis);
  const Shape global = emb.weight.shape();  // [vocab, hidden]
  const int64_t vocab = global[0], hidden = global[1];
  const ChunkRange rows = chunk_range(vocab, degree, mesh.coordinate(ctx.axis));
  // A new leaf [V_r, hidden]: the shard must not keep the full table alive through a view.
  emb.weight =
      emb.set_parameter("weight", narrow(emb.weight.detach(), 0, rows.start, rows.length).clone());
  Placements placements(static_cast<size_t>(mesh.ndim()), Replicate{});
  placements[static_cast<size_t>(ctx.axis)] = Shard{0};
  out.add(ctx.fqn.empty() ? "weight" : ctx.fqn + ".weight",
          DTensor::from_local(emb.weight, ctx.mesh, placements, global));
  // The reduction runs over this axis's communicator only (the region operators of plan.h).
  const dist::CommPtr comm = mesh.axis_comm(ctx.axis);
  nn::Embedding* self = &emb;  // the wrapper lives in emb, so the pointer outlives it
  const Placement layout = output_layout_;
  const std::string fqn = ctx.fqn;
  emb.set_forward_wrapper([self, comm, rows, vocab, hidden, degree, layout, fqn](
                              const Tensor& ids, const nn::Module::ForwardFn& inner) {
    if (!ids.defined() || !is_index_dtype(ids))
      HP_THROW(ValueError, "shard", "VocabParallelEmbedding '", fqn,
               "': ids must be i32 or i64, got ", ids.defined() ? ids.desc() : "undefined");
    Shape out_shape = ids.shape();  // [B, T, hidden]
    out_shape.push_back(hidden);
    const auto out_dim = static_cast<int64_t>(out_shape.size());
    Placement dst = layout;
    if (is_shard(layout)) {
      const int64_t d = std::get<Shard>(layout).dim, w = d < 0 ? d + out_dim : d;
      if (w < 0 || w >= out_dim - 1)
        HP_THROW(ValueError, "shard", "VocabParallelEmbedding '", fqn, "': output layout Shard(", d,
                 ") names no token dim of the ", shape_str(out_shape), " output");
      dst = Shard{w};
    }
    // Local ids: ids - offset clamped into this rank's rows [V_r]; mask [B, T, 1] is 1 where the
    // id is this rank's. Ids are the same on every rank, so a bad one throws everywhere alike.
    const Tensor g = ids.contiguous();
    const int64_t n = g.numel();
    Tensor local_ids = empty(ids.shape(), DType::i64);
    std::vector<float> mask(static_cast<size_t>(n));
    bool foreign = false;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = load_id(g, i);
      if (id < 0 || id >= vocab)
        HP_THROW(ValueError, "shard", "VocabParallelEmbedding '", fqn, "': id ", id,
                 " at flat index ", i, " of ids ", ids.desc(), " is out of range [0, ", vocab, ")");
      const int64_t l = id - rows.start;
      const bool mine = l >= 0 && l < rows.length;
      foreign |= !mine;
      mask[static_cast<size_t>(i)] = mine ? 1.0f : 0.0f;
      local_ids.data<int64_t>()[i] =
          std::clamp<int64_t>(l, 0, std::max<int64_t>(rows.length - 1, 0));
    }
    Tensor y;  // Partial(sum) over the axis: [B, T, hidden]
    if (rows.length == 0) {
      // Nothing to look up; the empty weight still enters the graph (sum of nothing = 0), so its
      // gradient is defined — [0, hidden] — like every other rank's.
      y = zeros(out_shape, self->weight.dtype());
      if (autograd::needs_grad({self->weight})) y = add(y, sum(self->weight));
    } else {
      y = inner(local_ids);
      if (foreign) {
        Shape ms = ids.shape();
        ms.push_back(1);
        Tensor mt = from_data<float>(mask, ms);
        y = mul(y, mt.dtype() == y.dtype() ? mt : mt.to(y.dtype()));
      }
    }
    if (degree == 1) return y;
    // Partial → Replicate: all-reduce (backward identity); Partial → Shard(d): reduce-scatter
    // (backward all-gather).
    return is_shard(dst) ? reduce_scatter_to_region(y, std::get<Shard>(dst).dim, comm)
                         : reduce_from_region(y, comm);
  });
}

// ---------- vocab_parallel_cross_entropy ----------

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_offset, const dist::CommPtr& comm,
                                    int64_t ignore_index, const std::string& reduction) {
  if (!comm) HP_THROW(ValueError, "shard", "vocab_parallel_cross_entropy: null communicator");
  const int world = comm->size();

  // Local problems become a flag of the check all-gather, so every rank throws, not only the one
  // that sees them (the others would hang in the reductions).
  std::string err;
  if (reduction != "mean" && reduction != "sum")
    err = hp::detail::cat("reduction '", reduction, "' is not one of mean, sum");
  else if (!logits.defined() || logits.dtype() != DType::f32 || logits.dim() != 2)
    err = hp::detail::cat("logits must be [N, V_local] f32, got ",
                          logits.defined() ? logits.desc() : "undefined");
  else if (!targets.defined() || !is_index_dtype(targets) || targets.dim() != 1 ||
           targets.size(0) != logits.size(0))
    err = hp::detail::cat("targets must be [", logits.size(0), "] i32 or i64 (the logits ",
                          logits.desc(), " rows), got ",
                          targets.defined() ? targets.desc() : "undefined");
  else if (vocab_offset < 0)
    err = hp::detail::cat("vocab_offset ", vocab_offset, " is negative");
  const bool ok = err.empty();
  const int64_t n = ok ? logits.size(0) : 0, v_local = ok ? logits.size(1) : 0;

  // This rank's view: rows, slice, non-ignored target range and a hash of the targets (which must
  // agree across ranks: each rank's share of the loss is taken against the same ones).
  std::vector<int64_t> tv(static_cast<size_t>(n));
  int64_t tmin = std::numeric_limits<int64_t>::max(), tmax = std::numeric_limits<int64_t>::min();
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the target values
  if (ok) {
    const Tensor t = targets.contiguous();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = load_id(t, i);
      tv[static_cast<size_t>(i)] = x;
      hash = (hash ^ static_cast<uint64_t>(x)) * 1099511628211ull;
      if (x == ignore_index) continue;
      tmin = std::min(tmin, x);
      tmax = std::max(tmax, x);
    }
  }
  constexpr int64_t kFields = 7;
  const std::vector<int64_t> mine{
      ok ? 0 : 1, n, v_local, vocab_offset, tmin, tmax, static_cast<int64_t>(hash)};
  const Tensor gathered = world == 1 ? from_data<int64_t>(mine, {1, kFields})
                                     : comm->all_gather(from_data<int64_t>(mine, {1, kFields}));
  auto field = [&](int r, int64_t f) { return gathered.data<int64_t>()[r * kFields + f]; };

  // The same checks on every rank from the same gathered rows, so all throw the same error.
  if (!ok) HP_THROW(ValueError, "shard", "vocab_parallel_cross_entropy: ", err);
  for (int r = 0; r < world; ++r)
    if (field(r, 0))
      HP_THROW(ValueError, "shard", "vocab_parallel_cross_entropy: rank ", r,
               " was called with invalid arguments (its error names them)");
  for (int r = 1; r < world; ++r) {
    if (field(r, 1) != field(0, 1))
      HP_THROW(ValueError, "shard",
               "vocab_parallel_cross_entropy: logits rows differ across ranks (", field(0, 1),
               " on rank 0, ", field(r, 1), " on rank ", r, ")");
    if (field(r, 6) != field(0, 6))
      HP_THROW(ValueError, "shard", "vocab_parallel_cross_entropy: targets differ between rank 0 ",
               "and rank ", r, " (they must be the same on every rank)");
  }
  // The non-empty slices [offset, offset + V_local), in offset order, must tile [0, V).
  std::vector<std::pair<int64_t, int>> slices;
  for (int r = 0; r < world; ++r)
    if (field(r, 2) > 0) slices.emplace_back(field(r, 3), r);
  std::sort(slices.begin(), slices.end());
  int64_t vocab = 0;
  for (const auto& [off, r] : slices) {
    if (off != vocab)
      HP_THROW(ValueError, "shard",
               "vocab_parallel_cross_entropy: vocabulary slices do not tile [0, ", "V): rank ", r,
               " holds [", off, ", ", off + field(r, 2), ") but the next id is ", vocab);
    vocab += field(r, 2);
  }
  for (int r = 0; r < world; ++r)
    if (field(r, 4) < 0 || field(r, 5) >= vocab) {
      const int64_t bad = field(r, 4) < 0 ? field(r, 4) : field(r, 5);
      int64_t row = -1;
      for (int64_t i = 0; i < n && row < 0; ++i)
        if (tv[static_cast<size_t>(i)] == bad) row = i;
      HP_THROW(ValueError, "shard", "vocab_parallel_cross_entropy: target ", bad, " at row ", row,
               " is out of range [0, ", vocab, ") (global vocabulary over ", world,
               " ranks; ignore_index ", ignore_index, ")");
    }

  // Local targets for the row kernels: column in this slice, kForeign (held elsewhere: no onehot
  // here) or kIgnored (a zero gradient row).
  constexpr int64_t kIgnored = -1, kForeign = -2;
  auto local_t = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(n));
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = tv[static_cast<size_t>(i)], l = x - vocab_offset;
    count += x != ignore_index;
    (*local_t)[static_cast<size_t>(i)] =
        x == ignore_index ? kIgnored : (l >= 0 && l < v_local ? l : kForeign);
  }

  const Tensor x = logits.contiguous();  // [N, V_local]
  Tensor lse = empty({n}, DType::f32);   // global logsumexp per row
  double total = 0;
  if (n > 0) {
    // This slice's logsumexp [N] (-inf for an empty slice); the global max of those keeps every
    // exp(lse_r - max) ≤ 1.
    Tensor lse_local = v_local > 0 ? kernels::logsumexp_lastdim(x)
                                   : full({n}, -std::numeric_limits<double>::infinity());
    Tensor mx = world == 1 ? lse_local : comm->all_reduce(lse_local, dist::ReduceOp::max);
    // [2, N] f64: exp(lse_r - max) (summed → S) and the target logit (one rank's, others 0).
    Tensor st = empty({2, n}, DType::f64);
    double* sp = st.data<double>();
    const float* lp = lse_local.data<float>();
    const float* mp = mx.data<float>();
    const float* xp = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      sp[i] = std::exp(static_cast<double>(lp[i]) - static_cast<double>(mp[i]));
      const int64_t l = (*local_t)[static_cast<size_t>(i)];
      sp[n + i] = l >= 0 ? static_cast<double>(xp[i * v_local + l]) : 0.0;
    }
    if (world > 1) st = comm->all_reduce(st, dist::ReduceOp::sum);
    sp = st.data<double>();
    float* out = lse.data<float>();
    // As hp::cross_entropy: row loss lse - x[target] in f32, summed in row order in f64 (the same
    // loss for any thread count; bitwise its loss over one rank, where S = 1).
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(static_cast<double>(mp[i]) + std::log(sp[i]));
      if (tv[static_cast<size_t>(i)] != ignore_index)
        total += out[i] - static_cast<float>(sp[n + i]);
    }
  }
  const bool mean = reduction == "mean";
  if (mean) total = count > 0 ? total / static_cast<double>(count) : 0.0;
  Tensor y = full({}, total, DType::f32);

  if (autograd::needs_grad({logits})) {
    autograd::SavedTensor sx(x), sl(lse);
    const Shape shape = x.shape();
    autograd::record(
        "vocab_parallel_cross_entropy", {logits}, {y}, [=](const std::vector<Tensor>& g) {
          double s = g[0].item();
          if (mean) s = count > 0 ? s / static_cast<double>(count) : 0.0;
          if (n == 0 || v_local == 0) return std::vector<Tensor>{zeros(shape)};
          return std::vector<Tensor>{
              kernels::cross_entropy_backward(sx.unpack(), sl.unpack(), *local_t, kIgnored,
                                              std::vector<double>(static_cast<size_t>(n), s))};
        });
  }
  return y;
}

}  // namespace hp::parallel
