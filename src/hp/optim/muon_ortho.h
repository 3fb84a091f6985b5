// Muon's orthogonalization step over a set of parameters, some of them boxes of larger tensors
// (docs/ARCHITECTURE.md §4: never orthogonalize a partial matrix).
//
// A parameter whose matrices are split across the ranks of its shard group is gathered box by box
// to an owner rank, Newton–Schulz runs there on every full matrix (the same newton_schulz call on
// the same data as an unsharded step, hence bitwise the same result), and every rank gets its box
// back. Per communicator a step costs one small all_gather (the ranks check they hold the same
// split parameters) and two all_to_all_v (every rank's boxes to the owners, the owners' results
// back); parameters whose matrices one rank holds whole (unsharded ones, stacked experts split on
// the stack dims) are orthogonalized locally while the gather is in flight.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "hp/optim/optimizer.h"

namespace hp::optim {

// Owner rank of each split parameter, given their element counts: sorted by size, largest first
// (ties: lower index first), the k-th of them goes to rank k % world. Deterministic, so every rank
// computes the same assignment.
std::vector<int> muon_owners(const std::vector<int64_t>& numels, int world);

// One Muon parameter's Newton–Schulz input and output on this rank, both with the parameter's
// local shape ([..., rows, cols]; a sharded parameter's box).
struct OrthoTask {
  const Optimizer::Entry* entry;  // local shape, shard spec and every rank's box
  const float* u;
  float* out;
};

// Whether e is sharded with some non-empty box not spanning its last two dims, i.e. its matrices
// are split across ranks (then Muon gathers it); every other parameter holds whole matrices where
// it is.
bool split_across_ranks(const Optimizer::Entry& e);

// out = newton_schulz(u) for every [rows, cols] matrix of every task. Collective over
// `split_comms`, the communicators of every split Muon parameter of the optimizer (first-use
// order, the same on every rank), whether or not this rank has tasks on them: the ranks of each
// check that they step the same split parameters (ValueError naming the ranks otherwise).
void orthogonalize(const std::vector<OrthoTask>& tasks,
                   const std::vector<dist::Communicator*>& split_comms, int ns_steps);

namespace detail {
// FNV-1a over `s` plus a terminator, chained from h (start: kFingerprintSeed): a fingerprint the
// ranks compare to check they agree on a list of names.
inline constexpr uint64_t kFingerprintSeed = 14695981039346656037ull;
uint64_t fingerprint(uint64_t h, std::string_view s);
}  // namespace detail

}  // namespace hp::optim
