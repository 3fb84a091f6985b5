// Stencils: hot patterns recognised in a traced graph and run by the hand-written kernel of the
// pattern instead of the generic passes (docs/FUSION.md "Stencils", issue 18).
//
// The matcher is structural: a graph matches when its live nodes are exactly the pattern's (any
// operand order of a commutative op; the dtypes the hand kernel computes in), so a stencil's
// result is the hand kernel's, forward and backward (its own autograd node, which saves the
// per-row statistics instead of recomputing them): a different association than the traced
// graph (Σx²/n against Σx²·(1/n), the kernel's summation tree), within the ULP bounds of
// tests/fusion, bitwise equal to the eager hand op and independent of the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "hp/fusion/ir.h"

namespace hp::fusion {

enum class StencilKind : uint8_t {
  none,
  // y = cast((x · rsqrt(mean(x²) + eps)) · w, x.dtype) with x = cast(x_in, f32): hp::rms_norm.
  rms_norm,
  // h = a + b; y = rms_norm(h, w, eps) as above (outputs h, y): hp::add then hp::rms_norm.
  add_rms_norm,
  // e = exp(x - amax(x)); y = cast(e / sum(e) or e · reciprocal(sum(e)), x.dtype), x as for
  // rms_norm: hp::softmax(x_in, -1).
  softmax,
};

struct Stencil {
  StencilKind kind = StencilKind::none;
  // argument numbers: rms_norm (x, w); add_rms_norm (a, b, w); softmax (x)
  int16_t in[3] = {-1, -1, -1};
  float eps = 0;
};

// The stencil g is an instance of, or kind none.
Stencil match_stencil(const Graph& g);

// Runs the stencil on the region's arguments (not detached: the hand ops record their own
// autograd nodes when grad mode is on and an argument requires grad).
std::vector<Tensor> run_stencil(const Stencil& s, const std::vector<Tensor>& inputs);

const char* stencil_name(StencilKind k);

}  // namespace hp::fusion
