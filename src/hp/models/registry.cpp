#include "hp/models/registry.h"

#include <algorithm>
#include <map>

#include "hp/models/mla.h"
#include "hp/models/moe.h"
#include "hp/models/weights.h"

namespace hp::models {

LayerFactory llama_layers() {
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, false);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, c.mlp_bias);
          }};
}

LayerFactory qwen2_layers() {
  // Qwen2 always has q/k/v bias and never an o_proj or MLP bias.
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, true, false, false);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
          }};
}

LayerFactory qwen3_layers() {
  return {[](const ModelConfig& c, int64_t) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, true);
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
          }};
}

namespace {

void require_moe(const ModelConfig& c) {
  if (c.num_experts <= 0 || c.num_experts_per_tok <= 0 || c.moe_intermediate_size <= 0)
    HP_THROW(ValueError, "models", c.architecture, " needs num_experts (", c.num_experts,
             "), num_experts_per_tok (", c.num_experts_per_tok, ") and moe_intermediate_size (",
             c.moe_intermediate_size, ") > 0");
}

std::shared_ptr<FeedForward> moe_block(const ModelConfig& c, MoEOptions o) {
  o.dtype = c.dtype;
  o.init_std = c.initializer_range;
  return std::make_shared<MoEBlock>(o);
}

}  // namespace

LayerFactory qwen3_moe_layers() {
  LayerFactory f = qwen3_layers();
  f.mlp = [](const ModelConfig& c, int64_t layer) -> std::shared_ptr<FeedForward> {
    const auto& dense = c.mlp_only_layers;
    const bool sparse = std::find(dense.begin(), dense.end(), layer) == dense.end() &&
                        c.decoder_sparse_step > 0 && (layer + 1) % c.decoder_sparse_step == 0;
    if (!sparse) return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
    require_moe(c);
    return moe_block(c, MoEOptions::qwen3_moe(c.hidden_size, c.moe_intermediate_size, c.num_experts,
                                              c.num_experts_per_tok, c.norm_topk_prob));
  };
  return f;
}

LayerFactory mixtral_layers() {
  LayerFactory f;
  // MixtralAttention has no biases and no q/k norm.
  f.attention = [](const ModelConfig& c, int64_t) {
    return std::make_shared<Attention>(c, false, false, false);
  };
  f.mlp = [](const ModelConfig& c, int64_t) -> std::shared_ptr<FeedForward> {
    if (c.num_experts <= 0 || c.num_experts_per_tok <= 0)
      HP_THROW(ValueError, "models", "MixtralForCausalLM needs num_local_experts (", c.num_experts,
               ") and num_experts_per_tok (", c.num_experts_per_tok, ") > 0");
    return moe_block(c, MoEOptions::mixtral(c.hidden_size, c.intermediate_size, c.num_experts,
                                            c.num_experts_per_tok));
  };
  f.mlp_name = "block_sparse_moe";
  return f;
}

LayerFactory deepseek_v3_layers() {
  LayerFactory f;
  f.attention = [](const ModelConfig& c, int64_t) -> std::shared_ptr<AttentionBlock> {
    MLAOptions o;
    o.hidden_size = c.hidden_size;
    o.num_heads = c.num_attention_heads;
    o.q_lora_rank = c.q_lora_rank;
    o.kv_lora_rank = c.kv_lora_rank;
    o.qk_nope_head_dim = c.qk_nope_head_dim;
    o.qk_rope_head_dim = c.qk_rope_head_dim;
    o.v_head_dim = c.v_head_dim;
    o.attention_bias = c.attention_bias;
    o.rope_interleave = c.rope_interleave;
    o.dtype = c.dtype;
    o.init_std = c.initializer_range;
    // HF scales by mscale(factor, mscale_all_dim)² for any non-default rope type.
    const RopeScaling& r = c.rope_scaling;
    const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    o.softmax_scale = r.type == "default" ? mla_softmax_scale(qk)
                                          : mla_softmax_scale(qk, r.factor, r.mscale_all_dim);
    return std::make_shared<MLAttention>(o);
  };
  f.mlp = [](const ModelConfig& c, int64_t layer) -> std::shared_ptr<FeedForward> {
    if (layer < c.first_k_dense_replace)
      return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
    require_moe(c);
    return moe_block(
        c, MoEOptions::deepseek_v3(c.hidden_size, c.moe_intermediate_size, c.num_experts,
                                   c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
                                   c.routed_scaling_factor, c.n_shared_experts));
  };
  return f;
}

namespace {

std::map<std::string, LayerFactory> builtin_architectures() {
  return {
      {"LlamaForCausalLM", llama_layers()},     {"Qwen2ForCausalLM", qwen2_layers()},
      {"Qwen3ForCausalLM", qwen3_layers()},     {"Qwen3MoeForCausalLM", qwen3_moe_layers()},
      {"MixtralForCausalLM", mixtral_layers()}, {"DeepseekV3ForCausalLM", deepseek_v3_layers()},
  };
}

std::map<std::string, LayerFactory>& table() {
  static std::map<std::string, LayerFactory> t = builtin_architectures();
  return t;
}

}  // namespace

void register_architecture(const std::string& name, LayerFactory factory) {
  table()[name] = std::move(factory);
}

std::vector<std::string> registered_architectures() {
  std::vector<std::string> out;
  for (const auto& [name, f] : table()) out.push_back(name);
  return out;
}

const LayerFactory& architecture(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) {
    std::string known;
    for (const auto& n : registered_architectures()) known += (known.empty() ? "" : ", ") + n;
    HP_THROW(ValueError, "models", "architecture '", name, "' is not implemented (", known, ")");
  }
  return it->second;
}

std::shared_ptr<CausalLM> build_model(const ModelConfig& config) {
  return std::make_shared<CausalLM>(config, architecture(config.architecture));
}

std::shared_ptr<CausalLM> load_model(const std::string& dir) {
  return load_model(dir, read_model_config(dir).dtype);
}

std::shared_ptr<CausalLM> load_model(const std::string& dir, DType dtype) {
  ModelConfig c = read_model_config(dir);
  c.dtype = dtype;
  std::shared_ptr<CausalLM> m;
  {
    // Every parameter is overwritten by load_weights (which fails on any missing one).
    nn::SkipInitGuard skip;
    m = build_model(c);
  }
  load_weights(*m, dir);
  return m;
}

}  // namespace hp::models
