// What a run holds per memory tier (HyperOffload, docs/ARCHITECTURE.md §4c): the memory plan's
// figures (memory_plan.h builds them; activation_choice.h picks the activation blocks that leave
// the device tier).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  OffloadTier activation_tier = OffloadTier::none;             // offload.activations
  ActivationSelect activation_select = ActivationSelect::all;  // offload.activations_select
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
  // The table `hp memory plan` prints.
  std::string to_text() const;
};

}  // namespace hp::train
