// `hp memory plan CONFIG`: what a run will hold per memory tier, before it runs (HyperOffload,
// docs/ARCHITECTURE.md §4c).
//
// Parameters, gradients and optimizer state come from the shapes: every decoder layer is built
// without drawing its weights (nn::SkipInitGuard), one at a time, and offload.params / grads /
// optimizer put their bytes on the device, host or disk tier (per rank: FSDP and TP divide them by
// dp_shard × cp × tp). Activations — with FSDP's gathered compute copies and the step's transient
// buffers, as the trainer's act_mem_bytes counts them — are measured, not modelled: the configured
// model at 2 and 3 layers runs the configured micro-batch (this rank's rows and sequence slice)
// and half of it through the trainer's own path (the parallelize step in a world of one:
// recompute, mixed precision, FSDP; forward + backward), and that figure is extrapolated linearly
// in layers to the configured depth and in tokens for the largest batch / seq_len that fits.
// Assumed: layers alike (a model whose layers differ is estimated from its first three),
// activations linear in tokens (flash attention saves no [T, T] scores), and the
// cp split dividing them by cp; tp's and ep's share of the activations is not modelled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hp/train/config.h"
#include "hp/train/memory_tiers.h"

namespace hp::train {

// memory.device_budget in bytes (0 = unset: unlimited).
int64_t device_budget_bytes(const Config& cfg);

// Builds the plan for `cfg` on the current world (collective: every rank measures on its own).
// With offload.activations_select largest | auto it chooses the blocks (train/activation_choice.h).
MemoryPlan plan_memory(const Config& cfg);

// With memory.device_budget set: throws MemoryError("[memory] ...") before training when the budget
// cannot hold the static device bytes plus one layer's step (MemoryPlan::minimum_device_bytes),
// the plan's table in the message. Collective, as plan_memory. Returns the plan (none without a
// budget), which build_run reuses for offload.activations_select largest | auto.
std::optional<MemoryPlan> check_device_budget(const Config& cfg);

}  // namespace hp::train
