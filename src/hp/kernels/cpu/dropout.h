// The dropout kernel: y = x * keep * scale elementwise, keep a u8 mask in row-major order.
#pragma once

#include "hp/core/tensor.h"

namespace hp::kernels {

// x (any layout, f64/f32/bf16/f16), keep [x.numel()] u8 contiguous → y contiguous of x's dtype and
// shape; dropped elements are exactly 0 (not 0 * x, which would be NaN for an infinite x).
Tensor masked_scale(const Tensor& x, const Tensor& keep, double scale);

}  // namespace hp::kernels
