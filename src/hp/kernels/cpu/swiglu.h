// SwiGLU on rows of an expert's gate and up projections, shared by the grouped experts
// (models/moe.cpp) and MegaMoE (moe/megamoe.cpp) so that both round identically: the two must be
// bitwise equal in f32.
#pragma once

#include <cstdint>

namespace hp::kernels {

// act[j] = silu(g[j]) · u[j] for j in [0, n). limit > 0 (the SwiGLU clamp of DeepSeek-V4 and
// gpt-oss): g is first clamped to (−inf, limit] and u to [−limit, limit].
void swiglu_f32(const float* g, const float* u, float* act, int64_t n, float limit = 0.0f);

// The backward of swiglu_f32 given dact: du = dact · silu(g), dg = dact · u · s · (1 + g (1 − s))
// with s = sigmoid(g), on the clamped values; with a limit, zero where the clamp was active
// (g > limit, |u| > limit), as torch.clamp's gradient.
void swiglu_backward_f32(const float* g, const float* u, const float* dact, float* dg, float* du,
                         int64_t n, float limit = 0.0f);

}  // namespace hp::kernels
