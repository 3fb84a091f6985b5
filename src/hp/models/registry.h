// Architecture registry: config.json's architectures[0] → the layer factories that build it.
//
// Built in: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// MixtralForCausalLM, DeepseekV3ForCausalLM (also Kimi-K2, model_type deepseek_v3). To add an
// architecture, give it a LayerFactory — attention and feed-forward per layer index — either as a
// row of builtin_architectures() in registry.cpp (preferred: no static-initialization order
// issues) or at run time with register_architecture.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hp/models/config.h"
#include "hp/models/transformer.h"

namespace hp::models {

// Adds or replaces an architecture.
void register_architecture(const std::string& name, LayerFactory factory);
// Sorted names of every architecture build_model can build.
std::vector<std::string> registered_architectures();
// The factory for `name`; throws ValueError naming it and the known ones.
const LayerFactory& architecture(const std::string& name);

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

// A randomly initialized model, as HF's _init_weights does (normal(0, initializer_range) for
// linear and embedding weights, zero biases, unit norms) from the default generator — seed it with
// hp::manual_seed for reproducible runs.
std::shared_ptr<CausalLM> build_model(const ModelConfig& config);
// config.json + safetensors weights of a HF model directory (weights converted to config.dtype, or
// to `dtype` when given).
std::shared_ptr<CausalLM> load_model(const std::string& dir);
std::shared_ptr<CausalLM> load_model(const std::string& dir, DType dtype);

}  // namespace hp::models
