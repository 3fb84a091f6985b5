// Routed experts as one pipeline — sort, (exchange), grouped GEMMs, (exchange back), combine —
// locally or with expert parallelism (EP).
//
// Each (token n, slot j) assignment of the router's top-k becomes one row: rows are sorted by
// expert (stable: an expert's rows keep token order), the experts run over their row groups, and
// the combine adds weights[n, j] · row into token n (index_add), so the routed output is
// out[n] = Σ_j weights[n, j] · expert_{indices[n, j]}(x[n]).
//
// With EP over a communicator of `ep` ranks, rank s owns the experts of chunk s by the torch.chunk
// rule (c = ceil(E/ep) experts each, the last ranks fewer: 8 over 3 ranks hold 3, 3, 2). The sorted
// rows are then grouped by owner already; the per-expert row counts are exchanged first (one
// all-to-all of E integers), the rows go to their owners with one all_to_all_v (dropless: every
// assignment is sent, no capacity factor), the owner regroups what it received by its local
// expert (stable by source rank) and runs its experts once over all of it, and the outputs come
// back by the inverse all_to_all_v to be combined at home. Backward is the same exchanges in
// reverse (the all_to_all_v is differentiable: its adjoint swaps the counts).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hp/dist/communicator.h"

namespace hp::moe {

// This rank's experts [first, first + count) of `num_experts` over `ep` ranks (the torch.chunk
// rule; count may be 0). Throws ValueError naming both numbers when there are fewer experts than
// ranks.
struct ExpertRange {
  int64_t first = 0;
  int64_t count = 0;
};
ExpertRange local_experts(int64_t num_experts, int64_t ep, int64_t rank);
// [ep] local_experts(num_experts, ep, r).count for every rank r: the split of the count exchange.
std::vector<int64_t> experts_per_rank(int64_t num_experts, int64_t ep);

// Runs this rank's experts over rows sorted by local expert: x_sorted [R, hidden] with counts[e]
// rows for local expert e (Σ counts = R) → [R, hidden].
using LocalExperts =
    std::function<Tensor(const Tensor& x_sorted, const std::vector<int64_t>& counts)>;

// The middle of the EP pipeline: xs [A, hidden] sorted by expert with count[e] rows of global
// expert e (Σ count = A) → the experts' outputs [A, hidden] in the same order, however the rows
// travel (the sequential exchange below, or MegaMoE, moe/megamoe.h).
using ExpertExchange = std::function<Tensor(const Tensor& xs, const std::vector<int64_t>& count)>;

// x [N, hidden], weights [N, k] (any float dtype; cast to the experts' output dtype), indices
// [N, k] integer expert ids in [0, num_experts) → the routed output [N, hidden] (differentiable
// through x, weights and whatever `local` computes). `ep` null or of size 1: every expert is local.
// Collective over `ep` otherwise: the sequential exchange (counts, all_to_all_v, the local experts
// over everything received, all_to_all_v back), or `exchange` when given.
Tensor routed_experts(const Tensor& x, const Tensor& weights, const Tensor& indices,
                      int64_t num_experts, const LocalExperts& local, const dist::CommPtr& ep,
                      const ExpertExchange& exchange = nullptr);

// The row counts of one exchange over `ep` (n ranks) for count [E] rows per global expert sorted
// by expert: one all_to_all_v of the counts to the experts' owners (collective).
struct ExchangeCounts {
  std::vector<int64_t> send, recv;  // [n] rows to / from each rank
  // [n · E_local] rows this rank receives: source s's rows of local expert e at s · E_local + e.
  std::vector<int64_t> recv_by_expert;
};
ExchangeCounts exchange_counts(const std::vector<int64_t>& count, int64_t num_experts,
                               const dist::CommPtr& ep);

}  // namespace hp::moe
