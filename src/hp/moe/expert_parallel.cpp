// Routed experts, locally or expert-parallel (expert_parallel.h).
#include "hp/moe/expert_parallel.h"

#include <algorithm>
#include <numeric>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/ops/ops.h"
#include "hp/parallel/all_to_all.h"

namespace hp::moe {

using parallel::all_to_all_v;

ExpertRange local_experts(int64_t num_experts, int64_t ep, int64_t rank) {
  if (ep < 1 || rank < 0 || rank >= ep)
    HP_THROW(ValueError, "shard", "expert-parallel rank ", rank, " of ", ep, " is out of range");
  if (num_experts < ep)
    HP_THROW(ValueError, "shard", "expert parallelism over ep = ", ep, " ranks needs at least as ",
             "many experts, got ", num_experts);
  const int64_t chunk = (num_experts + ep - 1) / ep;
  const int64_t first = std::min(num_experts, rank * chunk);
  return {first, std::min(num_experts, first + chunk) - first};
}

std::vector<int64_t> experts_per_rank(int64_t num_experts, int64_t ep) {
  std::vector<int64_t> v(static_cast<size_t>(std::max<int64_t>(ep, 0)));
  for (int64_t r = 0; r < ep; ++r)
    v[static_cast<size_t>(r)] = local_experts(num_experts, ep, r).count;
  return v;
}

ExchangeCounts exchange_counts(const std::vector<int64_t>& count, int64_t num_experts,
                               const dist::CommPtr& ep) {
  const int64_t n = ep->size(), per_rank = local_experts(num_experts, n, ep->rank()).count;
  // Owner of expert e: e / chunk (the torch.chunk rule, so the last ranks may own fewer).
  const int64_t chunk = (num_experts + n - 1) / n;
  // Counts of every expert to their owners: block s of what arrives holds source s's counts for
  // this rank's experts.
  const std::vector<int64_t> mine(static_cast<size_t>(n), per_rank);
  const std::vector<double> got = ep->all_to_all_v(from_data<int64_t>(count, {num_experts}),
                                                   experts_per_rank(num_experts, n), mine)
                                      .to_vector();
  ExchangeCounts c;
  c.recv_by_expert.assign(got.begin(), got.end());
  c.send.assign(static_cast<size_t>(n), 0);
  c.recv.assign(static_cast<size_t>(n), 0);
  for (int64_t e = 0; e < num_experts; ++e)
    c.send[static_cast<size_t>(e / chunk)] += count[static_cast<size_t>(e)];
  for (size_t b = 0; b < c.recv_by_expert.size(); ++b)
    c.recv[b / static_cast<size_t>(std::max<int64_t>(per_rank, 1))] += c.recv_by_expert[b];
  return c;
}

namespace {

Tensor index_tensor(const std::vector<int64_t>& v) {
  return from_data<int64_t>(v, {static_cast<int64_t>(v.size())});
}

// The owner's side of EP: rows [R, hidden] received from every rank (source s's block holds
// counts[s·E_local + e] rows of local expert e, in expert order) → run grouped by expert (stable
// by source) → the outputs in the received order.
Tensor run_received(const Tensor& received, const std::vector<int64_t>& counts, int64_t n,
                    int64_t local_count, const LocalExperts& local) {
  // Offset of each (source, expert) block in the received rows.
  std::vector<int64_t> offset(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), offset.begin(), int64_t{0});
  std::vector<int64_t> order, per_expert(static_cast<size_t>(local_count), 0);
  for (int64_t e = 0; e < local_count; ++e)
    for (int64_t s = 0; s < n; ++s) {
      const size_t b = static_cast<size_t>(s * local_count + e);
      for (int64_t i = 0; i < counts[b]; ++i) order.push_back(offset[b] + i);
      per_expert[static_cast<size_t>(e)] += counts[b];
    }
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = int64_t(i);
  const Tensor y = local(index_select(received, 0, index_tensor(order)), per_expert);
  return index_select(y, 0, index_tensor(inverse));
}

}  // namespace

Tensor routed_experts(const Tensor& x, const Tensor& weights, const Tensor& indices,
                      int64_t num_experts, const LocalExperts& local, const dist::CommPtr& ep,
                      const ExpertExchange& exchange) {
  if (x.dim() != 2 || indices.dim() != 2 || weights.shape() != indices.shape() ||
      indices.size(0) != x.size(0))
    HP_THROW(ValueError, "shard",
             "routed experts need x [N, hidden], weights = indices [N, k]; got x ", x.desc(),
             ", weights ", weights.desc(), ", indices ", indices.desc());
  const int64_t tokens = x.size(0), k = indices.size(1), rows = tokens * k;
  // Stable counting sort of the assignments a = n·k + j by expert.
  const std::vector<double> ids = contiguous(indices).to_vector();
  std::vector<int64_t> count(static_cast<size_t>(num_experts), 0);
  for (double id : ids) {
    if (id < 0 || id >= double(num_experts))
      HP_THROW(ValueError, "shard", "expert id ", id, " is outside [0, ", num_experts, ")");
    ++count[static_cast<size_t>(id)];
  }
  std::vector<int64_t> next(count.size());
  std::exclusive_scan(count.begin(), count.end(), next.begin(), int64_t{0});
  std::vector<int64_t> slot(static_cast<size_t>(rows)), token(static_cast<size_t>(rows));
  for (int64_t a = 0; a < rows; ++a) {
    const int64_t row = next[static_cast<size_t>(ids[static_cast<size_t>(a)])]++;
    slot[static_cast<size_t>(row)] = a;
    token[static_cast<size_t>(row)] = a / k;
  }
  const Tensor token_idx = index_tensor(token);
  const Tensor xs = index_select(x, 0, token_idx);  // [A, hidden], sorted by expert
  Tensor y;
  if (!ep || ep->size() == 1) {
    y = local(xs, count);
  } else if (exchange) {
    y = exchange(xs, count);
  } else {
    const int64_t n = ep->size(), per_rank = local_experts(num_experts, n, ep->rank()).count;
    const ExchangeCounts c = exchange_counts(count, num_experts, ep);
    const Tensor received = all_to_all_v(xs, c.send, c.recv, ep);
    y = all_to_all_v(run_received(received, c.recv_by_expert, n, per_rank, local), c.recv, c.send,
                     ep);
  }
  const Tensor c = index_select(reshape(weights, {rows}), 0, index_tensor(slot));  // [A]
  y = y * unsqueeze(cast(c, y.dtype()), 1);
  return index_add(zeros({tokens, x.size(1)}, y.dtype()), 0, token_idx, y);
}

}  // namespace hp::moe
