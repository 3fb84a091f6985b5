// Context parallelism as the parallelize step installs it into a CausalLM: the split of every
// sequence over `degree` ranks (ContextSplit, models/transformer.h), so the model's code carries no
// context-parallel branch. Of every row of L tokens a rank holds the zigzag spans
// parallel::context_spans(L, degree, index) (parallel/context_parallel.h), concatenated.
#pragma once

#include <functional>
#include <vector>

#include "hp/models/transformer.h"

namespace hp::models {

// Causal attention over the whole rows from this rank's spans: q [B, Hq, T, D], k, v
// [B, Hkv, T, D], softmax scale, the whole rows' document ids (i32 [B, T · degree], or undefined)
// → [B, Hq, T, D] (parallel::context_attention bound to the cp communicator).
using SpanAttention = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                           double scale, const Tensor& segments)>;
// Adds a vector over the cp ranks (no gradient).
using RankSum = std::function<std::vector<double>(const std::vector<double>&)>;

// The split of rank `index` of `degree`. Its loss: positions [0, T − 1) of the rows ids [B, T]
// predict ids [1, T); this rank runs its spans of both and returns Σ its token losses / all
// targets of the rows (plus its shares of the aux losses), so the ranks' shares sum to the mean
// and their gradients, summed by FSDP over dp_shard × cp, to its gradient. T − 1 must divide by
// 2 · degree. Attention under the split is causal over whole rows (training): sliding windows and
// incremental decoding throw ValueError.
ContextSplit context_parallel_split(int64_t degree, int64_t index, SpanAttention attention,
                                    RankSum sum);

}  // namespace hp::models
