// The backward engine.
//
// Runs the graph reachable from the roots once, each node after all gradients for it have arrived
// (dependency counting), ready nodes in decreasing creation order — a fixed order, so gradients are
// bitwise reproducible. Node bodies run with grad mode off; kernels inside them are multithreaded.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::autograd {

// Accumulates d(roots)/d(leaf) into every reachable leaf's .grad. `grads[i]` seeds roots[i]
// (may be undefined for a one-element root: seeded with 1). Without retain_graph the nodes drop
// their saved tensors, and a second backward through them throws.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// --- hooks for runtimes that act on gradients as backward produces them (FSDP) ---

// Runs after a backward has added a gradient into `leaf`.grad (once per backward that reaches the
// leaf's accumulator, nested recompute backwards included), with grad mode off. FSDP
// reduce-scatters a parameter group once every member's hook has run. The registration keeps the
// leaf alive until removed. Returns the id for remove_post_accumulate_grad_hook.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
void remove_post_accumulate_grad_hook(uint64_t id);

// Runs fn once the outermost backward running on this thread has finished every node (nested
// backwards, e.g. recompute, included); callbacks may queue more. Throws ValueError outside a
// backward. Dropped if that backward throws. FSDP finishes groups not every member of which got a
// gradient this way.
void queue_callback(std::function<void()> fn);

}  // namespace hp::autograd
