// Optimizer::attach_shards: records which parameters are dim-0 shards and every rank's row count
// (one exchange per communicator, at construction), so a Muon step knows where each matrix's rows
// are without communicating about it.
#include <algorithm>
#include <map>

#include "hp/optim/muon_ortho.h"
#include "hp/optim/optimizer.h"

namespace hp::optim {

namespace {

// Why this rank's spec cannot describe its parameter (empty if it can).
std::string local_shard_error(const Optimizer::Entry& e) {
  const Shape& g = e.shard->global_shape;
  const Shape& l = e.param.shape();
  if (l.empty() || g.size() != l.size() || !std::equal(l.begin() + 1, l.end(), g.begin() + 1))
    return e.fqn + ": local shard " + e.param.desc() + " is not a dim-0 shard of global shape " +
           shape_str(g);
  if (e.shard->row_offset < 0 || e.shard->row_offset + l[0] > g[0])
    return e.fqn + ": local rows [" + std::to_string(e.shard->row_offset) + ", " +
           std::to_string(e.shard->row_offset + l[0]) + ") fall outside dim 0 of global shape " +
           shape_str(g);
  return {};
}

// One communicator's sharded entries: every rank checks its specs, the ranks compare what they
// hold (same FQNs, global shapes and algorithms, in the same order), then exchange row ranges
// and check that they tile dim 0. Every rank sees the same gathered data, so all throw together.
void exchange_rows(dist::Communicator& comm, std::vector<Optimizer::Entry*> group) {
  const int w = comm.size();
  const int64_t n = static_cast<int64_t>(group.size());
  std::string error;
  uint64_t h = detail::kFingerprintSeed;
  for (const auto* e : group) {
    h = detail::fingerprint(h, e->fqn);
    h = detail::fingerprint(h, shape_str(e->shard->global_shape));
    h = detail::fingerprint(h, algorithm_name(e->algorithm));
    if (error.empty()) error = local_shard_error(*e);
  }
  const Tensor head = comm.all_gather(
      from_data<int64_t>({n, static_cast<int64_t>(h), error.empty() ? 0 : 1}, {1, 3}));  // [w, 3]
  const int64_t* hv = head.data<int64_t>();
  for (int r = 0; r < w; ++r) {
    if (hv[3 * r + 2] == 0) continue;
    if (!error.empty()) HP_THROW(ValueError, "optim", error);
    HP_THROW(ValueError, "optim", "rank ", r,
             " of the shard group rejected its shard specs (its error names the parameter)");
  }
  for (int r = 1; r < w; ++r)
    if (hv[3 * r] != hv[0] || hv[3 * r + 1] != hv[1])
      HP_THROW(ValueError, "optim", "ranks 0 and ", r, " of a shard group disagree on its ",
               "sharded parameters (", hv[0], " vs ", hv[3 * r],
               " FQNs; names, global shapes, algorithms and order must match); rank ", comm.rank(),
               " has ", n, (n ? " starting with " + group[0]->fqn : std::string()));
  std::vector<int64_t> mine;  // [n, 2]: row offset, local rows
  for (const auto* e : group) {
    mine.push_back(e->shard->row_offset);
    mine.push_back(e->param.size(0));
  }
  const Tensor all = comm.all_gather(from_data<int64_t>(mine, {1, 2 * n}));  // [w, 2n]
  const int64_t* v = all.data<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    Optimizer::Entry& e = *group[static_cast<size_t>(k)];
    int64_t next = 0;
    std::string ranges;
    for (int r = 0; r < w; ++r) {
      const int64_t off = v[r * 2 * n + 2 * k], rows = v[r * 2 * n + 2 * k + 1];
      ranges += (r ? ", " : "") + std::to_string(off) + "+" + std::to_string(rows);
      if (off != next) next = -1;
      if (next >= 0) next += rows;
      e.shard_rows.push_back(rows);
    }
    if (next != e.shard->global_shape[0])
      HP_THROW(ValueError, "optim", e.fqn, ": shards (offset+rows per rank: ", ranges,
               ") do not tile dim 0 of global shape ", shape_str(e.shard->global_shape),
               " in rank order");
  }
}

}  // namespace

void Optimizer::attach_shards(std::map<std::string, ShardSpec> shards) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < entries_.size(); ++i) index[entries_[i].fqn] = i;
  for (auto& [fqn, spec] : shards) {
    auto it = index.find(fqn);
    if (it == index.end())
      HP_THROW(ValueError, "optim", "shard spec for unknown parameter '", fqn, "'");
    if (!spec.comm) HP_THROW(ValueError, "optim", fqn, ": shard spec without a communicator");
    entries_[it->second].shard = std::move(spec);
  }
  // One exchange per communicator, in order of first use (the parameter order, same everywhere).
  std::vector<std::pair<dist::Communicator*, std::vector<Entry*>>> groups;
  for (auto& e : entries_) {
    if (!e.shard) continue;
    dist::Communicator* c = e.shard->comm.get();
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == c; });
    if (it == groups.end()) it = groups.insert(groups.end(), {c, {}});
    it->second.push_back(&e);
  }
  for (auto& [comm, group] : groups) exchange_rows(*comm, std::move(group));
  for (const auto& e : entries_) {
    dist::Communicator* c = e.shard ? e.shard->comm.get() : nullptr;
    if (e.algorithm == Algorithm::muon && split_across_ranks(e) &&
        std::find(muon_split_comms_.begin(), muon_split_comms_.end(), c) == muon_split_comms_.end())
      muon_split_comms_.push_back(c);
  }
}

}  // namespace hp::optim
