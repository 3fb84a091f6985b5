// SwiGLU on rows of an expert's gate and up projections, shared by the grouped experts
// (models/moe.cpp) and MegaMoE (shard/megamoe.cpp) so that both round identically: the two must be
// bitwise equal in f32.
#pragma once

#include <cstdint>

namespace hp::kernels {

// act[j] = silu(g[j]) · u[j] for j in [0, n).
void swiglu_f32(const float* g, const float* u, float* act, int64_t n);

// The backward of swiglu_f32 given dact: du = dact · silu(g), dg = dact · u · s · (1 + g (1 − s))
// with s = sigmoid(g).
void swiglu_backward_f32(const float* g, const float* u, const float* dact, float* dg, float* du,
                         int64_t n);

}  // namespace hp::kernels
