// DeepSeek-V2/V3 multi-head latent attention (transformers' DeepseekV3Attention), with HF FQNs:
// q_proj (q_lora_rank = 0) or q_a_proj → q_a_layernorm → q_b_proj; kv_a_proj_with_mqa →
// [compressed kv (kv_lora_rank) | k_pe (qk_rope_head_dim)]; kv_a_layernorm; kv_b_proj → per head
// [k_nope (qk_nope_head_dim) | v (v_head_dim)]; o_proj. RoPE touches only the rope parts; k_pe is
// one head shared by all heads. Causal self-attention; as a decoder layer's AttentionBlock it also
// decodes with a KV cache, which holds the per-head (padded) K and V, not the compressed latent —
// simple and exact, but nh·2·d floats per token instead of kv_lora_rank + qk_rope_head_dim.
//
// RoPE layout: with rope_interleave (DeepSeek checkpoints) pairs are (2i, 2i+1), as HF's
// apply_rotary_pos_emb_interleave; HF also de-interleaves the rotated q/k parts into halves, a
// permutation applied to both q and k that leaves q·k unchanged, so it is not reproduced here.
// Attention: the flash kernel needs equal head dims for q/k and v, so the shorter of
// (qk_nope + qk_rope, v_head_dim) is zero-padded (zeros add nothing to q·k, and padded v columns
// are dropped from the output).
#pragma once

#include <memory>

#include "hp/core/tensor.h"
#include "hp/models/transformer.h"
#include "hp/nn/module.h"

namespace hp::models {

struct MLAOptions {
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: plain q_proj (HF q_lora_rank null)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool attention_bias = false;  // bias on q_a_proj, kv_a_proj_with_mqa, o_proj
  bool rope_interleave = true;
  double rms_norm_eps = 1e-6;  // q_a_layernorm / kv_a_layernorm (HF uses the 1e-6 default)
  double softmax_scale = 0.0;  // 0: qk_head_dim^-0.5; with yarn use mla_softmax_scale
  DType dtype = DType::f32;
  double init_std = 0.02;
};

// yarn's attention-magnitude factor: 1 for scale <= 1, else 0.1 · mscale · ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale);
// HF DeepseekV3Attention.scaling: qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)²
// when rope_scaling is yarn with a non-zero mscale_all_dim (pass factor 1 otherwise).
double mla_softmax_scale(int64_t qk_head_dim, double yarn_factor = 1.0,
                         double mscale_all_dim = 0.0);

class MLAttention : public AttentionBlock {
 public:
  explicit MLAttention(const MLAOptions& opt);
  // x [B, T, hidden]; cos/sin [T, qk_rope_head_dim / 2] for positions 0..T-1 (rope_cos_sin with
  // the model's rope_theta; for yarn, the yarn frequencies with cos/sin already multiplied by the
  // rope's attention factor, as HF's rotary embedding does). Returns [B, T, hidden].
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
    return attend(x, cos, sin, nullptr);
  }
  // Decoder-layer entry: cos/sin from ctx.rope (built over qk_rope_head_dim) at ctx.start; with
  // ctx.cache, steps after the prompt feed one token each (as Attention::forward).
  Tensor forward(const Tensor& x, AttentionContext& ctx) const override;
  const MLAOptions& options() const { return opt_; }
  int64_t qk_head_dim() const { return opt_.qk_nope_head_dim + opt_.qk_rope_head_dim; }

  std::shared_ptr<nn::Linear> q_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj;
  std::shared_ptr<nn::RMSNorm> q_a_layernorm, kv_a_layernorm;

 private:
  // cos/sin [T, dr / 2], or [B, T, dr / 2] per row; segments: AttentionContext::segments.
  Tensor attend(const Tensor& x, const Tensor& cos, const Tensor& sin, LayerCache* cache,
                const ContextSplit* context = nullptr, const Tensor& segments = Tensor()) const;
  MLAOptions opt_;
};

}  // namespace hp::models
