#include "hp/models/hf/registry.h"

#include <algorithm>
#include <deque>

#include "hp/models/deepseek_v4.h"
#include "hp/models/mla.h"
#include "hp/models/moe.h"
#include "hp/models/hf/weights.h"

namespace hp::models {

LayerFactory llama_layers() {
  return {[](const ModelConfig& c, int64_t layer) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, false,
                                               layer_sliding_window(c, layer));
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, c.mlp_bias);
          }};
}

LayerFactory qwen2_layers() {
  // Qwen2 always has q/k/v bias and never an o_proj or MLP bias.
  return {[](const ModelConfig& c, int64_t layer) {
            return std::make_shared<Attention>(c, true, false, false,
                                               layer_sliding_window(c, layer));
          },
          [](const ModelConfig& c, int64_t) {
            return std::make_shared<GatedMLP>(c, c.intermediate_size, false);
          }};
}

LayerFactory qwen3_layers() {
  return {[](const ModelConfig& c, int64_t layer) {
            return std::make_shared<Attention>(c, c.attention_bias, c.attention_bias, true,
                                               layer_sliding_window(c, layer));
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

LayerFactory deepseek_v4_layers() {
  LayerFactory f;
  f.attention = [](const ModelConfig& c, int64_t layer) -> std::shared_ptr<AttentionBlock> {
    return std::make_shared<DeepseekV4Attention>(c, layer);
  };
  f.mlp = [](const ModelConfig& c, int64_t layer) -> std::shared_ptr<FeedForward> {
    require_moe(c);
    return std::make_shared<DeepseekV4MoE>(c, c.mlp_layer_types.at(size_t(layer)) == "hash_moe");
  };
  return f;
}

namespace {

std::vector<Architecture> builtin_architectures() {
  auto row = [](std::string hf_class, std::string type, LayerFactory layers) {
    Architecture a;
    a.hf_class = std::move(hf_class);
    a.model_type = type;
    a.short_name = std::move(type);
    a.layers = std::move(layers);
    return a;
  };
  Architecture llama = row("LlamaForCausalLM", "llama", llama_layers());
  Architecture qwen2 = row("Qwen2ForCausalLM", "qwen2", qwen2_layers());
  qwen2.qkv_bias = true;
  qwen2.parse_extra = parse_qwen_sliding_window;
  qwen2.extra_json = qwen_sliding_window_json;
  Architecture qwen3 = row("Qwen3ForCausalLM", "qwen3", qwen3_layers());
  qwen3.default_head_dim = 128;  // Qwen3Config's default (Qwen3MoeConfig has none)
  qwen3.parse_extra = parse_qwen_sliding_window;
  qwen3.extra_json = qwen_sliding_window_json;
  // Mistral is Llama with a sliding window on every layer.
  Architecture mistral = row("MistralForCausalLM", "mistral", llama_layers());
  mistral.parse_extra = parse_mistral_sliding_window;
  mistral.extra_json = mistral_sliding_window_json;
  Architecture qwen3_moe = row("Qwen3MoeForCausalLM", "qwen3_moe", qwen3_moe_layers());
  qwen3_moe.experts_key = "num_experts";
  qwen3_moe.default_router_aux_loss_coef = 0.001;
  Architecture mixtral = row("MixtralForCausalLM", "mixtral", mixtral_layers());
  mixtral.experts_key = "num_local_experts";
  mixtral.default_router_aux_loss_coef = 0.001;
  Architecture deepseek_v3 = row("DeepseekV3ForCausalLM", "deepseek_v3", deepseek_v3_layers());
  deepseek_v3.experts_key = "n_routed_experts";
  deepseek_v3.mla = true;
  deepseek_v3.buildable_from_sizes = false;  // MLA's ranks and head sizes come from config.json
  deepseek_v3.tp_plan = nullptr;             // no plan for MLA attention yet
  Architecture deepseek_v4 = row("DeepseekV4ForCausalLM", "deepseek_v4", deepseek_v4_layers());
  deepseek_v4.experts_key = "n_routed_experts";
  deepseek_v4.tp_plan = deepseek_v4_tp_plan;
  deepseek_v4.shared_kv_head = true;
  deepseek_v4.needs_intermediate_size = false;
  deepseek_v4.parse_extra = parse_deepseek_v4_fields;
  deepseek_v4.extra_json = deepseek_v4_json;
  deepseek_v4.checkpoint_name = deepseek_v4_checkpoint_name;
  return {llama, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3, deepseek_v4, mistral};
}

// A deque: rows keep their addresses as rows are added.
std::deque<Architecture>& table() {
  static std::deque<Architecture> t = [] {
    std::deque<Architecture> d;
    for (auto& a : builtin_architectures()) d.push_back(std::move(a));
    return d;
  }();
  return t;
}

template <class Key>
const Architecture* find_by(const std::string& value, Key key) {
  for (const Architecture& a : table())
    if (a.*key == value) return &a;
  return nullptr;
}

std::string joined(std::string Architecture::*key) {
  std::string out;
  for (const Architecture& a : table()) out += (out.empty() ? "" : ", ") + a.*key;
  return out;
}

}  // namespace

void register_architecture(Architecture row) {
  const std::string& name = row.hf_class;
  if (row.hf_class.empty() || row.model_type.empty() || row.short_name.empty())
    HP_THROW(ValueError, "models", "register_architecture: hf_class ('", row.hf_class,
             "'), model_type ('", row.model_type, "') and short_name ('", row.short_name,
             "') must not be empty");
  if (!row.layers.attention || !row.layers.mlp)
    HP_THROW(ValueError, "models", "register_architecture(", name,
             "): the LayerFactory needs both attention and mlp");
  for (const Architecture& a : table()) {
    if (a.hf_class == name) continue;
    if (a.model_type == row.model_type)
      HP_THROW(ValueError, "models", "register_architecture(", name, "): model_type '",
               row.model_type, "' is already ", a.hf_class, "'s");
    if (a.short_name == row.short_name)
      HP_THROW(ValueError, "models", "register_architecture(", name, "): short name '",
               row.short_name, "' is already ", a.hf_class, "'s");
  }
  for (Architecture& a : table())
    if (a.hf_class == name) {
      a = std::move(row);
      return;
    }
  table().push_back(std::move(row));
}

std::vector<Architecture> architectures() {
  return {table().begin(), table().end()};
}

const Architecture* find_architecture(const std::string& hf_class) {
  return find_by(hf_class, &Architecture::hf_class);
}

const Architecture* find_architecture_by_model_type(const std::string& model_type) {
  return find_by(model_type, &Architecture::model_type);
}

const Architecture* find_architecture_by_short_name(const std::string& short_name) {
  return find_by(short_name, &Architecture::short_name);
}

const Architecture& architecture(const std::string& hf_class) {
  if (const Architecture* a = find_architecture(hf_class)) return *a;
  HP_THROW(ValueError, "models", "architecture '", hf_class, "' is not implemented (",
           joined(&Architecture::hf_class), ")");
}

const Architecture& architecture_by_short_name(const std::string& short_name) {
  if (const Architecture* a = find_architecture_by_short_name(short_name)) return *a;
  HP_THROW(ValueError, "models", "architecture short name '", short_name, "' is unknown (",
           joined(&Architecture::short_name), ")");
}

std::vector<std::string> sized_architecture_names() {
  std::vector<std::string> out;
  for (const Architecture& a : table())
    if (a.buildable_from_sizes) out.push_back(a.short_name);
  return out;
}

std::shared_ptr<CausalLM> build_model(const ModelConfig& config) {
  return std::make_shared<CausalLM>(config, architecture(config.architecture).layers);
}

std::shared_ptr<CausalLM> load_model(const std::string& dir) {
  return load_model(dir, read_model_config(dir).dtype);
}

std::shared_ptr<CausalLM> load_model(const std::string& dir, DType dtype) {
  ModelConfig c = read_model_config(dir);
  c.dtype = dtype;
  // The config's sizes against the weights' headers first: a wrong num_hidden_layers or hidden
  // size fails here, naming the key, instead of building (allocating) a model of that size.
  check_config_against_weights(c, dir);
  const Architecture& arch = architecture(c.architecture);
  std::shared_ptr<CausalLM> m;
  {
    // Every parameter is overwritten by load_weights (which fails on any missing one).
    nn::SkipInitGuard skip;
    m = build_model(c);
  }
  load_weights(*m, dir, &c, arch.checkpoint_name);
  return m;
}

}  // namespace hp::models
