// Small hand-filled model configs for the transform tests (low precision, recompute, bf16): no
// fixture files, sizes chosen per test.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/models/hf/config.h"

namespace hp::models::testing {

// A Llama / Qwen3 / Qwen3-MoE config ("llama", "qwen3", "qwen3_moe"): head_dim 16, two KV heads,
// untied head; qwen3_moe makes every layer sparse (4 experts, top-2) with the router loss on.
inline ModelConfig tiny_config(const std::string& type, int64_t hidden = 64, int64_t layers = 2,
                               int64_t vocab = 96) {
  ModelConfig c;
  c.model_type = type;
  c.architecture = type == "llama"   ? "LlamaForCausalLM"
                   : type == "qwen3" ? "Qwen3ForCausalLM"
                                     : "Qwen3MoeForCausalLM";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.head_dim = 16;
  c.num_attention_heads = hidden / c.head_dim;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 4096;
  if (type == "qwen3_moe") {
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = hidden;
    c.norm_topk_prob = true;
    c.output_router_logits = true;
    c.router_aux_loss_coef = 0.01;
  }
  return c;
}

// Token ids [b, t] (i64) in [0, vocab), reproducible from seed.
inline Tensor random_ids(int64_t b, int64_t t, int64_t vocab, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(0, vocab - 1);
  std::vector<int64_t> v(static_cast<size_t>(b * t));
  for (int64_t& x : v) x = d(rng);
  return from_data<int64_t>(v, {b, t});
}

}  // namespace hp::models::testing
