// MegaMoE: the expert-parallel exchange of routed_experts (moe/expert_parallel.h) as one
// Multicore plan per direction (docs/MULTICORE.md "MegaMoE"), so that all-to-all overlaps the
// expert GEMMs.
//
// The local experts of every rank are split into G groups by local slot (the torch.chunk rule over
// the c = ceil(E / ep) slots: group g holds slots [g·ceil(c/G), …)); group g is the experts in
// those slots on every rank, so every rank has work in every group. Per group the forward plan runs
//   route g (vector: this rank's rows for group g's experts, per owner, gathered from xs)
//   → dispatch g (comm: all_to_all_v) → regroup g (vector: received rows by local expert, stable by
//   source, as the sequential path) → up g (cube: gate and up GEMM, one block per local expert)
//   → swiglu g (vector) → down g (cube) → unregroup g (vector: back to source order)
//   → combine g (comm: all_to_all_v, counts swapped) → place g (vector: rows back to xs order).
// The comm worker posts dispatch 0, then per g: dispatch g+1, combine g, so group g+1's dispatch
// and group g's combine travel while the next group computes. The backward plan is the same
// pipeline on the output gradient (the combine's adjoint is a dispatch and vice versa) with
// dact = dy · down, the SwiGLU backward and dx = dg · gate + du · up per expert, and the weight
// gradients of group g (cube) after its return all-to-all is posted, so they overlap it.
//
// The pipeline itself (layout, routes, exchanges, regrouping) is moe/megamoe_pipeline.h; this
// file's .cpp adds the experts' tasks to it. The per-expert row counts travel inside the forward
// plan: "counts" (comm, one all-to-all of E integers, exchange_counts' layout) is posted first,
// the routes run meanwhile, and "layout g" (vector, after it) computes group g's receive counts
// and regrouping offsets and allocates its [R, ·] buffers (multicore dynamic buffers: R is known
// only then); dispatch g waits on it. The backward reuses the forward's layout.
// Every expert multiplies exactly the rows, in the order, of the sequential path, with the same
// kernels (one gemm_f32 per expert via grouped_gemm, kernels::swiglu_f32), and the rows only move
// by copies, so outputs and gradients equal the sequential exchange's bitwise in f32 for any G and
// any worker counts. Rows may be bf16 and then travel as bf16 (2 bytes an element) in every
// exchange: the f32 experts widen them when regrouping and round each output row to bf16 when
// unregrouping, where the sequential path casts; MX experts (MegaMoEOptions::mx) compute in bf16
// then, their per-group projections bf16 buffers rounded where the sequential path rounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"
#include "hp/multicore/link.h"
#include "hp/mx/format.h"

namespace hp::moe {

// This rank's experts' SwiGLU weights (local order), contiguous, all f32 (or all bf16 with MX
// experts): gate and up [I, H], down [H, I]. Gradients flow to them, in their dtype. (bf16
// parameters of f32 experts come through a differentiable cast to f32, as in the sequential path.)
struct LocalExpertWeights {
  std::vector<Tensor> gate, up, down;
};

struct MegaMoEOptions {
  int64_t groups = 2;  // G >= 1; more groups than expert slots per rank act as one per slot
  // true: the plans run on a process-wide multicore::Runtime (GEMM workers = the process pool's
  // threads, 1 vector and the comm worker; HP_LINK_GBPS / HP_LINK_US / HP_MULTICORE_TIMEOUT_S
  // apply). false: every task in order
  // on the caller, each call waited for (multicore::run_sequential with the same link model): the
  // same work without overlap, the benchmark's baseline. Bitwise equal either way.
  bool overlap = true;
  // The link model of the comm calls (multicore/link.h); unset: HP_LINK_GBPS / HP_LINK_US.
  std::optional<multicore::LinkModel> link = std::nullopt;
  // Set: MX experts. Every expert GEMM is the MX GEMM of mx_grouped_experts with this spec
  // (activations and weights quantized inside the cube task, mx/expert_gemm.h) and SwiGLU the eager
  // ops of fusion::swiglu, so outputs and gradients equal the sequential exchange with
  // mx_grouped_experts as its grouped kernel bitwise. The weights may then be bf16 too, and bf16
  // rows are computed in bf16 (each GEMM writes its result in the rows' dtype, the SwiGLU ops
  // round per op, as there).
  std::optional<mx::QuantSpec> mx = std::nullopt;
  // Keep the runs' Chrome traces (MegaMoERunStats::chrome_trace), e.g. for a benchmark's --trace.
  bool trace = false;
};

// xs [A, H] (f32 or bf16) sorted by expert with count[e] rows of global expert e (Σ count = A)
// → the experts' outputs [A, H] in the same order and dtype (an ExpertExchange of
// moe/expert_parallel.h). Differentiable w.r.t. xs and the weights. Collective over `ep`.
Tensor megamoe_experts(const Tensor& xs, const std::vector<int64_t>& count, int64_t num_experts,
                       const LocalExpertWeights& w, const dist::CommPtr& ep,
                       const MegaMoEOptions& options = {});

// Timings of this process's last MegaMoE forward or backward run (benchmarks): wall time, the
// time some compute task (cube or vector) was running, the time some comm call was in flight,
// and the bytes its all-to-alls sent to other ranks.
struct MegaMoERunStats {
  double wall_s = 0, compute_s = 0, comm_s = 0;
  int64_t bytes = 0;
  std::string chrome_trace;  // with options.trace: this rank's run (multicore/trace.h), else empty
};
// The groups MegaMoE runs for `groups` (G) over num_experts split on n ranks: the torch.chunk rule
// over the c = ceil(E / n) slots gives ceil(c / ceil(c / G)) of them (c when G > c).
int64_t megamoe_groups(int64_t num_experts, int64_t n, int64_t groups);

MegaMoERunStats megamoe_last_forward();
MegaMoERunStats megamoe_last_backward();

}  // namespace hp::moe
