// Step 0 of the parallelize step (parallelize.h): the model cut into pipeline stages at layer
// boundaries (pipeline_step.h describes the stages and how a step runs through them).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hp/train/config.h"
#include "hp/train/layout.h"
#include "hp/train/parallelize.h"

namespace hp::models {
class CausalLM;
}

namespace hp::train {

// The estimated forward FLOPs per token of each decoder layer, and of what the first (embedding)
// and last (final norm, head, cross-entropy) stage add: the balanced cut's costs.
struct StageCosts {
  std::vector<double> layers;
  double first = 0, last = 0;
};
StageCosts stage_costs(const models::CausalLM& model, int64_t seq_len);

// Step 0 of parallelize: decides the cut (layers per stage, all stages) and drops every module of
// the stages other ranks run from `model`; sets out->layers_per_stage, adds the dropped parameters'
// FQNs to out->held_elsewhere and, for tied embeddings split over two ranks, out->tied (the
// embedding group). Throws ValueError naming parallel.pipeline.layers_per_stage for a cut that does
// not fit the model.
void apply_pipeline(models::CausalLM& model, const Layout& l, const Config& cfg, Parallelized* out);

}  // namespace hp::train
