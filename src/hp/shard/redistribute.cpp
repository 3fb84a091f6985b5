// Redistribution of a local tensor between layouts, one mesh axis at a time (docs/ARCHITECTURE.md
// §4). Collectives run on dim 0, so a sharded dim d is swapped to the front and back again.
#include "hp/autograd/grad_mode.h"
#include "hp/ops/ops.h"
#include "hp/shard/dtensor.h"

namespace hp::shard::detail {
namespace {

using dist::Communicator;

Tensor move_front(const Tensor& t, int64_t d) {
  return (d == 0 ? t : transpose(t, 0, d)).contiguous();
}
Tensor move_back(const Tensor& t, int64_t d) {
  return move_front(t, d);
}

// t [r, ...] zero-padded to [rows, ...].
Tensor pad_rows(const Tensor& t, int64_t rows) {
  if (t.size(0) == rows) return t;
  Shape s = t.shape();
  s[0] = rows;
  Tensor out = zeros(s, t.dtype());
  narrow(out, 0, 0, t.size(0)).copy_from(t);
  return out;
}

// Shard(d) → Replicate: all-gather every shard padded to chunk rows ([W·chunk, ...]), keep n.
Tensor shard_to_replicate(const Tensor& x, int64_t d, int64_t n, Communicator& c) {
  int64_t chunk = chunk_size(n, c.size());
  Tensor g = c.all_gather(pad_rows(move_front(x, d), chunk));
  return move_back(narrow(g, 0, 0, n), d);
}

// Partial(op) → Shard(d): reduce-scatter of the zero-padded [W·chunk, ...] tensor, trimmed.
Tensor partial_to_shard(const Tensor& x, int64_t d, int64_t n, dist::ReduceOp op, Communicator& c) {
  int64_t chunk = chunk_size(n, c.size());
  Tensor rs = c.reduce_scatter(pad_rows(move_front(x, d), chunk * c.size()), op);
  return move_back(narrow(rs, 0, 0, chunk_range(n, c.size(), c.rank()).length), d);
}

Tensor replicate_to_shard(const Tensor& x, int64_t d, int64_t n, Communicator& c) {
  ChunkRange r = chunk_range(n, c.size(), c.rank());
  return narrow(x, d, r.start, r.length).contiguous();
}

// Replicate → Partial(op): a sum keeps the value on rank 0 only; avg, max, min keep it everywhere.
Tensor replicate_to_partial(const Tensor& x, dist::ReduceOp op, Communicator& c) {
  if (op == dist::ReduceOp::sum && c.rank() != 0) return zeros(x.shape(), x.dtype());
  return x.clone();
}

// Shard(i) → Shard(j) by one all-to-all: dim j is cut into W padded chunks (chunk k to rank k);
// rank s's block arrives with its dim-i shard padded to chunk_i and is trimmed, then the blocks
// are concatenated along dim i.
Tensor shard_to_shard(const Tensor& x, int64_t i, int64_t j, int64_t ni, int64_t nj,
                      Communicator& c) {
  const int64_t w = c.size(), ci = chunk_size(ni, w), cj = chunk_size(nj, w);
  Tensor padded = move_back(pad_rows(move_front(x, i), ci), i);
  Tensor out = c.all_to_all(pad_rows(move_front(padded, j), cj * w));  // [W·cj, ...]
  const int64_t i_t = i == 0 ? j : i;  // where dim i sits after swapping dims 0 and j
  std::vector<Tensor> blocks;
  for (int64_t s = 0; s < w; ++s)
    blocks.push_back(narrow(narrow(out, 0, s * cj, cj), i_t, 0, chunk_range(ni, w, s).length));
  Tensor joined = cat(blocks, i_t);
  return move_back(narrow(joined, 0, 0, chunk_range(nj, w, c.rank()).length), j);
}

bool dim_sharded_elsewhere(const Placements& p, int64_t dim, size_t axis) {
  for (size_t k = 0; k < p.size(); ++k)
    if (k != axis && is_shard(p[k]) && std::get<Shard>(p[k]).dim == dim) return true;
  return false;
}

}  // namespace

Tensor redistribute_local(const Tensor& local, const Shape& global, const DeviceMesh& mesh,
                          const Placements& src, const Placements& dst) {
  autograd::NoGradGuard no_grad;
  Tensor x = local;
  Placements cur = src;
  // Pass 1 unshards (all-gather) or moves shards (all-to-all); pass 2 then reduces partials and
  // slices, so no intermediate layout shards one dim on two axes.
  for (size_t a = 0; a < cur.size(); ++a) {
    if (cur[a] == dst[a] || !is_shard(cur[a])) continue;
    Communicator& c = *mesh.axis_comm(static_cast<int64_t>(a));
    int64_t d = std::get<Shard>(cur[a]).dim;
    if (is_shard(dst[a]) && !dim_sharded_elsewhere(cur, std::get<Shard>(dst[a]).dim, a)) {
      int64_t e = std::get<Shard>(dst[a]).dim;
      x = shard_to_shard(x, d, e, global[static_cast<size_t>(d)], global[static_cast<size_t>(e)],
                         c);
      cur[a] = dst[a];
    } else {
      x = shard_to_replicate(x, d, global[static_cast<size_t>(d)], c);
      cur[a] = Replicate{};
    }
  }
  for (size_t a = 0; a < cur.size(); ++a) {
    if (cur[a] == dst[a]) continue;
    Communicator& c = *mesh.axis_comm(static_cast<int64_t>(a));
    if (is_partial(cur[a])) {
      dist::ReduceOp op = std::get<Partial>(cur[a]).op;
      if (is_shard(dst[a])) {
        int64_t d = std::get<Shard>(dst[a]).dim;
        x = partial_to_shard(x, d, global[static_cast<size_t>(d)], op, c);
        cur[a] = dst[a];
        continue;
      }
      x = c.all_reduce(x, op);
      cur[a] = Replicate{};
      if (cur[a] == dst[a]) continue;
    }
    HP_CHECK(is_replicate(cur[a]), placement_str(cur[a]));
    if (is_shard(dst[a])) {
      int64_t d = std::get<Shard>(dst[a]).dim;
      x = replicate_to_shard(x, d, global[static_cast<size_t>(d)], c);
    } else {
      x = replicate_to_partial(x, std::get<Partial>(dst[a]).op, c);
    }
    cur[a] = dst[a];
  }
  return x;
}

}  // namespace hp::shard::detail
