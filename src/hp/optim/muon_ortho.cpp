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
  if (!e.shard || e.param.dim() != 2) return false;
  return std::count_if(e.shard_rows.begin(), e.shard_rows.end(), [](int64_t r) { return r > 0; }) >
         1;
}

namespace {

void orthogonalize_local(const OrthoTask& t, int steps) {
  const Tensor& p = t.entry->param;
  const int64_t rows = p.size(-2), cols = p.size(-1), n = p.numel();
  // [..., rows, cols]: each trailing matrix on its own (none for an empty shard).
  for (int64_t off = 0; off < n; off += rows * cols)
    newton_schulz(t.u + off, t.out + off, rows, cols, steps);
}

void copy_floats(float* dst, const float* src, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// The split matrices of one communicator. Element counts of matrix k: rows_k[r]·cols_k from rank
// r. Gather buffers are laid out by peer rank j, and inside a peer's block by matrix order: this
// rank sends to j the rows of the matrices j owns, and receives from j its rows of the matrices
// this rank owns; the scatter mirrors that.
struct Group {
  dist::Communicator* comm = nullptr;
  std::vector<const OrthoTask*> tasks;
  std::vector<int> owner;
  std::vector<int64_t> to_peer, from_peer;  // gather: elements sent to / received from each rank
  dist::WorkPtr work;

  int64_t cols(size_t k) const { return tasks[k]->entry->param.size(1); }
  int64_t count(size_t k, int r) const {
    return tasks[k]->entry->shard_rows[static_cast<size_t>(r)] * cols(k);
  }
  // fn(k, pos, n) over this rank's rows of every matrix, in peer (= owner) order.
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
  // fn(k, pos, row_elem, n) over every peer's rows of the matrices owned here, in peer order;
  // row_elem is where that peer's rows start in the full matrix (shards tile dim 0 in rank order).
  template <class Fn>
  void walk_owned(Fn fn) const {
    int64_t pos = 0;
    std::vector<int64_t> row_elem(tasks.size(), 0);
    for (int j = 0; j < comm->size(); ++j)
      for (size_t k = 0; k < tasks.size(); ++k)
        if (owner[k] == comm->rank()) {
          const int64_t n = count(k, j);
          fn(k, pos, row_elem[k], n);
          pos += n;
          row_elem[k] += n;
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

// Assigns the owners and sends this rank's rows of every split matrix to its owner.
void start_gather(Group& g) {
  const int w = g.comm->size(), me = g.comm->rank();
  std::vector<int64_t> sizes;
  for (const auto* t : g.tasks)
    sizes.push_back(t->entry->shard->global_shape[0] * t->entry->param.size(1));
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

// Assembles the owned matrices, orthogonalizes them and sends every rank its rows of the result.
void orthogonalize_owned(Group& g, int steps) {
  const Tensor recv = g.work->result();
  const float* r = recv.data<float>();
  // [rows, cols] of the matrices owned here (empty for the others).
  std::vector<std::vector<float>> full_in(g.tasks.size()), full_out(g.tasks.size());
  for (size_t k = 0; k < g.tasks.size(); ++k)
    if (g.owner[k] == g.comm->rank()) {
      const size_t n = static_cast<size_t>(g.tasks[k]->entry->shard->global_shape[0] * g.cols(k));
      full_in[k].resize(n);
      full_out[k].resize(n);
    }
  g.walk_owned([&](size_t k, int64_t pos, int64_t at, int64_t n) {
    copy_floats(full_in[k].data() + at, r + pos, n);
  });
  for (size_t k = 0; k < g.tasks.size(); ++k)
    if (g.owner[k] == g.comm->rank())
      newton_schulz(full_in[k].data(), full_out[k].data(),
                    g.tasks[k]->entry->shard->global_shape[0], g.cols(k), steps);
  Tensor send = empty({std::accumulate(g.from_peer.begin(), g.from_peer.end(), int64_t{0})});
  float* s = send.data<float>();
  g.walk_owned([&](size_t k, int64_t pos, int64_t at, int64_t n) {
    copy_floats(s + pos, full_out[k].data() + at, n);
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
