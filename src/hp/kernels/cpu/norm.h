// Fused RMSNorm / LayerNorm over the last dim: forward and backward drivers (docs/ARCHITECTURE.md
// §7 skeleton).
//
// x: [..., n], any layout (made contiguous); f32/bf16/f16 compute in f32 (converted per tile of
// rows, in L1), f64 in f64. The forward keeps only per-row statistics for backward (rstd, and mean
// for LayerNorm; f32, or f64 for f64 input). Weight/bias gradients are reductions over rows: per
// fixed block of rows (the split depends only on the row count) a partial is accumulated, and the
// partials are summed in block order, so every result is bitwise independent of the thread count.
#pragma once

#include "hp/core/tensor.h"

namespace hp::kernels {

enum class NormKind { rms, layer };

struct NormForward {
  Tensor y;     // like x (x's dtype, contiguous)
  Tensor mean;  // [rows] (LayerNorm only)
  Tensor rstd;  // [rows]
};

// w, b: [n] or undefined (ones / zeros); b must be undefined for rms.
NormForward norm_forward(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& b,
                         double eps);

struct NormGrads {
  Tensor dx;  // like x (x's dtype)
  Tensor dw;  // [n] in w's dtype
  Tensor db;  // [n] in b's dtype (given as b_dtype)
};

// g: like x (any layout/dtype; converted). mean/rstd from norm_forward. Each need_* selects a
// result.
NormGrads norm_backward(NormKind kind, const Tensor& g, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool need_dx, bool need_dw,
                        bool need_db, DType b_dtype = DType::f32);

// Rows per block of the weight-gradient reduction: a function of the row count only.
int64_t norm_grad_block_rows(int64_t rows);

}  // namespace hp::kernels
