// Reductions over dims (sum, max, min) with a fixed accumulation order.
//
// Each output element is reduced by one thread in a fixed order (f32 accumulation for f32/bf16/f16,
// f64 for f64), so results are bitwise independent of the thread count.
#pragma once

#include <vector>

#include "hp/core/tensor.h"

namespace hp::kernels {

enum class ReduceOp { sum, max, min };

// Normalized, sorted, unique dims (empty = all dims).
std::vector<int64_t> reduce_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
// Output shape of reducing `shape` over normalized dims.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim);
// Reduces a over dims into a new tensor of out_dtype.
Tensor reduce(ReduceOp op, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim,
              DType out_dtype);

}  // namespace hp::kernels
