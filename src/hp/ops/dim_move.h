// Raw (non-differentiable) views that move one dim to the end and back: ops that work on
// contiguous last-dim rows (softmax, max, topk) use them for every other dim.
#pragma once

#include "hp/core/tensor.h"
#include "hp/ops/checks.h"

namespace hp::detail {

// View of t with dim d moved to the last position (others keep their order).
inline Tensor dim_to_last(const Tensor& t, int64_t d) {
  Shape shape, strides;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != d) shape.push_back(t.shape()[i]), strides.push_back(t.strides()[i]);
  shape.push_back(t.shape()[d]);
  strides.push_back(t.strides()[d]);
  return t.as_strided(shape, strides, t.offset());
}

// Inverse of dim_to_last: view of t (whose last dim was dim d) with that dim back at d.
inline Tensor last_to_dim(const Tensor& t, int64_t d) {
  Shape shape(t.shape().begin(), t.shape().end() - 1),
      strides(t.strides().begin(), t.strides().end() - 1);
  shape.insert(shape.begin() + d, t.shape().back());
  strides.insert(strides.begin() + d, t.strides().back());
  return t.as_strided(shape, strides, t.offset());
}

}  // namespace hp::detail
