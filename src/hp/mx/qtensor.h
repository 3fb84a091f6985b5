// Internal to mx/linear*.cpp: a quantized matrix held as u8 tensors (so the saved-tensor hooks can
// move it) and the small checks the autograd wrappers share.
#pragma once

#include <initializer_list>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/tensor.h"
#include "hp/mx/gemm.h"

namespace hp::mx::detail {

inline int64_t nblk(int64_t n) {
  return (n + kBlockSize - 1) / kBlockSize;
}

// Codes and scales of one quantized matrix (layout given by whoever fills them).
struct QTensor {
  Tensor codes, scales;  // u8 [code_count], u8 [scale_count]
  uint8_t* c() const { return codes.data<uint8_t>(); }
  uint8_t* s() const { return scales.data<uint8_t>(); }
  MxOperand op(ElemFormat elem, MxLayout layout) const { return {c(), s(), elem, layout}; }
};

inline QTensor alloc_q(int64_t code_count, int64_t scale_count) {
  return {empty({code_count}, DType::u8), empty({scale_count}, DType::u8)};
}

inline void check_float(const char* fn, const char* name, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    HP_THROW(ValueError, "mx", fn, ": ", name, " must be f32 or bf16, got ", t.desc());
}

inline std::vector<Tensor> defined_only(std::initializer_list<Tensor> ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts)
    if (t.defined()) out.push_back(t);
  return out;
}

}  // namespace hp::mx::detail
