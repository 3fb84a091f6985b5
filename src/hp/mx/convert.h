// Low precision by config: switch the linear layers and MoE expert sets of a module tree to MXFP8
// GEMMs (docs/ARCHITECTURE.md §4 "MXFP8") without touching their parameters.
//
// A converted nn::Linear keeps its weight and bias tensors and gets mx_linear as its GEMM kernel
// (nn::Linear::set_kernel): optimizers, checkpoints and sharding plans see the same parameter
// objects, and tensor-parallel wrappers (shard/plan.h) keep redistributing around the GEMM in
// either order of application. A converted expert set (an nn::GroupedExperts module such as
// models::MoEBlock) runs its gate / up / down projections through mx_grouped_experts.
#pragma once

#include <string>
#include <vector>

#include "hp/mx/format.h"
#include "hp/nn/module.h"

namespace hp::mx {

struct ConvertSpec {
  QuantSpec quant;
  // Module FQN globs (nn::glob_match: '*' spans dots, '?' one character) of what to convert.
  std::vector<std::string> modules = {"*"};
  // Globs removed from what `modules` selected.
  std::vector<std::string> exclude;
};

// Makes every nn::Linear whose FQN (relative to root, e.g. "model.layers.0.mlp.up_proj") matches a
// `modules` glob and no `exclude` glob run mx_linear, and every expert set whose block FQN
// ("model.layers.N.mlp") or experts FQN ("model.layers.N.mlp.experts") matches run its expert GEMMs
// through mx_grouped_experts. The Linears inside an expert set are never called (the block reads
// their weights), so they are not converted one by one. Returns the converted FQNs in model order
// (an expert set as "<block>.experts"). Throws ValueError ("[mx] ...") naming a `modules` glob that
// matches no Linear or expert set, before changing anything.
std::vector<std::string> convert_to_mx(nn::Module& root, const ConvertSpec& spec);

}  // namespace hp::mx
