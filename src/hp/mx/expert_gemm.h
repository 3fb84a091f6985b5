// One expert's three MX training GEMMs on raw rows, with the quantization points and output dtypes
// of mx_grouped_experts (linear.h) for that expert's group: MegaMoE (moe/megamoe.h) runs them per
// expert inside its cube tasks, and they equal the grouped function's rows bitwise (every MX GEMM
// job depends only on its own operands and shape, mx/gemm.h; row-wise blocks never span rows and
// the grouped column-wise blocks restart at each expert's first row).
//
// Shapes: x [rows, K], w [N, K] (an expert's Linear weight, out × in), y / dy [rows, N], all
// row-major contiguous. rows may be 0. Dtypes (f32 or bf16) as mx_grouped_experts: activations x,
// y, dy and dx in `act` (x's dtype there), w and dw in `weight`; bf16 results are rounded once
// (nearest even) from the f32 accumulation.
#pragma once

#include <cstdint>

#include "hp/core/dtype.h"
#include "hp/mx/format.h"

namespace hp::mx {

// The dtypes of one expert's operands: activations (x, y, dy, dx) and the weight (w, dw).
struct ExpertDTypes {
  DType act = DType::f32, weight = DType::f32;
};

// y = x · wᵀ: x and w row-wise (blocks along K).
void expert_fprop(const void* x, const void* w, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* y);
// dx = dy · w: dy row-wise (blocks along N), w column-wise (blocks along N).
void expert_dgrad(const void* dy, const void* w, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* dx);
// dw [N, K] = dyᵀ · x: dy and x column-wise (blocks along the rows); zeros when rows == 0.
void expert_wgrad(const void* dy, const void* x, int64_t rows, int64_t N, int64_t K, QuantSpec spec,
                  ExpertDTypes dt, void* dw);

}  // namespace hp::mx
