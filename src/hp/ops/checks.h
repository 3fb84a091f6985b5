// Input checks shared by the op front-end.
#pragma once

#include "hp/core/tensor.h"

namespace hp::detail {

// Throws ValueError unless t is a defined tensor of a compute dtype (f64, f32, bf16, f16).
inline void check_float_tensor(const Tensor& t, const char* op, const char* what = "input") {
  if (!t.defined()) HP_THROW(ValueError, op, "undefined ", what);
  const DType dt = t.dtype();
  if (dt != DType::f64 && dt != DType::f32 && dt != DType::bf16 && dt != DType::f16)
    HP_THROW(ValueError, op, "expects an f64/f32/bf16/f16 ", what, ", got ", t.desc());
}

}  // namespace hp::detail
