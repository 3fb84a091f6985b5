// Elementwise kernels over tensors: broadcasting, mixed input dtypes, any strides.
//
// Compute is f32 for f32/bf16/f16 operands (each operand converted on load, the result rounded on
// store) and f64 — with exact libm math — when the output or an operand is f64 or an integer type.
// Work runs tile by tile (kTile elements per operand, in L1), the same skeleton the DVM fusion engine
// uses for chains of these ops.
#pragma once

#include <initializer_list>

#include "hp/core/tensor.h"
#include "hp/kernels/cpu/ew_ops.h"

namespace hp::kernels {

// Broadcast result of two shapes (numpy rules); throws ValueError "[op] ..." naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Result dtype of a binary op: the wider float (f64 > f32 > bf16/f16; bf16 with f16 gives f32);
// a float wins over an integer; two integers give i64 unless equal.
DType promote_types(DType a, DType b);

// out = op(a[, b]) into a new tensor of dtype `out_dtype` and the broadcast shape.
Tensor elementwise(EwOp op, const Tensor& a, const Tensor& b, DType out_dtype,
                   std::initializer_list<float> params = {});
inline Tensor elementwise(EwOp op, const Tensor& a, std::initializer_list<float> params = {}) {
  return elementwise(op, a, Tensor(), a.dtype(), params);
}
// Writes op(a[, b]) into `out` (which may alias a or b exactly — in-place updates).
void elementwise_into(EwOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                      std::initializer_list<float> params = {});

}  // namespace hp::kernels
