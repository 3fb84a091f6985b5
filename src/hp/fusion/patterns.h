// The vector chains of the transformer blocks as fused regions, chosen by the fusion mode
// (mode.h, docs/FUSION.md "Modes"). Every function here is what the models call in place of the
// eager ops; in mode none it runs exactly those ops (the same kernels, the same autograd nodes).
//
//   swiglu        silu(g) · u                          dense MLPs, MoE experts    auto*, lazy
//   rms_norm      x · rsqrt(mean(x²) + eps) · w        nn::RMSNorm                lazy
//   add_rms_norm  h = x + r, y = rms_norm(h, w, eps)   residual add + next norm   lazy
//
// * auto: f32, forward and backward (measured faster than the eager ops; FUSION.md).
// Inputs are f32 or bf16 (other dtypes, and an undefined norm weight, take the eager ops in every
// mode). SwiGLU's regions are the eager ops themselves (forward: silu rounded to the dtype, then
// mul; with gradients it also writes s = silu(g), and the backward region computes dy·u, dy·s and
// silu_bwd(g, dy·u) over the saved g, u, s), so forward and backward are bitwise those of the
// eager ops. The norms compute in f32 between a
// cast in and a cast out, like the hand kernel, but in another association (mean = Σ·(1/n), the
// engine's rsqrt): equal within a few f32 ulps before the final rounding.
#pragma once

#include <cstdint>
#include <utility>

#include "hp/core/tensor.h"

namespace hp::fusion {

// g, u: [..., n] of the same shape and dtype.
Tensor swiglu(const Tensor& g, const Tensor& u);
// x [..., n], w [n] (or undefined: ones); y in x's dtype.
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);
// x, r [..., n], w [n]: {h = x + r, rms_norm(h, w, eps)}.
std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& w,
                                       double eps);

// Calls that ran as a fused region since the process started (the eager ones are not counted):
// what a run's mode actually fused (tests, logs).
struct PatternCalls {
  int64_t swiglu = 0, rms_norm = 0, add_rms_norm = 0;
};
PatternCalls pattern_calls();

}  // namespace hp::fusion
