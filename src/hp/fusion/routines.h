// The precompiled SIMD routines a compiled fusion program is a list of (docs/FUSION.md).
//
// Each ISA translation unit (routines_scalar.cpp, routines_avx2.cpp, routines_avx512.cpp) fills one
// RoutineTable from the functors of kernels/cpu/ew_ops.h, compiled for its ISA exactly as the eager
// kernels are (ew_impl.h); kernels::kernel_table<RoutineTable>() (kernels/registry.h) picks the
// table of the active ISA. The all-vector form
// of every op is the eager kernel itself (EwTable::f32), so a fused op and its eager op are the
// same machine code. Every routine works on contiguous f32 runs of any length n, and the result of
// element i depends only on its inputs (tails go through the same vector code on a padded copy).
#pragma once

#include <cstdint>

#include "hp/kernels/cpu/ew_table.h"

namespace hp::fusion {

// Reduction accumulator: 4 vector accumulators of up to 16 lanes (the order of EwTable::sum_f32 /
// max_f32, so a fused row reduction equals the eager one bitwise).
inline constexpr int kAccFloats = 4 * 16;

// A chain: a sequence of ops applied to one running value in registers, a group of vectors at a
// time, so a linear run of single-use values costs no tile traffic between its ops. The first op
// loads the running value; each next op combines it with nothing (unary), a vector source (acc_v:
// op(acc, src), v_acc: op(src, acc)) or a scalar s (acc_s, s_acc). src indexes the pass's
// per-tile pointer table. Ops are the same functors, so a chain equals its ops run one by one.
// store: the running value is also written to P[src] (a value the chain computes that others read).
// bf16 = 1 on load / acc_v / v_acc / store: P[src] holds bf16 in memory (a bf16 input read without
// a widening pass, a bf16 output written without a narrowing pass; the eager converters' bits).
enum class ChainForm : uint8_t { load, unary, acc_v, v_acc, acc_s, s_acc, store };
// Trivial (no member initializers): the runner copies a step's ops into a stack array per tile, and
// a zero-filled array there was most of the per-tile overhead. Create with ChainOp{}.
struct ChainOp {
  uint8_t op;  // EwOp
  ChainForm form;
  uint8_t round;  // 1: the result is a bf16 value, rounded in the chain (as the eager op stores)
  uint8_t bf16;   // 1: P[src] is bf16 in memory (see ChainForm)
  int16_t src;
  float s;
  float p[3];
};
// Chains are bounded so their padded tails fit on the stack.
inline constexpr int kMaxChainOps = 16;
inline constexpr int kMaxChainSources = 8;
// Ops a chain may hold: every functor (unary, binary, the backward helpers).
bool chainable(kernels::EwOp op);

struct RoutineTable {
  // Binary ops with one scalar operand, s = p[3]: out = op(in[0], s) / out = op(s, in[0]).
  kernels::EwF32Fn vs[kernels::kNumEwOps];
  kernels::EwF32Fn sv[kernels::kNumEwOps];
  // out = in[0] != 0 ? in[1] : in[2] (NaN counts as true, as hp::where's mask).
  void (*select)(float* out, const float* const* in, int64_t n);
  // out = in rounded to bf16 (nearest even), as f32. out may equal in.
  void (*round_bf16)(float* out, const float* in, int64_t n);
  void (*fill)(float* out, float v, int64_t n);
  // Streaming row reductions (red: 0 sum, 1 max). init, then chunks whose n is a multiple of 64
  // (4 vectors of the widest ISA), then finish with the row's last chunk (any n).
  void (*red_init)(float* acc, int red);
  void (*red_chunk)(float* acc, const float* x, int64_t n, int red);
  float (*red_finish)(float* acc, const float* x, int64_t n, int red);
  // out[0, n) = the chain's value (out null: not written; the chain stored what is read); P[src] +
  // i is element i of a source (out may equal a source).
  void (*chain)(float* out, void* const* P, int64_t n, const ChainOp* ops, int nops);
};

}  // namespace hp::fusion

namespace hp::kernels {
HP_KERNEL_FAMILY(fusion::RoutineTable);
}  // namespace hp::kernels
