// offload.activations_select largest | auto (HyperOffload, docs/ARCHITECTURE.md §4c): which of the
// blocks the offload selection names leave the device tier, and how, so the memory plan's device
// total fits memory.device_budget.
//
// The plan measures the activations with none and with all of the selection swapped (act_none,
// act_all, at the configured micro-batch) and each block's saved bytes S_b. A choice is estimated
// as act_none − Σ savings + the window, the window being what the all-swapped run kept beyond
// act_none − Σ_all S_b (the regions fetched back, or recomputed, at a time in backward). A swapped
// block saves S_b; a recomputed one S_b less its input [rows, seq, hidden] in the compute dtype,
// which the region keeps.
//
// Blocks are taken largest S_b first (ties: model order) until the estimate plus a tenth of the
// activations fits. auto decides each one by cost:
//   recompute  its forward again: F_b / R (F_b: 2 FLOPs per parameter per token, plus causal
//              attention's 2 · rows · seq² · heads · head_dim; R: the GEMM rate,
//              metrics.peak_tflops or the measured peak of the compute dtype)
//   swap       2 · S_b / B (down and back up at the tier's measured bandwidth B), less what the
//              neighbouring block's backward (≈ 2 · F_b / R) hides: max(0, 2 S_b / B − 2 F_b / R)
// and recomputes when that is cheaper. MoE blocks count every expert's parameters (an upper bound).
#pragma once

#include <cstdint>
#include <string>

#include "hp/models/hf/config.h"
#include "hp/train/config.h"
#include "hp/train/memory_tiers.h"

namespace hp::train {

struct Layout;

// Forward FLOPs of the block `kind` of a layer ("" = the whole layer; "self_attn", "mlp", ...) at
// rows × seq tokens.
double block_forward_flops(const models::ModelConfig& c, const std::string& kind, int64_t rows,
                           int64_t seq);

// The rates auto weighs with: the GEMM rate in FLOP/s and the activation tier's bandwidth in
// bytes/s (host: a memcpy; disk: a write and read back through the disk tier's file).
double gemm_flops_per_s(const Config& cfg);
double tier_bytes_per_s(const Config& cfg, const Layout& layout);

// Sets the fates of p.activation_blocks (all kept on entry) and p.device.activations. by_cost:
// auto (p.gemm_flops_per_s, p.tier_bytes_per_s and each block's flops set); input_bytes: a
// recomputed block's kept input.
void choose_blocks(MemoryPlan& p, int64_t act_none, int64_t act_all, bool by_cost,
                   int64_t input_bytes);

}  // namespace hp::train
