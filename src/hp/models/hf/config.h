// Hugging Face config.json → a typed ModelConfig (docs/ARCHITECTURE.md §1 "Models").
//
// One struct covers the decoder-only families hp builds: Llama, Qwen2, Qwen3 (dense) and the
// MoE / MLA fields of Qwen3-MoE, Mixtral and DeepSeek-V3 (read here, used by models/moe and
// models/mla); what differs per family (known classes and model_types, defaults, the expert-count
// key) is a row of the architecture table (models/hf/registry.h). Both the transformers v4 spelling
// (rope_theta + rope_scaling, torch_dtype) and the v5 one (rope_parameters, dtype) are accepted.
// Errors: "[config] <file>: <key>: <what>".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hp/core/dtype.h"
#include "hp/mx/fp8_blocks.h"

namespace hp::io {
class Json;
}

namespace hp::models {

// RoPE frequency scaling, as transformers' modeling_rope_utils computes inv_freq.
struct RopeScaling {
  // "default", "linear", "dynamic", "yarn" or "llama3".
  std::string type = "default";
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  // llama3 and yarn: the pre-training context length.
  int64_t original_max_position_embeddings = 0;
  // yarn: cos/sin scale (nullopt → derived from factor / mscale / mscale_all_dim), ramp bounds.
  std::optional<double> attention_factor;
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
};

struct ModelConfig {
  // Source file, for error messages.
  std::string file;
  // architectures[0] (e.g. "Qwen3ForCausalLM") and model_type ("qwen3").
  std::string architecture, model_type;

  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0;
  // Explicit in Qwen3 (may differ from hidden / heads); else hidden_size / num_attention_heads.
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0, initializer_range = 0.02;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // Bias on q/k/v (and o for Llama/Qwen3); Qwen2 always has q/k/v bias and never o bias.
  bool attention_bias = false, mlp_bias = false;
  std::string hidden_act = "silu";
  // Parameter dtype: torch_dtype / dtype ("float32", "bfloat16", "float16").
  DType dtype = DType::f32;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  // --- MoE (Qwen3-MoE: num_experts; Mixtral: num_local_experts; DeepSeek: n_routed_experts) ---
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  // Qwen3-MoE: every decoder_sparse_step-th layer is sparse, except those in mlp_only_layers.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // HF semantics: the load-balancing loss joins the training loss (CausalLM::loss) only when
  // output_router_logits is true, scaled by router_aux_loss_coef (HF default 0.001 for Qwen3-MoE /
  // Mixtral). DeepSeek-V3 has no router loss (its bias-based balancing is outside backprop).
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.0;
  // --- DeepSeek-V3 (MLA + shared experts + grouped routing) ---
  int64_t n_shared_experts = 0, kv_lora_rank = 0, q_lora_rank = 0;  // q_lora_rank 0 = none
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t n_group = 1, topk_group = 1, first_k_dense_replace = 0;
  double routed_scaling_factor = 1.0;
  // The router hp's DeepSeek-V3 layers compute (sigmoid scores, the correction bias selecting);
  // HF's V3 ignores these keys, so config.json's values are only carried to an export.
  std::string scoring_func = "sigmoid", topk_method = "noaux_tc";
  // MLA RoPE pairs (2i, 2i+1) (DeepSeek checkpoints) rather than rotate_half halves.
  bool rope_interleave = true;
  // DeepSeek-V3's next-token-prediction layers: model.layers.<num_hidden_layers + i>.* in the
  // weights. hp has no MTP module; load_weights skips them with one log line.
  int64_t num_nextn_predict_layers = 0;
  // quantization_config of an FP8 block-quantized checkpoint (quant_method "fp8", fmt "e4m3",
  // activation_scheme "dynamic"): its weight_block_size. load_weights dequantizes such weights to
  // the parameter dtype; the model itself (and model_config_to_json) is unquantized.
  std::optional<mx::Fp8BlockSize> fp8_blocks;
  // --- DeepSeek-V4 (models/deepseek_v4.h; parsed by parse_deepseek_v4_fields) ---
  // Per layer: "sliding_attention", "compressed_sparse_attention" or
  // "heavily_compressed_attention"; "hash_moe" or "moe". Empty for other families.
  std::vector<std::string> layer_types, mlp_layer_types;
  int64_t compress_rate_csa = 4, compress_rate_hca = 128;  // compress_rates
  double compress_rope_theta = 160000.0;
  RopeScaling compress_rope;  // rope_parameters.compress (yarn for the compressed branches)
  int64_t hc_mult = 0;        // mHC streams; 0 = plain residual (every other family)
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, swiglu_limit = 0.0;  // swiglu_limit 0 = no clamp
  int64_t sliding_window = 0;                // 0 = full causal attention
  int64_t o_groups = 1, o_lora_rank = 0;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;

  bool is_moe() const { return num_experts > 0; }
};

// The names of the size fields in error messages: config.json's by default; a training config
// passes its own (model.hidden, ...).
struct SizeKeys {
  std::string vocab = "vocab_size", hidden = "hidden_size", intermediate = "intermediate_size",
              layers = "num_hidden_layers", heads = "num_attention_heads",
              kv_heads = "num_key_value_heads", head_dim = "head_dim", experts = "num_experts",
              moe_intermediate = "moe_intermediate_size";
};
// The most decoder layers a config may have: far beyond the deepest transformers published (about
// a thousand layers), so only a mistaken count is refused.
constexpr int64_t kMaxLayers = int64_t(1) << 16;
// The size that makes a config's parameter count overflow int64, or a layer count above
// kMaxLayers (no model can have either).
struct SizeOverflow {
  std::string key;   // "" = the count fits
  std::string what;  // "<value> ... overflows int64 (...)"
};
// Checks the parameter count `c` implies (embeddings and head, each layer's attention and MLP or
// experts, times the layers) against int64, naming the largest size of the product that
// overflows, then the layer count against kMaxLayers. parse_model_config applies it; a model built
// from sizes should too.
SizeOverflow parameter_count_overflow(const ModelConfig& c, const SizeKeys& keys = {});

// A rope_parameters / rope_scaling object `r` (at `key`) as transformers reads it; sets
// c.rope_theta when `r` holds one.
RopeScaling parse_rope_parameters(const io::Json& r, const std::string& key, ModelConfig& c);

// Parses a config.json document (`j` root). Throws IoError "[config] <file>: <key>: ...".
ModelConfig parse_model_config(const io::Json& j);
// Reads <dir>/config.json (or a path to the json file itself).
ModelConfig read_model_config(const std::string& path);
// The config.json text for `c` (v4 spelling, which both transformers 4 and 5 read).
std::string model_config_to_json(const ModelConfig& c);

}  // namespace hp::models
