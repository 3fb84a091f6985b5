// The backward engine.
//
// Runs the graph reachable from the roots once, each node after all gradients for it have arrived
// (dependency counting), ready nodes in decreasing creation order — a fixed order, so gradients are
// bitwise reproducible. Node bodies run with grad mode off; kernels inside them are multithreaded.
#pragma once

#include <vector>

#include "hp/core/tensor.h"

namespace hp::autograd {

// Accumulates d(roots)/d(leaf) into every reachable leaf's .grad. `grads[i]` seeds roots[i]
// (may be undefined for a one-element root: seeded with 1). Without retain_graph the nodes drop
// their saved tensors, and a second backward through them throws.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

}  // namespace hp::autograd
