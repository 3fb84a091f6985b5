// Parameter sets for the elementwise ops that take parameters (the op front-ends set them in real
// use), shared by the elementwise kernel tests.
#pragma once

#include <vector>

#include "hp/kernels/cpu/ew_ops.h"

namespace hp::test {

inline std::vector<std::vector<float>> param_sets(kernels::EwOp op) {
  switch (op) {
    case kernels::EwOp::affine:
      return {{1.5f, -0.25f}, {-3.0f, 1e-3f}};
    case kernels::EwOp::clamp:
    case kernels::EwOp::clamp_bwd:
      return {{-0.5f, 0.7f}, {0.0f, 6.0f}};
    case kernels::EwOp::pow_scalar:
    case kernels::EwOp::pow_scalar_bwd:
      return {{3, 1, 1}, {2, 1, 0}, {0.5f, 0, 0}, {-1.5f, 0, 0}, {-2, 1, 0}, {0, 1, 0}};
    default:
      return {{0, 0, 0}};
  }
}

}  // namespace hp::test
