// MXFP8 linear layers as autograd functions (docs/ARCHITECTURE.md §4 "Training GEMMs").
//
//   fprop  Y  = X·Wᵀ  from X row-wise, W row-wise
//   dgrad  dX = dY·W  from dY row-wise, W column-wise (blocks along out, the reduction dim)
//   wgrad  dW = dYᵀ·X from dY column-wise, X column-wise (blocks along tokens)
//
// Every GEMM quantizes along its reduction dim from high-precision data and accumulates in FP32.
// Saved for backward: X column-wise only (codes [T, in] u8 + scales [ceil(T/32), in] u8, through
// the saved-tensor hooks so offload can move them), never X in high precision; and only when the
// weight needs a gradient. The weight's column-wise quantization is NOT cached: backward
// requantizes it from the weight parameter (one read of W; FSDP re-gathers W for backward anyway,
// and a cache would pin a second copy of every weight between forward and backward).
// Weight and bias are used as the parameter objects themselves; their gradients are accumulated in
// their own dtypes. Outputs and dX take x's dtype (f32 or bf16).
#pragma once

#include "hp/core/tensor.h"
#include "hp/mx/format.h"

namespace hp::mx {

// y [..., out] = x [..., in] · weight [out, in]ᵀ + bias [out] (bias optional). x and weight are f32
// or bf16. Differentiable in x, weight and bias.
Tensor mx_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                 QuantSpec spec = {});

// MoE experts over tokens sorted by expert: y [T, out], for each expert e the rows
// [group_ends[e-1], group_ends[e]) of y = those rows of x_sorted [T, in] · w[e] [out, in]ᵀ.
// group_ends: i32 [E], non-decreasing, last <= T; rows at or past group_ends[E-1] give y = 0 and
// dx = 0. w [E, out, in]. Quantization blocks never cross a group boundary. Differentiable in
// x_sorted and w.
Tensor mx_grouped_experts(const Tensor& x_sorted, const Tensor& group_ends, const Tensor& w,
                          QuantSpec spec = {});

// The grouped kernel mx/convert.h gives expert sets (an nn::GroupedKernel): mx_grouped_experts with
// `spec`, as a named type so that a block can tell MX experts apart (std::function::target) and
// run them in another schedule with the same spec (MegaMoE, moe/megamoe.h).
struct MxGroupedKernel {
  QuantSpec spec;
  Tensor operator()(const Tensor& x_sorted, const Tensor& group_ends, const Tensor& w) const {
    return mx_grouped_experts(x_sorted, group_ends, w, spec);
  }
};

// A linear layer that runs mx_linear (the trainer may also call mx_linear directly).
struct MXLinear {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined
  QuantSpec spec;
  Tensor forward(const Tensor& x) const { return mx_linear(x, weight, bias, spec); }
};

}  // namespace hp::mx
