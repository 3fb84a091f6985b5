// Tensor-parallel plans of the architectures (tp_plan.h).
#include "hp/models/tp_plan.h"

#include "hp/core/error.h"
#include "hp/models/hf/registry.h"
#include "hp/parallel/vocab_parallel.h"

namespace hp::models {

shard::ShardingPlan llama_tp_plan(const ModelConfig& c, bool sequence_parallel, bool mlp) {
  using namespace shard;
  const int64_t hd = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  // Activations [B, T, hidden]: under sequence parallelism the norms' side is Shard(1).
  const Placement region = sequence_parallel ? Placement{Shard{1}} : Placement{Replicate{}};
  // Each block enters the region once (one all-gather of T, or one f), and its column-parallel
  // projections take the entered input as it is: their gradients are summed before the one
  // reduce-scatter / all-reduce of the block's backward.
  auto enter = std::make_shared<PrepareModuleInput>(region);
  auto heads_col = std::make_shared<ColwiseParallel>(hd, std::nullopt);
  ShardingPlan plan{
      {"*self_attn", enter},
      {"*self_attn.q_proj", heads_col},
      {"*self_attn.k_proj", heads_col},
      {"*self_attn.v_proj", heads_col},
      {"*self_attn.o_proj", std::make_shared<RowwiseParallel>(hd, region)},
  };
  if (mlp) {
    auto col = std::make_shared<ColwiseParallel>(0, std::nullopt);
    plan.emplace_back("*mlp", enter);
    plan.emplace_back("*mlp.gate_proj", col);
    plan.emplace_back("*mlp.up_proj", col);
    plan.emplace_back("*mlp.down_proj", std::make_shared<RowwiseParallel>(0, region));
  }
  if (sequence_parallel) {
    auto sp = std::make_shared<SequenceParallel>();
    plan.emplace_back("*input_layernorm", sp);
    plan.emplace_back("*post_attention_layernorm", sp);
  }
  if (c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
    auto norm = std::make_shared<LocalNormParallel>();
    plan.emplace_back("*self_attn.q_norm", norm);
    plan.emplace_back("*self_attn.k_norm", norm);
  }
  return plan;
}

bool supports_sequence_parallel(const ModelConfig& c) {
  return c.num_experts == 0;
}

shard::ShardingPlan tp_plan(const ModelConfig& c, bool sequence_parallel) {
  const Architecture* a = find_architecture(c.architecture);
  if (!a || !a->tp_plan)
    HP_THROW(ValueError, "models", c.architecture,
             ": no tensor-parallel plan for this architecture (use parallel.tp: 1)");
  return a->tp_plan(c, sequence_parallel);
}

shard::ShardingPlan decoder_tp_plan(const ModelConfig& c, bool sequence_parallel) {
  using namespace shard;
  if (sequence_parallel && !supports_sequence_parallel(c))
    HP_THROW(ValueError, "models", c.architecture,
             ": sequence parallelism with experts is not supported (the router would see a slice "
             "of the sequence); set parallel.sequence_parallel: false");
  ShardingPlan plan = llama_tp_plan(c, sequence_parallel, /*mlp=*/c.num_experts == 0);
  add_vocab_parallel_ends(plan, c, sequence_parallel);
  return plan;
}

void add_vocab_parallel_ends(shard::ShardingPlan& plan, const ModelConfig& c,
                             bool sequence_parallel) {
  using namespace shard;
  const Placement region = sequence_parallel ? Placement{Shard{1}} : Placement{Replicate{}};
  plan.emplace_back("model.embed_tokens", std::make_shared<parallel::VocabParallelEmbedding>(region));
  if (sequence_parallel) plan.emplace_back("model.norm", std::make_shared<SequenceParallel>());
  if (c.tie_word_embeddings)
    plan.emplace_back("lm_head", std::make_shared<PrepareModuleInput>(region));
  else
    plan.emplace_back("lm_head", std::make_shared<ColwiseParallel>(0, region));
}

}  // namespace hp::models
