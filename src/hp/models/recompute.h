// Activation recompute (docs/ARCHITECTURE.md §2 "recompute regions re-run their forward"): decoder
// layers, or blocks of them, become autograd::checkpoint regions that keep only their input
// [B, T, hidden] and run their forward again in backward.
//
// Regions are forward wrappers (nn::Module::add_forward_wrapper) added on top of any already
// installed, so they contain sharding redistributions and low-precision GEMMs of the module.
// Gradients equal those without recompute bit for bit: the recomputed forward runs the same ops in
// the same order, with the generator state replayed (dropout masks). A sparse feed-forward's router
// logits, which CausalLM::loss reads after the forward, leave the region as extra checkpoint
// outputs (FeedForward::side_outputs), so the load-balancing loss still reaches the router.
// With grad disabled a region is a plain call, so KV-cache decoding (generate runs without grad)
// is unaffected; a forward that extends a KV cache must not run with grad through recompute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/models/recompute_mode.h"
#include "hp/models/transformer.h"

namespace hp::models {

struct RecomputeSpec {
  // none | full (every decoder layer) | selective (see below).
  RecomputeMode mode = RecomputeMode::none;
  // selective: the layers i with i % every_k_layers == 0 (layers 0, k, 2k, ...), >= 1.
  int64_t every_k_layers = 1;
  // selective: globs (nn::glob_match) over a selected layer's block names — its children
  // "self_attn", "mlp" (Mixtral: "block_sparse_moe"), "input_layernorm",
  // "post_attention_layernorm"; each matching block becomes a region. Empty: the whole layer is one
  // region. Unused by full.
  std::vector<std::string> modules;
};

// A block a selection names: a decoder layer, or one of its children.
struct SelectedBlock {
  std::string fqn;
  nn::Module* module;
  // The feed-forward whose side outputs a region around the block must carry (the block itself,
  // or a layer's mlp); null for attention and norms. A raw pointer: it is the block or its child.
  FeedForward* side;
};

// The selection recompute and activation offload share: layers i with i % every_k_layers == 0
// (held by this rank: pipeline stages), each whole, or — with `modules` — their children whose
// names match a glob. Throws ValueError("[<component>] ...") for every_k_layers < 1 or a glob that
// matches no block of the selected layers (naming the blocks there are).
std::vector<SelectedBlock> select_blocks(CausalLM& model, int64_t every_k_layers,
                                        const std::vector<std::string>& modules,
                                        const char* component);

// Makes one selected block a recompute region (a forward wrapper on top of those installed).
void install_recompute(const SelectedBlock& block);

// Installs the regions on `model` (call once); returns the module FQNs wrapped, in model order
// ("model.layers.0", or "model.layers.0.mlp" for blocks). Throws ValueError ("[recompute] ...")
// for every_k_layers < 1, modules given without selective, or a modules glob that matches no block
// of the selected layers, before wrapping anything.
std::vector<std::string> apply_recompute(CausalLM& model, const RecomputeSpec& spec);

}  // namespace hp::models
