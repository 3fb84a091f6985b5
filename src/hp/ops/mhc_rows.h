// MegaMHC's row passes (mhc_fused.cpp), shared by the autograd ops of mhc_fused.h, which run them
// with parallel_for, and the Multicore tasks of mhc_tasks.h, which run them as vector tasks over
// the same rows: one implementation, so the two give the same bits.
//
// Shapes: R token rows, N = hc_mult streams, D = hidden, K = N·D, M = (2 + N)·N mixes. Tensors are
// contiguous; streams-like ones (x, input, out, dx, ...) f32 or bf16, everything else f32.
#pragma once

#include <cstdint>

#include "hp/core/tensor.h"
#include "hp/ops/mhc_fused.h"

namespace hp::mhc_detail {

// The mix's forward over rows [lo, hi): mixes [R, M] holds x · fnᵀ on entry and is scaled by each
// row's rms; rstd [R, 2] gets that rms and the norm's; post [R, N], comb [R, N, N], input [R, D].
struct MixRows {
  Tensor x;  // [R, K]
  float* mixes;
  float* rstd;
  const float *base, *scale, *norm_weight;  // norm_weight [D] f32 or null (no norm)
  float *post, *comb;
  Tensor input;
  MhcSpec spec;
  void operator()(int64_t lo, int64_t hi) const;
};

// The mix's backward, first pass, over the rows [r0, r1) of block `bi` (blocks of
// kernels::norm_grad_block_rows(R)): dm [R, M] (d mixes times the rms: the GEMMs' left operand) and
// dy [R, D] (d collapse); the block's partial sums of d norm_weight [D] (when dw_part is set),
// d base [M] and d scale [3] at dw_part + bi·D, db_part + bi·M, ds_part + bi·3 (set, not added to).
struct MixGradRows {
  Tensor x;                   // [R, K]
  const float *mixes, *rstd;  // as the forward left them
  const float *base, *scale, *norm_weight;
  const float *dpost, *dcomb;  // [R, N], [R, N, N]
  Tensor dinput;               // [R, D], x's dtype
  float *dm, *dy;
  float *dw_part, *db_part, *ds_part;
  MhcSpec spec;
  void operator()(int64_t bi, int64_t r0, int64_t r1) const;
};

// The mix's backward, last pass, over rows [lo, hi): g [R, K] f32 holds dm · fn on entry and is
// completed in place to d x (the rms's term and the collapse's pre_n · dy), written to dx [R, K]
// (x's dtype; may be g itself when f32).
struct MixDxRows {
  Tensor x;  // [R, K]
  const float *mixes, *rstd, *base, *scale, *dy;
  float* g;
  Tensor dx;
  MhcSpec spec;
  void operator()(int64_t lo, int64_t hi) const;
};

// out [len] = Σ over blocks of partials [blocks, len], block by block from 0 (the order fixes the
// bits).
void sum_partials(const float* part, int64_t blocks, int64_t len, float* out);

// The fold over rows [lo, hi): y [R, N, D] = post_n · out + Σ_m comb[m, n] · x_m.
struct FoldRows {
  const float *post, *comb;  // [R, N], [R, N, N]
  Tensor out, x, y;          // [R, D], [R, K], [R, K]
  void operator()(int64_t lo, int64_t hi) const;
};

// The fold's backward over rows [lo, hi) from g = d y [R, K] (x's dtype): d post, d comb (f32),
// d out, d x (x's dtype).
struct FoldGradRows {
  const float *post, *comb;
  Tensor out, x, g;
  float *dpost, *dcomb;
  Tensor dout, dx;
  void operator()(int64_t lo, int64_t hi) const;
};

}  // namespace hp::mhc_detail
