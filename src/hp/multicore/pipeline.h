// A chunked all-to-all → GEMM → all-to-all pipeline as a multicore plan: the communication pattern
// of expert parallelism (dispatch, expert GEMM, combine), used by the MPI test and bench_multicore,
// and the template MegaMoE's plan follows (docs/MULTICORE.md).
//
// x [chunks·rows, K] on every rank (rows divisible by the rank count) is cut into `chunks` row
// chunks (views x_c of x, out_c of out). Per chunk c:
//   comm   "dispatch c"  all_to_all of x_c [rows, K] → recv_c [rows, K]    triggers "dispatched c"
//   cube   "gemm c"      y_c [rows, N] = recv_c · w [K, N]                 triggers "computed c"
//   comm   "combine c"   all_to_all of y_c → out_c [rows, N]               triggers "combined"
// Rows return to the rank and position they came from, so out [chunks·rows, N] = x · w once
// "combined" reaches `chunks` (a fan-in a task appended to the plan can wait for).
// Comm tasks are in the order dispatch 0..L, then per chunk c: dispatch c+L, combine c (L the
// lookahead), so while chunk c computes, chunk c+1..c+L's dispatches and chunk c−1's combine are
// in flight.
#pragma once

#include <cstdint>

#include "hp/dist/communicator.h"
#include "hp/multicore/plan.h"

namespace hp::multicore {

struct AllToAllGemm {
  Plan plan;
  BufferId x = kNoBuffer, w = kNoBuffer, out = kNoBuffer;  // out [chunks·rows, N]
  EventId combined = kNoEvent;                             // triggered once per chunk
  int64_t chunks = 0, rows = 0;
  double gemm_flops() const;  // 2·M·N·K summed over the GEMM tasks
};

// x [chunks·rows, K] f32, w [K, N] f32; `lookahead` chunks are dispatched ahead of the one
// computing. ValueError("[multicore] ...") naming the shape at fault.
AllToAllGemm all_to_all_gemm(const dist::CommPtr& comm, const Tensor& x, const Tensor& w,
                             int64_t chunks, int64_t lookahead = 1);

}  // namespace hp::multicore
