// Rotary position embedding kernel: rotates pairs of the last dim of x by angle θ[t, i].
//
// x, out: contiguous [..., D] (same shape and dtype; f32/bf16/f16 compute in f32, f64 in f64).
// cos, sin: [T, D/2] (cos θ, sin θ per position t and frequency i), or [B, T, D/2] with B =
// x.shape[0] and seq_dim >= 1 (per-row angles: positions that restart at each packed document).
// The position of a row is its index along `seq_dim` (T = x.shape[seq_dim]). Pairs are (i, i + D/2)
// when !interleaved (HF's rotate_half), (2i, 2i + 1) when interleaved (GPT-J). inverse = rotate by
// -θ (the backward).
#pragma once

#include "hp/core/tensor.h"

namespace hp::kernels {

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
          bool interleaved, int64_t seq_dim, bool inverse);

}  // namespace hp::kernels
