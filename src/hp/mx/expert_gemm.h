// One expert's three MX training GEMMs on raw f32 rows, with the quantization points of
// mx_grouped_experts (linear.h) for that expert's group: MegaMoE (shard/megamoe.h) runs them per
// expert inside its cube tasks, and they equal the grouped function's rows bitwise (every MX GEMM
// job depends only on its own operands and shape, mx/gemm.h; row-wise blocks never span rows and
// the grouped column-wise blocks restart at each expert's first row).
//
// Shapes: x [rows, K], w [N, K] (an expert's Linear weight, out × in), y / dy [rows, N], all f32
// row-major contiguous. rows may be 0.
#pragma once

#include <cstdint>

#include "hp/mx/format.h"

namespace hp::mx {

// y = x · wᵀ: x and w row-wise (blocks along K).
void expert_fprop(const float* x, const float* w, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* y);
// dx = dy · w: dy row-wise (blocks along N), w column-wise (blocks along N).
void expert_dgrad(const float* dy, const float* w, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* dx);
// dw [N, K] = dyᵀ · x: dy and x column-wise (blocks along the rows); zeros when rows == 0.
void expert_wgrad(const float* dy, const float* x, int64_t rows, int64_t N, int64_t K,
                  QuantSpec spec, float* dw);

}  // namespace hp::mx
