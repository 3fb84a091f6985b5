// Autoregressive generation with a per-layer cache (KVCache; an attention block keeps its K/V and,
// in LayerCache::state, whatever else it needs: DeepSeek-V4's sliding window and compressor
// state): the prompt in one causal forward, then one token per step (for the Llama family
// attending over the whole cache, causal=false: a single query may see every cached key, which
// sidesteps the flash kernel's top-left causal alignment).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hp/models/transformer.h"

namespace hp::models {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  // Greedy (argmax) when true, else temperature + nucleus (top-p) sampling.
  bool greedy = true;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 0;
  // Generation stops after any of these (e.g. the config's eos_token_id).
  std::vector<int64_t> stop_ids;
  // Decode with a KV cache (one token per step). false re-runs the whole sequence each step
  // through CausalLM::forward — what a model split by tensor / sequence parallelism needs, since
  // its forward gathers the vocabulary and its sequence shards need the whole sequence.
  bool kv_cache = true;
};

// Next-token id from logits [V] (f32 values): argmax, or a sample by temperature / top-p using
// `uniform` ∈ [0, 1). Exposed for tests.
int64_t pick_token(const std::vector<float>& logits, const GenerateOptions& opt, double uniform);

// The new tokens (not the prompt) for `prompt` ids; inference only (no tape).
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& opt);

// The logits [V] (f32 values) of the token after ids [1, T], the model run over the whole sequence.
using SequenceLogits = std::function<std::vector<float>(const Tensor& ids)>;
// generate() for a model this rank does not hold whole (pipeline stages: train/pipeline_step.h);
// always without a cache (opt.kv_cache is ignored). Every rank that calls it must get the same
// logits: the tokens are then the same on each.
std::vector<int64_t> generate(const SequenceLogits& logits, int64_t vocab,
                              const std::vector<int64_t>& prompt, const GenerateOptions& opt);

}  // namespace hp::models
