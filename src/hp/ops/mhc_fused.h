// MegaMHC: the mHC block of models/mhc.h (DeepSeek-V4's hyper-connections) as two fused passes with
// their analytic backward, instead of a chain of ~20 tensor ops that each write a full tensor.
//
// Shapes: R token rows, N = hc_mult streams, D = hidden, K = N·D, M = (2 + N)·N mixes.
//
// fused_mhc_mix: streams x [R, N, D] (f32 or bf16) →
//   mixes   m = (x · fnᵀ) · r, r = (mean(x²) + eps)^-1/2 over the K values of a row
//           (one GEMM over all rows: rms scales the GEMM output instead of writing a normed copy)
//   then per row, in cache: pre  = sigmoid(m[0, N) · scale[0] + base) + hc_eps
//                           post = 2 · sigmoid(m[N, 2N) · scale[1] + base)
//                           comb = Sinkhorn(softmax(m[2N, M) · scale[2] + base) + hc_eps)
//                           input = rms_norm(Σ_n pre_n · x_n, norm_weight)
//   Saves x (the input), m [R, M] and the two per-row rstd [R]; pre, the Sinkhorn states and the
//   collapse are recomputed per row in backward.
// fused_mhc_fold: new streams [R, N, D] = post_n · out + Σ_m comb[m, n] · x_m, one pass per row;
//   saves nothing but its inputs.
//
// Backward, per row in one pass: the norm's vjp, the collapse's, sigmoid / softmax and the Sinkhorn
// iterations' (from the states recomputed in cache), giving d m; then two GEMMs (d x through fn and
// d fn) and a last per-row pass for the rms. Parameter gradients (fn, base, scale, norm weight) are
// reductions over rows in fixed blocks summed in block order: bitwise independent of the thread
// count. Row loops use the active ISA's elementwise row functions (kernels/cpu/ew_table.h) and the
// RMSNorm row kernels (norm_table.h); they are the passes of mhc_rows.h, which mhc_tasks.h also runs
// as Multicore vector tasks.
#pragma once

#include <cstdint>

#include "hp/core/tensor.h"

namespace hp {

struct MhcSpec {
  int64_t hc_mult = 4;  // N
  int64_t sinkhorn_iters = 20;
  double hc_eps = 1e-6;        // added to pre, the softmax and the Sinkhorn denominators
  double mix_norm_eps = 1e-6;  // the rms of the flattened streams
  double norm_eps = 1e-6;      // the block's input RMSNorm
};

struct FusedMix {
  Tensor post;   // [B, T, N] f32
  Tensor comb;   // [B, T, N, N] f32
  Tensor input;  // [B, T, D] in the streams' dtype: rms_norm(Σ pre · streams, norm_weight)
};

// streams [B, T, N, D] f32 or bf16; fn [M, N·D], base [M], scale [3] f32; norm_weight [D] (any
// float dtype) or undefined (no norm: input is the collapse itself). Differentiable in all of them.
// Throws ValueError("[mhc] ...") naming the tensor whose shape or dtype does not fit.
FusedMix fused_mhc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base,
                       const Tensor& scale, const Tensor& norm_weight, const MhcSpec& spec);

// post [B, T, N] f32, comb [B, T, N, N] f32, out [B, T, D], streams [B, T, N, D] (out and streams
// of one dtype) → [B, T, N, D] in that dtype. Differentiable in all four.
Tensor fused_mhc_fold(const Tensor& post, const Tensor& comb, const Tensor& out,
                      const Tensor& streams);

}  // namespace hp
