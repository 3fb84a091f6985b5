// Gradient utilities for the trainer loop: global-norm clipping, local and across shards.
#pragma once

#include <cstdint>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"

namespace hp::optim {

// The L2 norm over every defined .grad of `params` (computed in double: fixed blocks per tensor,
// combined in parameter order, so it is the same for any thread count). When the norm exceeds
// max_norm (> 0), every grad is scaled by max_norm / (norm + 1e-6), as torch's
// clip_grad_norm_. Returns the norm before clipping; a non-finite norm scales nothing, so the
// caller can detect it and skip the step. max_norm <= 0 only measures.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// clip_grad_norm of a model split across the ranks of `comm` (FSDP): `sharded` are this rank's
// dim-0 shards (every element of the model on exactly one rank; empty shards allowed),
// `replicated` parameters whose gradients are the same on every rank, counted once. Each rank's
// sum of squares (double) is all-gathered and added in rank order, so every rank gets the same
// norm and clips alike; it equals the unsharded norm up to the association of the double sums
// (relative error ~1e-15). Collective over comm.
double clip_grad_norm(const std::vector<Tensor>& sharded, const std::vector<Tensor>& replicated,
                      double max_norm, dist::Communicator& comm);

// The factor clip_grad_norm scales the gradients by: max_norm / (norm + 1e-6) when max_norm > 0
// and the norm is finite and above it, else 1. Optimizer::step takes it as its grad_scale, so a
// trainer clips inside the update pass instead of rewriting every gradient first.
double clip_factor(double norm, double max_norm);

// The norm the sharded clip_grad_norm measures, without scaling anything (collective over comm).
double global_grad_norm(const std::vector<Tensor>& sharded, const std::vector<Tensor>& replicated,
                        dist::Communicator& comm);

}  // namespace hp::optim
