// The exchange pipeline of MegaMoE (megamoe.h; docs/MULTICORE.md "MegaMoE"), internal to
// shard/megamoe*.cpp: the per-group layout (send side from this rank's counts, receive side from
// the counts exchanged inside the plan) and add_pipeline, which appends route → layout → dispatch
// → regroup → (the caller's compute) → unregroup → combine → place for every group to a plan.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"
#include "hp/multicore/plan.h"

namespace hp::moe::megamoe_detail {

using multicore::BufferId;
using multicore::EventId;
using multicore::Plan;

// One expert group as this rank sees it. Rows are [rows, H] unless said otherwise.
struct Group {
  int64_t e_lo = 0, e_hi = 0;  // this rank's local experts [e_lo, e_hi) in the group
  // Known when the plan is built (this rank's own counts):
  std::vector<int64_t> send;     // [n] rows to each rank
  std::vector<int64_t> send_at;  // [n] first row of owner r's block in the send buffer
  std::vector<int64_t> home;     // [n] first row in xs of the rows owner r gets
  int64_t S = 0;                 // Σ send
  // Known once the counts arrived ("layout g", receive_counts):
  std::vector<int64_t> recv;       // [n] rows from each rank
  int64_t R = 0;                   // Σ recv
  std::vector<int64_t> expert_at;  // [experts + 1] row offsets of each expert, regrouped
  // [n · experts]: source s's rows of expert e_lo + j, at s · experts + j: how many, where they
  // are in the receive buffer (source-major, then by expert) and where regrouped (by expert, stable
  // by source: the sequential path's order).
  std::vector<int64_t> block_rows, block_at, regroup_at;
  int64_t experts() const { return e_hi - e_lo; }
};

struct Layout {
  int64_t n = 0, rank = 0, hidden = 0, inter = 0, rows = 0, local = 0;
  // dtype: the rows' (in, out and every exchange buffer: send, recv, y send, back); compute: the
  // experts' (the regrouped x, y and the extra row buffers). "regroup g" widens recv → x and
  // "unregroup g" rounds y → y send (nearest even) when they differ, e.g. bf16 rows of f32 experts.
  DType dtype = DType::f32, compute = DType::f32;
  std::vector<Group> groups;  // the groups with at least one expert slot
};

// The send side of every group, from this rank's counts alone (no communication).
Layout make_layout(const std::vector<int64_t>& count, int64_t num_experts, int64_t n, int64_t rank,
                   int64_t groups, int64_t hidden, int64_t inter, DType dtype, DType compute);

// " g": task, buffer and event names of group g.
std::string suffix(int64_t g);
// [max(rows, 1), cols]: buffers get at least one row so that no tensor is empty.
Tensor rows_of(int64_t rows, int64_t cols, DType dtype);

// A group's buffers of [R, cols] rows in L.compute beside the pipeline's own (sized when the
// counts are known).
struct RowBuffer {
  std::string name;
  int64_t cols = 0;
};

// Group g's buffers the compute sees: x (regrouped [R, H]) in, y ([R, H]) out, and the extra
// [R, cols] row buffers asked for, in that order.
struct GroupBuffers {
  BufferId x, y;
  std::vector<BufferId> rows;
};

// Group g's compute between regroup and unregroup: tasks reading x and writing y, the first
// waiting on `ready`; returns the event the last one triggers.
using Compute = std::function<EventId(Plan&, size_t g, const GroupBuffers& b, EventId ready)>;
// Tasks after group g's return all-to-all is in the comm order (the weight gradients).
using AfterCombine = std::function<void(Plan&, size_t g)>;

// The exchange pipeline over every group (megamoe.h): rows of `in` [A, H] (L.dtype, as `out` and
// the exchange buffers; the compute's buffers in L.compute) to their owners, through
// `compute`, back into `out` [A, H] at the same rows. `count` (an i64 [E] buffer of this rank's
// rows per expert): the counts are exchanged first, inside the plan, and "layout g" fills group
// g's receive side and sizes its buffers once they arrived; kNoBuffer: L's receive side is known
// already (the backward), "layout g" only sizes the buffers. L must outlive the plan's runs (its
// tasks read and fill it). Returns every group's buffers.
std::vector<GroupBuffers> add_pipeline(Plan& plan, Layout& L, const dist::CommPtr& comm,
                                       BufferId count, BufferId in, BufferId out,
                                       const std::vector<RowBuffer>& extra, const Compute& compute,
                                       const AfterCombine& after);

}  // namespace hp::moe::megamoe_detail
