// Tensor-parallel plans of the architectures: which modules split how (shard/plan.h styles), so
// parallelism is declared here, per architecture, and never written into model code.
#pragma once

#include "hp/models/hf/config.h"
#include "hp/shard/plan.h"

namespace hp::models {

// Tensor parallelism for every Llama / Qwen2 / Qwen3 decoder layer (models/transformer.h):
// self_attn and mlp enter the tensor-parallel region once (PrepareModuleInput), q/k/v/gate/up
// colwise on that input, o/down rowwise; attention split by whole heads (num_attention_heads and
// num_key_value_heads must divide by the degree), the MLP by the torch.chunk rule; Qwen3's q_norm /
// k_norm (model_type "qwen3" / "qwen3_moe") as LocalNormParallel. Patterns start with `*`, so the
// plan applies to a CausalLM, a DecoderModel or a single DecoderLayer. With `mlp` false the
// feed-forward blocks are left out (they stay replicated: MoE experts).
// sequence_parallel (Megatron-SP): the decoder layers' input and output, the residual stream and
// input_layernorm / post_attention_layernorm (SequenceParallel) are this rank's Shard(1) rows of
// [B, T, hidden] (torch.chunk split of T); self_attn / mlp take input layout Shard(1) (one
// all-gather of T each), o/down give output layout Shard(1) (reduce-scatter, not all-reduce).
shard::ShardingPlan llama_tp_plan(const ModelConfig& c, bool sequence_parallel = false,
                                  bool mlp = true);

// The plan of a whole Llama-family CausalLM (the registry's default): its layers' plan plus the
// vocabulary-parallel ends — the
// embedding's rows split over the vocabulary (VocabParallelEmbedding, whose reduction is the
// sequence-parallel scatter under SP), the final norm as SequenceParallel under SP, and the head
// producing this rank's vocabulary columns (ColwiseParallel, or PrepareModuleInput for a head tied
// to the embedding, whose weight is already split). The loss then runs on the local columns
// (parallel::vocab_parallel_cross_entropy, installed by the parallelize step). MoE architectures keep
// their experts replicated (attention-only TP) and do not take sequence parallelism: their
// routers would see only a slice of the sequence. Throws ValueError("[models] ...") for SP with
// experts.
shard::ShardingPlan decoder_tp_plan(const ModelConfig& c, bool sequence_parallel);
using TpPlanFn = shard::ShardingPlan (*)(const ModelConfig& c, bool sequence_parallel);
// decoder_tp_plan's vocabulary-parallel ends (embedding, final norm under SP, head), appended.
void add_vocab_parallel_ends(shard::ShardingPlan& plan, const ModelConfig& c,
                             bool sequence_parallel);

// DeepSeek-V4 (models/deepseek_v4_tp.cpp): attention split by query heads (q_b_proj colwise,
// sinks and the grouped output projection o_a / o_b by whole o_groups, so tp must divide
// num_attention_heads and o_groups); the shared K = V head, q_a and the compressors replicated,
// their outputs entering the region so their gradients are summed; experts replicated; the
// vocabulary-parallel ends. No sequence parallelism (experts).
shard::ShardingPlan deepseek_v4_tp_plan(const ModelConfig& c, bool sequence_parallel);

// The plan of c's architecture from the registry (models/hf/registry.h); throws ValueError naming
// the architecture when it has none (DeepSeek-V3's MLA attention).
shard::ShardingPlan tp_plan(const ModelConfig& c, bool sequence_parallel);
// Whether tp_plan accepts sequence parallelism for this architecture.
bool supports_sequence_parallel(const ModelConfig& c);

}  // namespace hp::models
