// DeepSeek-V4 (transformers' DeepseekV4ForCausalLM, modeling_deepseek_v4.py) from config.json +
// safetensors.
//
// Plan (read from the HF modeling file; shapes B batch, T tokens, N = hc_mult, D = hidden_size,
// H heads, d = head_dim, r = qk_rope_head_dim = d · partial_rotary_factor):
//  * Residual = N streams [B, T, N, D] (mHC, models/mhc.h): the embedding is copied to every
//    stream; before each block a HyperConnection turns the streams into (pre, post, comb) weights
//    (one linear on the RMS-normed flattened streams; sigmoid / 2·sigmoid / Sinkhorn-projected
//    softmax), the block runs on Σ pre·streams, and the streams become
//    post ⊗ block_out + combᵀ · streams. A hyper head collapses them before the final norm.
//    Implemented in the shared DecoderLayer / CausalLM (hc_mult > 0), so FSDP groups, recompute
//    regions and MX conversion see the usual modules.
//  * Attention (DeepseekV4Attention): q = rms(q_b(q_a_norm(q_a(x)))) per head (unweighted), one
//    shared K=V head kv_norm(kv(x)); interleaved RoPE on the trailing r channels of q and kv (and
//    the inverse rotation on the output's rope slice); scores over [sliding-window keys |
//    compressed entries] plus a per-head sink logit in the softmax; grouped output projection
//    (o_groups blocks of o_a, then o_b).
//      - sliding_attention: causal keys within sliding_window (general feature: sink_attention.h).
//      - heavily_compressed_attention (HCA): every compress_rate_hca tokens pooled into one entry
//        (softmax(gate + ape) over the window), kv_norm, RoPE at the window start (compress rope);
//        query t sees entries w < (t + 1) / rate.
//      - compressed_sparse_attention (CSA): overlapping windows (previous window's first half-width
//        series + this window's second) at compress_rate_csa, and a lightning indexer (its own
//        compressor at index_head_dim, ReLU scores weighted per head) whose top index_topk causal
//        entries per query are the only compressed keys visible. Selection has no gradient.
//  * MLP (DeepseekV4MoE): routed experts with the SwiGLU clamp (gate ≤ limit, |up| ≤ limit) plus
//    one shared expert of moe_intermediate_size; router scores sqrtsoftplus (or sigmoid/softmax);
//    "moe" picks top-k of score + correction bias, "hash_moe" takes the experts of tid2eid[token];
//    weights = gathered scores, normalized, times routed_scaling_factor.
//  * Parameter FQNs are transformers' in-memory names with per-expert 2-D experts
//    (model.layers.<i>.self_attn.compressor.indexer.q_b_proj.weight, ...mlp.experts.<e>.gate_proj);
//    deepseek_v4_checkpoint_name maps them to the names save_pretrained writes (attn.indexer.wq_b,
//    ffn.experts.<e>.w1, hc_attn_fn, head.weight, ...). tid2eid is kept as an f32 tensor that
//    never gets a gradient (exact for expert ids < 2^24).
//  * Generation (deepseek_v4_cache.cpp; transformers' DeepseekV4HCACache / DeepseekV4CSACache):
//    with ctx.cache, x holds the tokens after the ctx.start cached ones (the prompt, then one per
//    step, or any chunk). LayerCache::k keeps the last sliding_window − 1 K=V rows [B, 1, S, d];
//    LayerCache::state each compressor's V4CompressorState (the incomplete window's projections,
//    the last complete window's first series for CSA's overlap, the entries emitted so far; the
//    indexer's compressor likewise), so a step costs O(window + entries), not a re-forward.
//  * Tensor parallelism: deepseek_v4_tp_plan (models/tp_plan.h); the attention reads its head
//    count from q_b_proj.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hp/models/hf/config.h"
#include "hp/models/moe.h"
#include "hp/models/rope.h"
#include "hp/models/transformer.h"
#include "hp/nn/module.h"

namespace hp::io {
class Json;
}

namespace hp::models {

extern const char* const kSlidingAttention;
extern const char* const kCompressedSparseAttention;
extern const char* const kHeavilyCompressedAttention;

// config.json's V4 keys into c (after the common ones); IoError "[config] <file>: <key>: ...".
void parse_deepseek_v4_fields(const io::Json& j, ModelConfig& c);
// The V4 keys of c as a JSON object text (model_config_to_json merges it).
std::string deepseek_v4_json(const ModelConfig& c);
// hp FQN → the tensor name DeepSeek-V4 checkpoints use.
std::string deepseek_v4_checkpoint_name(const std::string& fqn);

// A compressor's state between decoding calls (transformers' buffer_kv / buffer_gate,
// overlap_kv / overlap_gate, compressed_kv of one name). width = dim · (overlap ? 2 : 1).
struct V4CompressorState {
  Tensor kv, gate;            // [B, < rate, width]: projections of the incomplete window's tokens
  Tensor prev_kv, prev_gate;  // [B, rate, dim]: the last complete window's first series (overlap;
                              // gate with position_bias), undefined before the first window
  Tensor entries;             // [B, n, dim]: every entry emitted so far (window w at w · rate)
};

// A compressor of one attention layer: every `rate` tokens pooled into one entry of `dim`
// (HF DeepseekV4HCACompressor; with `overlap`, DeepseekV4CSACompressor's two series / the
// indexer's). FQNs: kv_proj, gate_proj, position_bias, kv_norm.
class V4Compressor : public nn::Module {
 public:
  V4Compressor(const ModelConfig& c, int64_t dim, int64_t rate, bool overlap);
  // x [B, T, D] → entries [B, T / rate, dim] (kv_norm'ed, RoPE'd at window starts by the
  // compress tables cos/sin [≥ T, r / 2]).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  // Decoding: x [B, T, D] are the tokens after those `state` has seen; the windows they complete
  // are appended to state.entries (RoPE'd at their absolute starts from the compress `rope`), the
  // rest is kept. Returns state.entries [B, n, dim].
  Tensor step(const Tensor& x, V4CompressorState& state, RotaryTables& rope) const;
  int64_t rate() const { return rate_; }
  std::shared_ptr<nn::Linear> kv_proj, gate_proj;
  Tensor position_bias;  // [rate, dim · (overlap ? 2 : 1)]
  std::shared_ptr<nn::RMSNorm> kv_norm;

 private:
  // Complete windows → entries: kv, gate [B, nw · rate, width] projections (gate without
  // position_bias), prior_kv / prior_gate [B, rate, dim] the first series of the window before
  // the first (overlap; undefined: none), cos / sin [nw, r / 2] at the window starts. Returns
  // [B, nw, dim]; with overlap, *last_kv / *last_gate get the last window's first series.
  Tensor pool(const Tensor& kv, const Tensor& gate, const Tensor& prior_kv,
              const Tensor& prior_gate, const Tensor& cos, const Tensor& sin,
              Tensor* last_kv = nullptr, Tensor* last_gate = nullptr) const;
  int64_t dim_, rate_;
  bool overlap_;
};

// The CSA lightning indexer: which compressed entries each query may see.
class V4Indexer : public nn::Module {
 public:
  explicit V4Indexer(const ModelConfig& c);
  // x [B, T, D], q_residual [B, T, q_lora_rank] → additive bias [B, T, T / rate] (0 for the
  // top index_topk causal entries of each query, -inf elsewhere). No gradient.
  Tensor select(const Tensor& x, const Tensor& q_residual, const Tensor& cos,
                const Tensor& sin) const;
  // As select, against given indexer entries [B, n, Di] (the compressor's output, or its
  // decoding state), for queries at positions start + [0, T) (cos / sin at those positions).
  Tensor select_from(const Tensor& x, const Tensor& q_residual, const Tensor& entries,
                     const Tensor& cos, const Tensor& sin, int64_t start) const;
  std::shared_ptr<V4Compressor> compressor;  // registered flat: kv_proj, gate_proj, ... of its own
  std::shared_ptr<nn::Linear> q_b_proj;
  std::shared_ptr<nn::Module> scorer;  // holds weights_proj
  std::shared_ptr<nn::Linear> weights_proj;

 private:
  int64_t heads_, dim_, topk_, rate_;
};

class DeepseekV4Attention : public AttentionBlock {
 public:
  DeepseekV4Attention(const ModelConfig& c, int64_t layer);
  Tensor forward(const Tensor& x, AttentionContext& ctx) const override;

  std::shared_ptr<nn::Linear> q_a_proj, q_b_proj, kv_proj, o_a_proj, o_b_proj;
  std::shared_ptr<nn::RMSNorm> q_a_norm, kv_norm;
  Tensor sinks;  // [H]
  std::shared_ptr<nn::Module> compressor;  // null for sliding_attention
  std::shared_ptr<V4Compressor> kv_compressor;
  std::shared_ptr<V4Indexer> indexer;  // CSA only

 private:
  struct Projected {
    Tensor q_res;  // [B, T, q_lora_rank]
    Tensor q;      // [B, H, T, d], RoPE'd
    Tensor kv;     // [B, 1, T, d], RoPE'd
  };
  // x [B, T, D] → queries and the K=V head at the positions of cos / sin [T, r / 2].
  Projected project(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  // The attention output o [B, H, T, d] → [B, T, D]: the inverse rotation of its rope slice (K = V
  // carried RoPE into it) by the query's angle, then the grouped output projection.
  Tensor project_out(const Tensor& o, const Tensor& cos, const Tensor& sin) const;
  // forward with ctx.cache (deepseek_v4_cache.cpp).
  Tensor forward_cached(const Tensor& x, AttentionContext& ctx) const;
  std::string type_;
  int64_t heads_, head_dim_, rope_dim_, window_, groups_;
  double eps_;
  // cos/sin [len, r / 2] of the main (sliding layers) or compress rope.
  mutable RotaryTables main_rope_, compress_rope_;
};

// Router + routed experts + one shared expert (DeepseekV4SparseMoeBlock).
// Routed experts: without expert parallelism the fused f32 grouped GEMM (grouped_experts,
// models/moe.h, clamp fused) or, once a grouped kernel is set (nn::GroupedExperts; MXFP8's
// mx/convert.h), three kernel calls over the experts' stacked weights with the clamp and SwiGLU as
// ops; under expert parallelism moe::routed_experts (sorted by expert, combined by index_add)
// with its sequential exchange (MegaMoE's fused experts have no SwiGLU clamp), the local experts
// through the grouped kernel when one is set, else one at a time.
// Built with initialization (not loaded), a hash layer's tid2eid gives each token id k distinct
// experts drawn uniformly from the default generator (the training seed); transformers leaves the
// table zero (every token on expert 0) until a checkpoint fills it.
class DeepseekV4MoE : public FeedForward, public nn::GroupedExperts, public ExpertParallelBlock {
 public:
  DeepseekV4MoE(const ModelConfig& c, bool hash);
  Tensor forward(const Tensor& x) const override;
  Tensor forward_tokens(const Tensor& x, const AttentionContext& ctx) const override;
  Tensor router_logits() const override { return last_router_logits_; }
  std::vector<Tensor> side_outputs() const override {
    return last_router_logits_.defined() ? std::vector<Tensor>{last_router_logits_}
                                         : std::vector<Tensor>{};
  }
  void set_side_outputs(const std::vector<Tensor>& t) override {
    if (!t.empty()) last_router_logits_ = t.at(0);
  }
  void set_grouped_kernel(nn::GroupedKernel k) override { grouped_kernel_ = std::move(k); }
  bool has_grouped_kernel() const override { return static_cast<bool>(grouped_kernel_); }

  std::shared_ptr<nn::Module> gate;  // weight [E, D]; e_score_correction_bias [E] or tid2eid [V, k]
  Tensor gate_weight, correction_bias, tid2eid;
  std::vector<std::shared_ptr<SwiGLUMLP>> experts;  // all E; null where keep_local_experts dropped
  std::shared_ptr<SwiGLUMLP> shared_experts;

  int64_t num_experts() const override { return c_.num_experts; }
  void set_expert_parallel(dist::CommPtr ep, ExpertParallelKernel kernel = {}) override;
  void keep_local_experts() override;

 private:
  // m's SwiGLU with the swiglu_limit clamp (gate ≤ limit, |up| ≤ limit): x [N, D] → [N, D].
  Tensor swiglu(const SwiGLUMLP& m, const Tensor& x) const;
  // This rank's experts over rows sorted by them (moe::LocalExperts): xs [R, D] with counts[e]
  // rows of local expert e → [R, D].
  Tensor run_local_experts(const Tensor& xs, const std::vector<int64_t>& counts) const;
  ModelConfig c_;
  bool hash_;
  nn::GroupedKernel grouped_kernel_;
  dist::CommPtr ep_;
  mutable Tensor last_router_logits_;
};

namespace detail {
// f32 [T, n]: 0 where compressed entry w is complete before the query at position start + i
// (w < (start + i + 1) / rate), -inf elsewhere.
Tensor causal_entry_bias(int64_t t, int64_t n, int64_t rate, int64_t start = 0);
}  // namespace detail

}  // namespace hp::models
