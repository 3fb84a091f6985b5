// Decoder-only causal LMs in Hugging Face layout: LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM (and, through the extension points below, the MoE / MLA families).
//
// Parameter FQNs are exactly HF's (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.
// weight, ..., model.norm.weight, lm_head.weight unless tied), so loading is a name match.
//
// Extension points (models/hf/registry.h): a decoder layer owns an AttentionBlock ("self_attn") and a
// FeedForward ("mlp"); an architecture supplies factories for both per layer index, so Qwen3-MoE /
// Mixtral plug in a sparse FeedForward (which may add a router loss via aux_loss) and DeepSeek-V3
// an MLA AttentionBlock, while embeddings, norms, head, loss, KV cache and loading stay shared.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "hp/models/hf/config.h"
#include "hp/models/mhc.h"
#include "hp/models/rope.h"
#include "hp/nn/module.h"

namespace hp::models {

// Decoding state of one layer beyond its keys and values, made and read by the layer's attention
// block (DeepSeek-V4: the compressors' incomplete windows and emitted entries).
struct LayerState {
  virtual ~LayerState() = default;
};

// K/V of one layer for incremental decoding: [B, Hkv, S, D] each (MLA may store its latent in k
// and leave v undefined; DeepSeek-V4 keeps its last sliding_window − 1 K=V rows in k and the rest
// in `state`).
struct LayerCache {
  Tensor k, v;
  std::shared_ptr<LayerState> state;  // null until an attention block that needs one runs
};

struct ContextSplit;

// Per-forward context handed to every attention block.
struct AttentionContext {
  int64_t start = 0;                      // position of the first token of x (the cache length)
  RotaryTables* rope = nullptr;           // the model's shared tables
  LayerCache* cache = nullptr;            // null: no cache (training / plain forward)
  const ContextSplit* context = nullptr;  // null: x holds whole rows
  // With `context`: the length of the whole row as one rank would run it (the loss's rows include
  // a last token whose logits go unused), so length-dependent RoPE (dynamic NTK) matches it;
  // 0: T · degree.
  int64_t row_length = 0;
  // Packed documents (CausalLM::loss with PackedDocuments; no cache): `segments` i32 document
  // ids of the whole rows, [B, T] ([B, T · degree] under `context`), non-decreasing along each
  // row (undefined: attention crosses documents); `positions` i64 [B, T] RoPE positions of x's
  // tokens (this rank's under `context`; undefined: start + t), with tables spanning at least
  // [0, position_span) so that length-dependent RoPE sees the whole batch's longest document.
  Tensor segments, positions;
  int64_t position_span = 0;
  // The token ids [B, T] of this forward when it started from ids (hash-routed MoE reads them).
  Tensor ids;
};

// The packed documents of training rows (data.document_mask, data.reset_position_ids; the loader's
// Batch::positions): `positions` i32/i64 [B, T] (like the ids) is each token's position within its
// document, 0 at each document's first token and at the row's first token. `mask` keeps attention
// inside each document (Megatron's --reset-attention-mask); `reset_positions` gives RoPE those
// positions instead of 0..T-1 (--reset-position-ids). Neither: the rows run as without it.
struct PackedDocuments {
  Tensor positions;
  bool mask = false;
  bool reset_positions = false;
  bool active() const { return positions.defined() && (mask || reset_positions); }
};
// Document ids of `positions` [B, T]: the number of zeros in positions[b, 1..t] (i32 [B, T]).
Tensor document_segments(const Tensor& positions);

class CausalLM;

// How the sequence is split over ranks, installed by the parallelize step (context parallelism's
// is built by models/context_plan.h). The model calls these hooks and never asks which parallel
// style filled them; a model without a split runs whole rows on every rank.
struct ContextSplit {
  int64_t degree = 1, index = 0;
  // cos/sin [T, rope dim / 2] (f32) for this rank's T tokens of a forward from position `start`
  // whose rows run `row_length` tokens on one rank (0: T · degree).
  std::function<std::pair<Tensor, Tensor>(RotaryTables& rope, int64_t start, int64_t t,
                                          int64_t row_length)>
      rotary;
  // attend() over the whole rows from this rank's tokens: q [B, Hq, T, D], k, v [B, Hkv, T, D],
  // causal, softmax scale, the whole rows' document ids (AttentionContext::segments), window.
  std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                       const Tensor& segments, int64_t window)>
      attention;
  // Adds a vector over the split's ranks (no gradient): the router loss's global expert counts.
  std::function<std::vector<double>(const std::vector<double>&)> sum;
  // CausalLM::loss under the split: this rank's share of the loss of rows ids, labels [B, T]
  // (the shares of the split's ranks sum to the whole loss, as their gradients do).
  std::function<Tensor(CausalLM& model, const Tensor& ids, const Tensor& labels,
                       const PackedDocuments& docs)>
      loss;
};

// cos/sin [T, rope dim / 2] (f32) for the T tokens of this forward: positions [start, start + T),
// or this rank's tokens under ctx.context (ContextSplit::rotary); with ctx.positions, per-row
// tables [B, T, rope dim / 2] of those positions.
std::pair<Tensor, Tensor> rotary_tables(const AttentionContext& ctx, int64_t t);
// Causal attention q [B, Hq, T, D] × k, v [B, Hkv, S, D] (`causal` false: every key visible),
// across the ranks of `context` when set (ContextSplit::attention); within the documents of
// `segments` (AttentionContext::segments, S = T) when defined; `window` > 0 (causal only):
// sliding window.
Tensor attend(const ContextSplit* context, const Tensor& q, const Tensor& k, const Tensor& v,
              bool causal, double scale, const Tensor& segments = Tensor(), int64_t window = 0);

class AttentionBlock : public nn::Module {
 public:
  // x [B, T, hidden] → [B, T, hidden].
  virtual Tensor forward(const Tensor& x, AttentionContext& ctx) const = 0;
};

class FeedForward : public nn::Module {
 public:
  // x [B, T, hidden] → [B, T, hidden].
  virtual Tensor forward(const Tensor& x) const = 0;
  // As forward, for blocks that also read the forward's context (DeepSeek-V4's hash routing
  // reads ctx.ids); the decoder layer calls this one.
  virtual Tensor forward_tokens(const Tensor& x, const AttentionContext& ctx) const {
    (void)ctx;
    return forward(x);
  }
  // Auxiliary loss of the last forward, added to CausalLM::loss as is; undefined when none.
  virtual Tensor aux_loss() const { return Tensor(); }
  // Router logits [tokens, num_experts] of the last forward of a sparse block; undefined for dense
  // ones. CausalLM::loss joins all layers' logits into one load-balancing loss (as HF does, over
  // the concatenation, not a per-layer sum).
  virtual Tensor router_logits() const { return Tensor(); }
  // Tensors of the last forward that CausalLM::loss reads besides the output (a sparse block's
  // router logits), and their replacement: a recompute region (models/recompute.h) returns them
  // as extra outputs of its checkpoint and hands back those outputs, which are connected to the
  // recomputed forward, so the loss's gradient through them is not lost. Defined tensors only.
  virtual std::vector<Tensor> side_outputs() const { return {}; }
  virtual void set_side_outputs(const std::vector<Tensor>& t) { (void)t; }
};

// Llama / Qwen2 / Qwen3 grouped-query attention with RoPE (rotate_half) and, for Qwen3, per-head
// RMSNorm of q and k before RoPE. Bias: q/k/v (`qkv_bias`), o (`o_bias`).
class Attention : public AttentionBlock {
 public:
  // window > 0: sliding-window attention (each query sees itself and window − 1 keys before it).
  Attention(const ModelConfig& c, bool qkv_bias, bool o_bias, bool qk_norm, int64_t window = 0);
  Tensor forward(const Tensor& x, AttentionContext& ctx) const override;
  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<nn::RMSNorm> q_norm, k_norm;  // null unless qk_norm

 private:
  int64_t heads_, kv_heads_, head_dim_, window_;
};

// SwiGLU: down(silu(gate(x)) · up(x)).
class GatedMLP : public FeedForward {
 public:
  GatedMLP(const ModelConfig& c, int64_t intermediate, bool bias);
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

// Builds the attention / feed-forward of layer `layer` for an architecture.
struct LayerFactory {
  std::function<std::shared_ptr<AttentionBlock>(const ModelConfig&, int64_t layer)> attention;
  std::function<std::shared_ptr<FeedForward>(const ModelConfig&, int64_t layer)> mlp;
  // The feed-forward's checkpoint module name (Mixtral: "block_sparse_moe").
  std::string mlp_name = "mlp";
};

// Pre-norm residual block: x + attn(norm(x)), then h + mlp(norm(h)). With config.hc_mult > 0
// (DeepSeek-V4) x is hc_mult residual streams [B, T, N, hidden] mixed in and out of each block by
// attn_hc / ffn_hc (models/mhc.h).
class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const ModelConfig& c, const LayerFactory& f, int64_t layer);
  Tensor forward(const Tensor& x, AttentionContext& ctx) const;
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<AttentionBlock> self_attn;
  std::shared_ptr<FeedForward> mlp;
  std::shared_ptr<HyperConnection> attn_hc, ffn_hc;  // null unless hc_mult > 0
};

// A numbered list of submodules ("layers.0", "layers.1", ...).
class ModuleList : public nn::Module {
 public:
  void append(std::shared_ptr<nn::Module> m) {
    register_module(std::to_string(size_++), std::move(m));
  }

 private:
  int64_t size_ = 0;
};

// "model": embed_tokens, layers, norm (and hc_head with hc_mult > 0).
class DecoderModel : public nn::Module {
 public:
  DecoderModel(const ModelConfig& c, const LayerFactory& f);
  std::shared_ptr<nn::Embedding> embed_tokens;
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<HyperHead> hc_head;  // null unless hc_mult > 0
};

// Per-layer K/V caches for generation.
struct KVCache {
  std::vector<LayerCache> layers;
  int64_t length = 0;  // tokens already cached
};

// The output head of a model with tied embeddings: logits = x · embed_tokens.weightᵀ. A module of
// its own (registered as "lm_head", holding no parameter) so that wrappers — a tensor-parallel
// input layout — apply to a tied head as to an untied one.
class TiedHead : public nn::Module {
 public:
  explicit TiedHead(std::shared_ptr<nn::Embedding> embedding) : embedding_(std::move(embedding)) {}
  Tensor forward(const Tensor& x) const;

 private:
  std::shared_ptr<nn::Embedding> embedding_;
};

// logits [B, T, V] → [B·T, V] in f32: the loss runs in f32 whatever the compute dtype (as torch
// autocast does): a bf16 mean over thousands of tokens keeps 3 significant digits.
Tensor flat_f32(const Tensor& logits);

// How the head's output is split over the vocabulary (tensor parallelism): `gather` turns this
// rank's logit columns [..., V_local] into the whole [..., vocab] (forward, generation);
// `cross_entropy` (logits [N, V_local] f32, targets [N] global ids, -100 ignored) gives the mean
// loss straight from the local columns, so loss() never builds full-vocabulary logits.
struct VocabSplit {
  std::function<Tensor(const Tensor&)> gather;
  std::function<Tensor(const Tensor&, const Tensor&)> cross_entropy;
};

class CausalLM : public nn::Module {
 public:
  CausalLM(const ModelConfig& c, const LayerFactory& f);
  const ModelConfig& config() const { return config_; }
  // ids [B, T] (i32/i64) → last hidden state [B, T, hidden] (after the final norm). With a cache,
  // ids are the next tokens after cache->length cached ones; the cache is extended. Incremental
  // steps (cache->length > 0) must feed one token at a time (see Attention::forward).
  Tensor hidden_states(const Tensor& ids, KVCache* cache = nullptr);
  // ids [B, T] → logits [B, T, vocab].
  Tensor forward(const Tensor& ids, KVCache* cache = nullptr);
  // HF's causal-LM loss: mean cross-entropy of logits[:, :-1] against labels[:, 1:] (labels
  // default to ids; -100 is ignored), plus the feed-forward aux losses and, when
  // config.output_router_logits, router_aux_loss_coef · load_balancing_loss over all sparse
  // layers' router logits (HF's MoE ForCausalLM, without attention mask).
  // With `docs` active (PackedDocuments), each packed document of a row trains as its own row
  // would: attention and/or RoPE positions restart at its first token (also under context
  // parallelism). ValueError for positions not shaped like ids.
  Tensor loss(const Tensor& ids, const Tensor& labels = Tensor(),
              const PackedDocuments& docs = PackedDocuments());
  // lm_head weight [vocab, hidden] (the embedding when tied).
  Tensor head_weight() const;
  // The last stage's logits [B, T, vocab] from h, the last layer's output (as run_layers gives
  // it): the final norm and the head, the vocabulary gathered under a vocabulary split.
  Tensor logits_from_hidden(const Tensor& h) const;

  // Pipeline stages (the parallelize step cuts the model at layer boundaries). keep_pipeline_stages
  // drops the decoder layers `keep_layer` rejects, the embedding unless `embedding` and the final
  // norm and head unless `head` (FQNs unchanged; a dropped layer's model->layers entry becomes
  // null). A tied head keeps the embedding's matrix (model.embed_tokens) on a stage that holds the
  // head but not the embedding: that stage holds a copy whose gradient the trainer adds to the first
  // stage's (train/pipeline_cut.h, Megatron's embedding group).
  void keep_pipeline_stages(const std::function<bool(int64_t)>& keep_layer, bool embedding,
                            bool head);
  // One stage's forward: layers [begin, end) on x — token ids [B, T] when begin == 0 (the
  // embedding runs first), else the [B, T, hidden] output of layer begin − 1.
  // `docs`: the packed documents of the micro-batch (document_context), else none; for
  // begin > 0 also its token ids (docs->ids), which hash-routed MoE layers read.
  Tensor run_layers(const Tensor& x, int64_t begin, int64_t end,
                    const AttentionContext* docs = nullptr);
  // The packed-document fields of an AttentionContext (segments, positions, span) for whole rows
  // `ids` [B, T]; empty when `docs` is not active.
  // ValueError for positions not shaped like ids or negative.
  AttentionContext document_context(const Tensor& ids, const PackedDocuments& docs) const;
  // The last stage's loss: loss(ids, labels) from h [B, T, hidden], the last layer's output
  // (final norm, head, shifted cross-entropy, aux losses of the layers this rank holds; the router
  // load-balancing loss too unless `router_loss` is false: a pipeline adds it across stages).
  Tensor loss_from_hidden(const Tensor& h, const Tensor& ids, const Tensor& labels = Tensor(),
                          bool router_loss = true);
  // The router logits of the last forward of the sparse layers in [begin, end) this rank holds,
  // in layer order.
  std::vector<Tensor> router_logits(int64_t begin, int64_t end) const;
  KVCache new_cache() const;
  // Installs the vocabulary split of a tensor-parallel head (parallelize step).
  void set_vocab_split(VocabSplit s) { vocab_split_ = std::move(s); }
  // Installs the sequence split of context parallelism (parallelize step; models/context_plan.h):
  // loss() then trains on this rank's tokens of each row and returns its share of the loss.
  void set_context_split(ContextSplit s) { context_ = std::move(s); }
  const ContextSplit* context_split() const { return context_ ? &*context_ : nullptr; }

  // The primitives loss() and an installed ContextSplit::loss are built from.
  // h [B, T, hidden] → this rank's logit columns [B, T, V_local] (all without a vocab split).
  Tensor head(const Tensor& h) const;
  // logits [N, V_local] (f32), targets [N] → the mean cross-entropy (over the vocab split).
  Tensor mean_cross_entropy(const Tensor& logits, const Tensor& targets) const;
  // ids [B, T] → the final norm's output, the layers running under `context` (its rank's tokens
  // of rows `row_length` long) with the packed-document fields of `docs` (segments, positions,
  // span), extending `cache` when given.
  Tensor run(const Tensor& ids, KVCache* cache, const ContextSplit* context,
             int64_t row_length = 0, const AttentionContext* docs = nullptr);
  // l + each feed-forward aux loss, then the router load-balancing loss, in that order; under a
  // split (`context`) this rank's shares of them (per-layer aux losses / degree, the router loss
  // from the global expert counts: moe.h); the router loss only when `router_loss`.
  Tensor add_aux_losses(Tensor l, const ContextSplit* context, bool router_loss = true) const;
  // Whether loss() adds the router load-balancing loss (config output_router_logits with a
  // non-zero router_aux_loss_coef).
  bool has_router_loss() const;

  std::shared_ptr<DecoderModel> model;
  std::shared_ptr<nn::Linear> lm_head;  // null when tied
  std::shared_ptr<TiedHead> tied_head;  // the head when tied (FQN "lm_head"), else null

 private:
  // The embedding output as the layers' input: copied into hc_mult streams when the model has
  // them ([B, T, N, hidden]), else as is.
  Tensor to_streams(const Tensor& h) const;
  // The last layer's output → the final norm's (collapsing the streams first when there are).
  Tensor final_norm(const Tensor& h) const;

  ModelConfig config_;
  VocabSplit vocab_split_;
  std::optional<ContextSplit> context_;
  RotaryTables rope_;
};

}  // namespace hp::models
