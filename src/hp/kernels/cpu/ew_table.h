// Function tables that each ISA translation unit fills with its instantiations of the elementwise
// functors (ew_ops.h) and the dtype converters; kernel_table<EwTable>() (registry.h) picks one.
#pragma once

#include <cstdint>

#include "hp/kernels/cpu/ew_ops.h"
#include "hp/kernels/registry.h"

namespace hp::kernels {

// out[0, n) = op(in[0][i], in[1][i]) over contiguous f32; any n; the result of element i does not
// depend on n or on where the range starts (tails go through the same vector code).
using EwF32Fn = void (*)(float* out, const float* const* in, int64_t n, const float* params);
// The same over contiguous bf16 or f16 (every operand and the result): each vector is widened,
// computed in f32 by the same functor and rounded to nearest even in registers — bitwise the f32
// kernel between the converters (bf16_to_f32 / f32_to_bf16, f16_to_f32 / f32_to_f16).
using EwHalfFn = void (*)(uint16_t* out, const uint16_t* const* in, int64_t n, const float* params);
using EwF64Fn = void (*)(double* out, const double* const* in, int64_t n, const float* params);

struct EwTable {
  EwF32Fn f32[kNumEwOps];
  EwHalfFn bf16[kNumEwOps];
  EwHalfFn f16[kNumEwOps];
  void (*bf16_to_f32)(const uint16_t* in, float* out, int64_t n);
  void (*f32_to_bf16)(const float* in, uint16_t* out, int64_t n);  // round to nearest even
  void (*f16_to_f32)(const uint16_t* in, float* out, int64_t n);
  void (*f32_to_f16)(const float* in, uint16_t* out, int64_t n);   // round to nearest even
  // Row reductions in a fixed order (4·W lane accumulators, then a fixed tree): the result
  // depends only on n and the data, never on the thread count.
  float (*sum_f32)(const float* x, int64_t n);
  float (*max_f32)(const float* x, int64_t n);  // NaN if any element is NaN; -Inf for n == 0
  float (*dot_f32)(const float* x, const float* y, int64_t n);
};

HP_KERNEL_FAMILY(EwTable);
// The f64 path: exact libm math, for gradient checks and f64 tensors.
const EwF64Fn* ew_table_f64();

}  // namespace hp::kernels
