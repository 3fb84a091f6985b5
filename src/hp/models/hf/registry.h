// Architecture registry: the one table of the architectures hp builds. A row gives the Hugging
// Face class (config.json architectures[0]), its model_type, the short name a training config
// uses as model.arch, the LayerFactory that builds its layers, whether model.arch + sizes can build
// it, what config.json holds for the family, and its tensor-parallel plan. Everything per
// architecture derives from it: config.json parsing and writing (models/hf/config.cpp), the model.arch
// choices and checks of a training config and the model built from sizes (train/config.cpp,
// train/setup.cpp), and the plan the parallelize step applies (models/tp_plan.h).
//
// Built in: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM, DeepseekV3ForCausalLM (also Kimi-K2, model_type deepseek_v3). To add an
// architecture, add a row to builtin_architectures() in registry.cpp, or register one at run time
// with register_architecture (before configs naming it are parsed; the registry is not
// thread-safe).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hp/models/hf/config.h"
#include "hp/models/tp_plan.h"
#include "hp/models/transformer.h"

namespace hp::models {

struct Architecture {
  std::string hf_class;    // config.json architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;  // config.json model_type, e.g. "qwen3"
  std::string short_name;  // model.arch in a training config, e.g. "qwen3"
  LayerFactory layers;     // attention and feed-forward per layer index
  // model.arch + the size fields build it; false when it needs a config.json (DeepSeek-V3: MLA).
  bool buildable_from_sizes = true;

  // What config.json holds for the family (models/hf/config.cpp):
  // the expert-count key written with the config ("num_experts", "num_local_experts",
  // "n_routed_experts"; any of them is read); "" = dense, else a config without experts is an
  // error.
  std::string experts_key;
  // head_dim when config.json omits it (0 = hidden_size / num_attention_heads; Qwen3: 128).
  int64_t default_head_dim = 0;
  // router_aux_loss_coef when config.json omits it (HF: 0.001 for Qwen3-MoE and Mixtral).
  double default_router_aux_loss_coef = 0.0;
  // Multi-head latent attention and grouped routing: their keys are written with the config.
  bool mla = false;
  // q/k/v always carry a bias whatever attention_bias says (Qwen2); a model built from sizes
  // records attention_bias true.
  bool qkv_bias = false;
  // Its tensor-parallel plan (models/tp_plan.h); null = tensor parallelism is not offered.
  TpPlanFn tp_plan = decoder_tp_plan;
  // One K = V head shared by every query head, replicated under TP (DeepSeek-V4): the tp degree
  // need not divide num_key_value_heads.
  bool shared_kv_head = false;
  // config.json carries intermediate_size (DeepSeek-V4 has only moe_intermediate_size).
  bool needs_intermediate_size = true;
  // Family keys beyond the common ones (DeepSeek-V4: layer_types, mHC, compressors): read after
  // them, and written as a JSON object text merged into config.json. Null: none.
  std::function<void(const io::Json&, ModelConfig&)> parse_extra;
  std::function<std::string(const ModelConfig&)> extra_json;
  // hp parameter FQN -> the tensor's name in the safetensors files, where they differ
  // (DeepSeek-V4 checkpoints keep the original names: attn.wq_a, ffn.experts.<e>.w1, ...).
  // Null: the same name. load_weights and save_pretrained apply it.
  std::function<std::string(const std::string&)> checkpoint_name;

  bool moe() const { return !experts_key.empty(); }
};

// Adds a row, or replaces the row of the same hf_class. Throws ValueError when a field is empty,
// the factory lacks attention or mlp, or another row already has the model_type or short_name.
void register_architecture(Architecture row);
// Every row, the built-ins first, then registered ones in order.
std::vector<Architecture> architectures();
// The row of an HF class / model_type / short name, or null.
const Architecture* find_architecture(const std::string& hf_class);
const Architecture* find_architecture_by_model_type(const std::string& model_type);
const Architecture* find_architecture_by_short_name(const std::string& short_name);
// As find_architecture / find_architecture_by_short_name; throws ValueError naming the known ones.
const Architecture& architecture(const std::string& hf_class);
const Architecture& architecture_by_short_name(const std::string& short_name);
// The short names model.arch accepts: the rows buildable from sizes, in table order.
std::vector<std::string> sized_architecture_names();

// Sliding-window attention of the Llama family (models/hf/sliding_window.cpp): config.json parsing
// and writing for Mistral (sliding_window on every layer) and Qwen2 / Qwen3 (use_sliding_window,
// sliding_window, max_window_layers or layer_types), and the window layer `layer` runs with (0:
// full causal attention).
void parse_mistral_sliding_window(const io::Json& j, ModelConfig& c);
void parse_qwen_sliding_window(const io::Json& j, ModelConfig& c);
std::string mistral_sliding_window_json(const ModelConfig& c);
std::string qwen_sliding_window_json(const ModelConfig& c);
int64_t layer_sliding_window(const ModelConfig& c, int64_t layer);

// The Llama / Qwen2 / Qwen3 layer factories (Qwen3-MoE reuses qwen3's attention).
LayerFactory llama_layers();
LayerFactory qwen2_layers();
LayerFactory qwen3_layers();
// HF layer rules. Qwen3-MoE: MoEBlock when the layer is not in mlp_only_layers and
// (layer + 1) % decoder_sparse_step == 0, else a dense MLP of intermediate_size. Mixtral: every
// layer sparse, registered as "block_sparse_moe", experts of intermediate_size. DeepSeek-V3: MLA
// attention; layers >= first_k_dense_replace sparse (sigmoid group routing, shared experts; HF's
// V3 ignores scoring_func / topk_method), earlier ones a dense MLP of intermediate_size.
LayerFactory qwen3_moe_layers();
LayerFactory mixtral_layers();
LayerFactory deepseek_v3_layers();
// DeepSeek-V4 (models/deepseek_v4.h): V4 attention per layer_types, hash / learned MoE per
// mlp_layer_types, mHC streams around every block.
LayerFactory deepseek_v4_layers();

// A randomly initialized model, as HF's _init_weights does (normal(0, initializer_range) for
// linear and embedding weights, zero biases, unit norms) from the default generator — seed it with
// hp::manual_seed for reproducible runs.
std::shared_ptr<CausalLM> build_model(const ModelConfig& config);
// config.json + safetensors weights of a HF model directory (weights converted to config.dtype, or
// to `dtype` when given).
std::shared_ptr<CausalLM> load_model(const std::string& dir);
std::shared_ptr<CausalLM> load_model(const std::string& dir, DType dtype);

}  // namespace hp::models
