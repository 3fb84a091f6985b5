// MegaGate's selection (gate.h "select"): the top_k of one row of corrected scores c [E],
// optionally group-limited, per ISA. One source (gate_topk_impl.h) compiled for the portable path
// (gate_topk_scalar.cpp) and AVX2 (gate_topk_avx2.cpp); AVX-512's entry in the registry
// (registry.h) runs the AVX2 selection.
//
// The SIMD path never changes which experts are chosen or their order: it computes a lower bound
// tau on the k-th largest value from values that are themselves candidates (the row's lane-wise
// top-2s, or the kept groups' top-2s), packs the values >= tau (in index order, with their
// indices) and ranks them in the order (value descending, index ascending) by counting — the
// result of inserting every value into a top-k list, ties to the lower index, without the
// insertion's unpredictable branches. Up to 16 candidates are ranked in two registers by lane
// rotations. Group-limited rows whose groups are whole vectors, at most 8 of them (DeepSeek-V3's
// 8 × 32), stay in registers throughout: each group's lane-wise top-2s, the groups' top-2s in
// the lanes of one register (a transposed merge tree), the groups' ranks (score descending, group
// ascending: the insertion's order) and the bound counted by rotations. A row holding a NaN, or
// a group scored NaN (+inf + -inf), takes the original kernel's steps (the NaN policy, unchanged:
// NaN is never larger than a number, so it enters the top-k list only while fewer than k are
// held).
#pragma once

#include <cstdint>

#include "hp/kernels/registry.h"

namespace hp::kernels {

struct GateTopKShape {
  int64_t experts = 0, top_k = 1;
  int64_t n_group = 1, topk_group = 1;  // group-limited when n_group > 1 (gate.h)
};

// Caller-owned buffers of one row (no allocation per row).
struct GateTopKScratch {
  int64_t* idx;   // [top_k] out: the selected experts, by value descending (ties: lower index)
  float* val;     // [top_k] out: their values c[idx]
  int64_t* gidx;  // [n_group] kept groups (first topk_group entries)
  float* gval;    // [n_group]
  float* top2;    // [2 · n_group] each group's two largest
  float* kept2;   // [2 · n_group] the kept groups' two largest, descending
  char* keep;     // [n_group]
};

using GateTopKFn = void (*)(const float* c, const GateTopKShape& s, const GateTopKScratch& w);

// A sigmoid router's row in one pass: p [E] = sigmoid(l), c [E] = p + bias (bias may be null; c is
// then p and not written) with the elementwise kernels' functors of the ISA (bit for bit the
// tensor ops' sigmoid and add), the group-limited scan on the values in registers, then the
// selection of c as gate_topk.
using GateSigmoidTopKFn = void (*)(const float* l, const float* bias, float* p, float* c,
                                   const GateTopKShape& s, const GateTopKScratch& w);

// The kernel family of registry.h. Scalar: the portable path; avx2: AVX2; avx512: AVX2's selection
// and no sigmoid_topk (null: AVX-512's elementwise sigmoid is not the AVX2 one it would compute,
// so callers run the elementwise kernels, then topk).
struct GateTopKTable {
  GateTopKFn topk;
  GateSigmoidTopKFn sigmoid_topk;
};
HP_KERNEL_FAMILY(GateTopKTable);

}  // namespace hp::kernels
