// Activation recompute: keep only a region's inputs, re-run it in backward.
#pragma once

#include <functional>
#include <vector>

#include "hp/core/tensor.h"

namespace hp::autograd {

using RegionFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs fn(inputs) without recording its internals. In backward, fn runs again on the saved inputs
// with the default generator's RNG state replayed (identical dropout masks), and gradients flow
// through the recomputed graph — to the inputs and to any parameters fn uses.
std::vector<Tensor> checkpoint(const RegionFn& fn, const std::vector<Tensor>& inputs);

}  // namespace hp::autograd
