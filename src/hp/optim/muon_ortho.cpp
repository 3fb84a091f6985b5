#include "hp/optim/muon_ortho.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "hp/optim/kernels.h"

namespace hp::optim {

std::vector<int> muon_owners(const std::vector<int64_t>& numels, int world) {
  HP_CHECK(world >= 1);
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int> owner(numels.size());
  for (size_t k = 0; k < order.size(); ++k) owner[order[k]] = static_cast<int>(k % world);
  return owner;
}

namespace detail {
uint64_t fingerprint(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return (h ^ 0xff) * 1099511628211ull;
}
}  // namespace detail

bool split_across_ranks(const Optimizer::Entry& e) {
  if (!e.shard || e.param.dim() < 2) return false;
  const Shape& g = e.shard->global_shape;
  const size_t d = g.size();
  return std::any_of(e.shard_boxes.begin(), e.shard_boxes.end(), [&](const ShardBox& b) {
    return b.numel() > 0 && (b.sizes[d - 2] < g[d - 2] || b.sizes[d - 1] < g[d - 1]);
  });
}

namespace {

// newton_schulz on each [rows, cols] matrix of n elements at u (none when n is 0).
void orthogonalize_matrices(const float* u, float* out, int64_t n, int64_t rows, int64_t cols,
                            int steps) {
  for (int64_t off = 0; off < n; off += rows * cols)
    newton_schulz(u + off, out + off, rows, cols, steps);
}

void orthogonalize_local(const OrthoTask& t, int steps) {
  const Tensor& p = t.entry->param;
  orthogonalize_matrices(t.u, t.out, p.numel(), p.size(-2), p.size(-1), steps);
}

void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// fn(at_box, at_full, n) over the contiguous runs (last-dim rows) of box b: at_box is the run's
// element offset in the box laid out contiguously in its own shape, at_full in a contiguous
// tensor of shape `full`.
template <class Fn>
void for_each_run(const ShardBox& b, const Shape& full, Fn fn) {
  const int64_t n = b.numel();
  if (n == 0) return;
  const size_t dims = full.size();
  if (dims == 0) return fn(int64_t{0}, int64_t{0}, int64_t{1});
  const int64_t run = b.sizes.back();
  std::vector<int64_t> stride(dims, 1), idx(dims, 0);  // idx: the run's index in the box
  for (size_t d = dims - 1; d-- > 0;) stride[d] = stride[d + 1] * full[d + 1];
  for (int64_t at = 0; at < n; at += run) {
    int64_t f = 0;
    for (size_t d = 0; d < dims; ++d) f += (b.offsets[d] + idx[d]) * stride[d];
    fn(at, f, run);
    for (size_t d = dims - 1; d-- > 0;) {
      if (++idx[d] < b.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// The split parameters of one communicator. Element counts of parameter k: the volume of rank
// r's box. Gather buffers are laid out by peer rank j, and inside a peer's block by parameter
// order: this rank sends to j its box (contiguous, as held) of the parameters j owns, and receives
// from j its boxes of the parameters this rank owns, placing each at its offsets; the scatter
// mirrors that.
struct Group {
  dist::Communicator* comm = nullptr;
  std::vector<const OrthoTask*> tasks;
  std::vector<int> owner;
  std::vector<int64_t> to_peer, from_peer;  // gather: elements sent to / received from each rank
  dist::WorkPtr work;

  const Shape& global(size_t k) const { return tasks[k]->entry->shard->global_shape; }
  const ShardBox& box(size_t k, int r) const {
    return tasks[k]->entry->shard_boxes[static_cast<size_t>(r)];
  }
  int64_t count(size_t k, int r) const { return box(k, r).numel(); }
  // fn(k, pos, n) over this rank's boxes of every parameter, in peer (= owner) order.
  template <class Fn>
  void walk_mine(Fn fn) const {
    int64_t pos = 0;
    for (int j = 0; j < comm->size(); ++j)
      for (size_t k = 0; k < tasks.size(); ++k)
        if (owner[k] == j) {
          const int64_t n = count(k, comm->rank());
          fn(k, pos, n);
          pos += n;
        }
  }
  // fn(k, pos, j) over every peer j's box of the parameters owned here, in peer order.
  template <class Fn>
  void walk_owned(Fn fn) const {
    int64_t pos = 0;
    for (int j = 0; j < comm->size(); ++j)
      for (size_t k = 0; k < tasks.size(); ++k)
        if (owner[k] == comm->rank()) {
          fn(k, pos, j);
          pos += count(k, j);
        }
  }
};

std::vector<Group> split_groups(const std::vector<OrthoTask>& tasks,
                                const std::vector<dist::Communicator*>& comms) {
  std::vector<Group> groups(comms.size());
  for (size_t i = 0; i < comms.size(); ++i) groups[i].comm = comms[i];
  for (const auto& t : tasks) {
    if (!split_across_ranks(*t.entry)) continue;
    dist::Communicator* c = t.entry->shard->comm.get();
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.comm == c; });
    HP_CHECK(it != groups.end(), "split matrix ", t.entry->fqn, " on an unlisted communicator");
    it->tasks.push_back(&t);
  }
  return groups;
}

// Every rank of a group must be about to exchange the same matrices (a parameter whose gradient is
// defined on some ranks only would otherwise mismatch the all_to_all_v counts).
void check_same_matrices(std::vector<Group>& groups) {
  std::vector<dist::WorkPtr> works;
  for (auto& g : groups) {
    uint64_t h = detail::kFingerprintSeed;
    for (const auto* t : g.tasks) h = detail::fingerprint(h, t->entry->fqn);
    works.push_back(g.comm->iall_gather(from_data<int64_t>(
        {static_cast<int64_t>(g.tasks.size()), static_cast<int64_t>(h)}, {1, 2})));
  }
  for (auto& w : works) w->wait();  // all of them before any throw: no request left in flight
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Tensor all = works[gi]->result();  // [size, 2]: count, hash of the FQNs
    const int64_t* v = all.data<int64_t>();
    for (int r = 1; r < groups[gi].comm->size(); ++r)
      if (v[2 * r] != v[0] || v[2 * r + 1] != v[1])
        HP_THROW(ValueError, "optim", "muon step: rank ", r, " of the shard group steps ", v[2 * r],
                 " split matrices, rank 0 steps ", v[0],
                 (v[2 * r] == v[0] ? " (different ones)" : ""),
                 "; every rank of a shard group needs a gradient for the same sharded "
                 "parameters (first here: ",
                 groups[gi].tasks.empty() ? "none" : groups[gi].tasks[0]->entry->fqn, ")");
  }
}

// Assigns the owners and sends this rank's box of every split parameter to its owner.
void start_gather(Group& g) {
  const int w = g.comm->size(), me = g.comm->rank();
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < g.tasks.size(); ++k) sizes.push_back(shape_numel(g.global(k)));
  g.owner = muon_owners(sizes, w);
  g.to_peer.assign(static_cast<size_t>(w), 0);
  g.from_peer.assign(static_cast<size_t>(w), 0);
  for (size_t k = 0; k < g.tasks.size(); ++k)
    for (int j = 0; j < w; ++j) {
      if (g.owner[k] == j) g.to_peer[static_cast<size_t>(j)] += g.count(k, me);
      if (g.owner[k] == me) g.from_peer[static_cast<size_t>(j)] += g.count(k, j);
    }
  Tensor send = empty({std::accumulate(g.to_peer.begin(), g.to_peer.end(), int64_t{0})});
  float* s = send.data<float>();
  g.walk_mine([&](size_t k, int64_t pos, int64_t n) { copy_floats(s + pos, g.tasks[k]->u, n); });
  g.work = g.comm->iall_to_all_v(send, g.to_peer, g.from_peer);
}

// Assembles the owned parameters, orthogonalizes their matrices and sends every rank its box of
// the result.
void orthogonalize_owned(Group& g, int steps) {
  const Tensor recv = g.work->result();
  const float* r = recv.data<float>();
  // Global-shaped buffers of the parameters owned here (empty for the others).
  std::vector<std::vector<float>> full_in(g.tasks.size()), full_out(g.tasks.size());
  for (size_t k = 0; k < g.tasks.size(); ++k)
    if (g.owner[k] == g.comm->rank()) {
      const size_t n = static_cast<size_t>(shape_numel(g.global(k)));
      full_in[k].resize(n);
      full_out[k].resize(n);
    }
  g.walk_owned([&](size_t k, int64_t pos, int j) {
    for_each_run(g.box(k, j), g.global(k), [&](int64_t at_box, int64_t at_full, int64_t n) {
      copy_floats(full_in[k].data() + at_full, r + pos + at_box, n);
    });
  });
  for (size_t k = 0; k < g.tasks.size(); ++k)
    if (g.owner[k] == g.comm->rank()) {
      const Shape& shape = g.global(k);
      orthogonalize_matrices(full_in[k].data(), full_out[k].data(), shape_numel(shape),
                             shape[shape.size() - 2], shape.back(), steps);
    }
  Tensor send = empty({std::accumulate(g.from_peer.begin(), g.from_peer.end(), int64_t{0})});
  float* s = send.data<float>();
  g.walk_owned([&](size_t k, int64_t pos, int j) {
    for_each_run(g.box(k, j), g.global(k), [&](int64_t at_box, int64_t at_full, int64_t n) {
      copy_floats(s + pos + at_box, full_out[k].data() + at_full, n);
    });
  });
  g.work = g.comm->iall_to_all_v(send, g.from_peer, g.to_peer);
}

void finish_scatter(Group& g) {
  const Tensor recv = g.work->result();
  const float* r = recv.data<float>();
  g.walk_mine([&](size_t k, int64_t pos, int64_t n) { copy_floats(g.tasks[k]->out, r + pos, n); });
}

}  // namespace

void orthogonalize(const std::vector<OrthoTask>& tasks,
                   const std::vector<dist::Communicator*>& split_comms, int ns_steps) {
  std::vector<Group> groups = split_groups(tasks, split_comms);
  check_same_matrices(groups);
  // Groups with nothing to exchange (the same on every rank of them, as just checked) drop out.
  std::erase_if(groups, [](const Group& g) { return g.tasks.empty(); });
  for (auto& g : groups) start_gather(g);
  for (const auto& t : tasks)
    if (!split_across_ranks(*t.entry)) orthogonalize_local(t, ns_steps);
  for (auto& g : groups) orthogonalize_owned(g, ns_steps);
  for (auto& g : groups) finish_scatter(g);
}

}  // namespace hp::optim
