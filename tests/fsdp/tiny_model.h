// A tiny Qwen3 and its loss, shared by the FSDP tests (tests/fsdp and tests/dist/fsdp_mpitest).
#pragma once

#include <memory>
#include <vector>

#include "hp/autograd/checkpoint.h"
#include "hp/core/random.h"
#include "hp/models/hf/registry.h"
#include "hp/ops/ops.h"

namespace hp::fsdp::testing {

// Dims chosen so dim 0 of most parameters does not divide by 3 or 4 (uneven shards): vocab 37,
// hidden 10, q 16 rows, k/v 8, intermediate 14, head_dim 4 (q_norm [4]: an empty shard at 3 ranks).
inline models::ModelConfig tiny_qwen3(DType dt = DType::f32) {
  models::ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 37;
  c.hidden_size = 10;
  c.intermediate_size = 14;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.initializer_range = 0.2;
  c.dtype = dt;
  return c;
}

inline std::shared_ptr<models::CausalLM> tiny_model(uint64_t seed, DType dt = DType::f32) {
  manual_seed(seed);
  return models::build_model(tiny_qwen3(dt));
}

// ids [rows, t] (i64), a fixed pseudo-random function of (seed, row, position).
inline Tensor token_batch(uint64_t seed, int64_t rows, int64_t t, int64_t vocab, int64_t row0 = 0) {
  std::vector<int64_t> v;
  for (int64_t r = row0; r < row0 + rows; ++r)
    for (int64_t i = 0; i < t; ++i) {
      uint64_t x = (seed * 1000003u + static_cast<uint64_t>(r) * 7919u + static_cast<uint64_t>(i)) *
                   0x9E3779B97F4A7C15ull;
      v.push_back(static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab)));
    }
  return from_data<int64_t>(v, {rows, t});
}

// Sum of next-token cross-entropies of ids [B, T], times `scale` (1 / global tokens): the
// data-parallel loss whose per-rank terms add up to the global mean.
inline Tensor scaled_sum_loss(models::CausalLM& m, const Tensor& ids, double scale) {
  const int64_t b = ids.size(0), t = ids.size(1);
  Tensor logits = m.forward(ids);  // [B, T, V]
  Tensor shifted = reshape(narrow(logits, 1, 0, t - 1), {b * (t - 1), logits.size(2)});
  Tensor targets = reshape(narrow(ids, 1, 1, t - 1), {b * (t - 1)});
  return mul(cross_entropy(shifted, targets, -100, "sum"), scale);
}

// Recompute (activation checkpointing) of every decoder layer, through its forward wrapper.
inline void add_recompute(models::CausalLM& m) {
  for (auto& layer : m.model->layers)
    layer->add_forward_wrapper([](const Tensor& x, const nn::Module::ForwardFn& inner) {
      return autograd::checkpoint(
          [inner](const std::vector<Tensor>& in) { return std::vector<Tensor>{inner(in[0])}; },
          {x})[0];
    });
}

}  // namespace hp::fsdp::testing
