// Selection along the last dim of contiguous rows: max with its index, and top-k.
//
// Order: NaN counts as larger than any number (torch's rule: a NaN max is reported, not hidden);
// ties go to the lower index. Values are copied exactly from the input.
#pragma once

#include "hp/core/tensor.h"

namespace hp::kernels {

// x [rows, n] contiguous (f64/f32/bf16/f16), n >= 1 → values [rows] (x's dtype), indices [rows] i64
// (first occurrence of the maximum).
void max_lastdim(const Tensor& x, Tensor* values, Tensor* indices);
// x [rows, n] contiguous, 0 <= k <= n → values [rows, k] sorted descending, indices [rows, k] i64.
void topk_lastdim(const Tensor& x, int64_t k, Tensor* values, Tensor* indices);

}  // namespace hp::kernels
