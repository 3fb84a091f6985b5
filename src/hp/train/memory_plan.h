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

#include "hp/core/allocator.h"
#include "hp/train/config.h"

namespace hp::train {

struct MemoryPlan {
  int64_t parameters = 0;  // of the whole model
  int64_t shard_ranks = 1;  // FSDP divides masters, gradients and state by this
  // Bytes per rank on each tier (device, host, disk) by what they hold.
  struct Tier {
    int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
    int64_t total() const { return params + grads + optimizer + activations; }
  };
  Tier device, host, disk;
  int64_t largest_layer_params = 0;
  // Activations of one micro-batch: base + per_layer · layers, each a + b · tokens.
  double act_base = 0, act_base_per_token = 0, act_layer = 0, act_layer_per_token = 0;
  int64_t layers = 0, micro_rows = 1, seq_len = 0;
  // The measurements: act_measured[l][t] at measured_layers[l] layers, measured_tokens[t] tokens.
  int64_t measured_layers[2] = {}, measured_tokens[2] = {}, act_measured[2][2] = {};
  int64_t budget = 0;  // memory.device_budget (0 = unlimited)
  // Activation offload (offload.activations host | disk): each block the selection names, in model
  // order, with the bytes its saved tensors hold per micro-batch (measured at the configured
  // micro-batch; layers alike), and its fate — every one swapped (activations_select all), or the
  // largest first until the device total fits the budget with a tenth of the activations to spare,
  // swapped (largest) or swapped / recomputed by cost (auto: train/activation_choice.h). The
  // swapped bytes are the host or disk tier's activations.
  enum class Fate { kept, swapped, recomputed };
  struct Block {
    std::string fqn;
    int64_t bytes = 0;
    Fate fate = Fate::kept;
    double flops = 0;                    // its forward per micro-batch (auto)
    double recompute_s = 0, swap_s = 0;  // auto: the costs compared
  };
  std::vector<Block> activation_blocks;
  std::string activation_tier, activation_select;  // offload.activations / _select
  double gemm_flops_per_s = 0, tier_bytes_per_s = 0;  // auto: the rates behind the costs
  std::vector<std::string> offloaded_blocks() const;   // swapped
  std::vector<std::string> recomputed_blocks() const;

  int64_t activations_for(int64_t rows, int64_t seq) const;
  bool fits() const { return budget == 0 || device.total() <= budget; }
  // The largest micro-batch rows at seq_len, and seq_len at micro_rows, that fit the budget
  // (0: none; -1: unlimited budget).
  int64_t max_rows() const;
  int64_t max_seq_len() const;
  // The smallest device tier a step can run in: static device bytes + one layer's activations.
  int64_t minimum_device_bytes() const;
  std::string to_text() const;
};

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
