// Backward of a fused region, as an IR graph compiled and cached like any other (vjp.cpp).
#pragma once

#include <string>
#include <vector>

#include "hp/fusion/ir.h"

namespace hp::fusion {

// Builds into *out the vector-Jacobian product of g. Its inputs: g's inputs (same argument
// numbers), then one gradient per output of g (that output's shape and dtype). Its outputs: for
// each input k with need[k], the summed adjoint contributions, in their broadcast shape (the caller
// reduces them to the input's shape); (*grad_of)[k] is that output's index, or -1 when no
// contribution reaches input k. The forward is replayed, not saved. False (with *why) when a node
// on a gradient path has no rule (opaque ops, the *_bwd helpers).
bool build_vjp(const Graph& g, const std::vector<uint8_t>& need, Graph* out,
               std::vector<int>* grad_of, std::string* why);

}  // namespace hp::fusion
