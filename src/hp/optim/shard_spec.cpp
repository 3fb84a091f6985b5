// Optimizer::attach_shards: records which parameters are boxes of larger tensors and every rank's
// box (one exchange per communicator, at construction), so a Muon step knows where each matrix's
// pieces are without communicating about it.
#include <algorithm>
#include <map>

#include "hp/optim/muon_ortho.h"
#include "hp/optim/optimizer.h"

namespace hp::optim {

ShardSpec row_shard(Shape global_shape, int64_t row_offset, dist::CommPtr comm) {
  std::vector<int64_t> offsets(global_shape.size(), 0);
  if (!offsets.empty()) offsets[0] = row_offset;
  return {std::move(global_shape), std::move(offsets), std::move(comm)};
}

namespace {

// "[lo:hi, lo:hi, ...]" of a box.
std::string box_str(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t d = 0; d < offsets.size(); ++d)
    s += (d ? ", " : "") + std::to_string(offsets[d]) + ":" +
         std::to_string(offsets[d] + (d < sizes.size() ? sizes[d] : 0));
  return s + "]";
}

// Why this rank's spec cannot describe its parameter (empty if it can).
std::string local_shard_error(const Optimizer::Entry& e) {
  const Shape& g = e.shard->global_shape;
  const Shape& l = e.param.shape();
  const std::vector<int64_t>& o = e.shard->offsets;
  if (o.size() != g.size())
    return e.fqn + ": " + std::to_string(o.size()) + " box offsets for global shape " +
           shape_str(g) + " (one per dim needed)";
  if (l.size() != g.size())
    return e.fqn + ": local shard " + e.param.desc() + " does not have the dims of global shape " +
           shape_str(g);
  for (size_t d = 0; d < g.size(); ++d)
    if (o[d] < 0 || o[d] + l[d] > g[d])
      return e.fqn + ": local shard " + e.param.desc() + " at box " + box_str(o, l) +
             " falls outside global shape " + shape_str(g);
  return {};
}

// Whether two boxes share an element.
bool overlap(const ShardBox& a, const ShardBox& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (std::max(a.offsets[d], b.offsets[d]) >=
        std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]))
      return false;
  return true;
}

// The boxes of every rank must tile the global tensor: no two share an element and together they
// hold as many elements as it (all lie inside it, as checked locally).
void check_tiling(const Optimizer::Entry& e) {
  const std::vector<ShardBox>& boxes = e.shard_boxes;
  const Shape& g = e.shard->global_shape;
  int64_t total = 0;
  for (size_t r = 0; r < boxes.size(); ++r) {
    total += boxes[r].numel();
    if (boxes[r].numel() == 0) continue;
    for (size_t s = 0; s < r; ++s)
      if (boxes[s].numel() > 0 && overlap(boxes[s], boxes[r]))
        HP_THROW(ValueError, "optim", e.fqn, ": the boxes of ranks ", s, " (",
                 box_str(boxes[s].offsets, boxes[s].sizes), ") and ", r, " (",
                 box_str(boxes[r].offsets, boxes[r].sizes), ") overlap in global shape ",
                 shape_str(g));
  }
  if (total != shape_numel(g)) {
    std::string all;
    for (size_t r = 0; r < boxes.size(); ++r)
      all += (r ? ", rank " : "rank ") + std::to_string(r) + " " +
             box_str(boxes[r].offsets, boxes[r].sizes);
    HP_THROW(ValueError, "optim", e.fqn, ": the boxes (", all, ") cover ", total, " of the ",
             shape_numel(g), " elements of global shape ", shape_str(g));
  }
}

// One communicator's sharded entries: every rank checks its specs, the ranks compare what they
// hold (same FQNs, global shapes and algorithms, in the same order), then exchange their boxes
// and check that they tile each tensor. Every rank sees the same gathered data, so all throw
// together.
void exchange_boxes(dist::Communicator& comm, std::vector<Optimizer::Entry*> group) {
  const int w = comm.size();
  const int64_t n = static_cast<int64_t>(group.size());
  std::string error;
  int64_t bad = 0;  // 1 + index of the first entry whose spec is wrong here, 0 if none
  uint64_t h = detail::kFingerprintSeed;
  for (int64_t k = 0; k < n; ++k) {
    const auto* e = group[static_cast<size_t>(k)];
    h = detail::fingerprint(h, e->fqn);
    h = detail::fingerprint(h, shape_str(e->shard->global_shape));
    h = detail::fingerprint(h, algorithm_name(e->algorithm));
    if (error.empty() && !(error = local_shard_error(*e)).empty()) bad = k + 1;
  }
  const Tensor head =
      comm.all_gather(from_data<int64_t>({n, static_cast<int64_t>(h), bad}, {1, 3}));  // [w, 3]
  const int64_t* hv = head.data<int64_t>();
  for (int r = 0; r < w; ++r) {
    const int64_t k = hv[3 * r + 2] - 1;
    if (k < 0) continue;
    if (!error.empty()) HP_THROW(ValueError, "optim", error);
    HP_THROW(ValueError, "optim", "rank ", r, " of the shard group rejected its shard spec #", k,
             (k < n ? " (" + group[static_cast<size_t>(k)]->fqn + " here)" : std::string()),
             "; its error names the box and the global shape");
  }
  for (int r = 1; r < w; ++r)
    if (hv[3 * r] != hv[0] || hv[3 * r + 1] != hv[1])
      HP_THROW(ValueError, "optim", "ranks 0 and ", r, " of a shard group disagree on its ",
               "sharded parameters (", hv[0], " vs ", hv[3 * r],
               " FQNs; names, global shapes, algorithms and order must match); rank ", comm.rank(),
               " has ", n, (n ? " starting with " + group[0]->fqn : std::string()));
  // Per entry: its offsets, then its local sizes (the same length on every rank: the global
  // shapes agree and every local shape has their dims).
  std::vector<int64_t> mine;
  for (const auto* e : group) {
    mine.insert(mine.end(), e->shard->offsets.begin(), e->shard->offsets.end());
    mine.insert(mine.end(), e->param.shape().begin(), e->param.shape().end());
  }
  const int64_t len = static_cast<int64_t>(mine.size());
  const Tensor all = comm.all_gather(from_data<int64_t>(mine, {1, len}));  // [w, len]
  const int64_t* v = all.data<int64_t>();
  int64_t at = 0;
  for (auto* e : group) {
    const int64_t dims = static_cast<int64_t>(e->shard->global_shape.size());
    for (int r = 0; r < w; ++r) {
      const int64_t* b = v + r * len + at;
      e->shard_boxes.push_back({{b, b + dims}, {b + dims, b + 2 * dims}});
    }
    at += 2 * dims;
    check_tiling(*e);
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
  for (auto& [comm, group] : groups) exchange_boxes(*comm, std::move(group));
  for (const auto& e : entries_) {
    dist::Communicator* c = e.shard ? e.shard->comm.get() : nullptr;
    if (e.algorithm == Algorithm::muon && split_across_ranks(e) &&
        std::find(muon_split_comms_.begin(), muon_split_comms_.end(), c) == muon_split_comms_.end())
      muon_split_comms_.push_back(c);
  }
}

}  // namespace hp::optim
