// Layouts of a tensor over one mesh axis (docs/ARCHITECTURE.md §4): Shard(dim) with the uneven
// torch.chunk rule, Replicate, and Partial(op) — every rank holds a term of a pending reduction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "hp/dist/communicator.h"

namespace hp::shard {

// Tensor dim `dim` split over the axis: chunk = ceil(n/W); rank r holds
// [min(n, r·chunk), min(n, (r+1)·chunk)) — 7 over 4 → 2,2,2,1; 5 over 4 → 2,2,1,0.
struct Shard {
  int64_t dim = 0;
  bool operator==(const Shard&) const = default;
};
// Every rank of the axis holds the whole (along this axis) tensor.
struct Replicate {
  bool operator==(const Replicate&) const = default;
};
// The value is the reduction (sum, avg, max, min) over the axis of every rank's local tensor.
struct Partial {
  dist::ReduceOp op = dist::ReduceOp::sum;
  bool operator==(const Partial&) const = default;
};
using Placement = std::variant<Shard, Replicate, Partial>;
// One placement per mesh axis.
using Placements = std::vector<Placement>;

inline bool is_shard(const Placement& p) {
  return std::holds_alternative<Shard>(p);
}
inline bool is_replicate(const Placement& p) {
  return std::holds_alternative<Replicate>(p);
}
inline bool is_partial(const Placement& p) {
  return std::holds_alternative<Partial>(p);
}
// "Shard(0)", "Replicate()", "Partial(sum)"; placements as "(Shard(0), Replicate())".
std::string placement_str(const Placement& p);
std::string placements_str(const Placements& p);

// Rows [start, start + length) of a dim of size n held by rank `rank` of `world`.
struct ChunkRange {
  int64_t start = 0;
  int64_t length = 0;
};
inline int64_t chunk_size(int64_t n, int64_t world) {
  return (n + world - 1) / world;
}
inline ChunkRange chunk_range(int64_t n, int64_t world, int64_t rank) {
  int64_t c = chunk_size(n, world);
  int64_t lo = std::min(n, rank * c), hi = std::min(n, (rank + 1) * c);
  return {lo, hi - lo};
}

}  // namespace hp::shard
