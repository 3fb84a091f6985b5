// Cutting a model into pipeline stages at layer boundaries (docs/ARCHITECTURE.md §4b).
#pragma once

#include <cstdint>
#include <vector>

namespace hp::pipeline {

// The contiguous cut of layers with costs `layer_costs` into `stages` stages of at least one layer
// each that minimizes the most expensive stage, the first stage also paying `first_extra` (the
// embedding) and the last `last_extra` (final norm, head and loss). Among equally good cuts the
// one with the earliest stages largest wins (deterministic). Returns layers per stage.
// Throws ValueError when there are fewer layers than stages.
std::vector<int64_t> balanced_cut(const std::vector<double>& layer_costs, double first_extra,
                                  double last_extra, int64_t stages);

// The layer range [begin, end) of each stage, from layers per stage.
std::vector<std::pair<int64_t, int64_t>> stage_ranges(const std::vector<int64_t>& layers_per_stage);

}  // namespace hp::pipeline
