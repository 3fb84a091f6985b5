#include "hp/models/transformer.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "hp/fusion/patterns.h"
#include "hp/models/moe.h"
#include "hp/ops/attention.h"
#include "hp/ops/ops.h"

namespace hp::models {

Tensor document_segments(const Tensor& positions) {
  HP_CHECK(positions.dim() == 2, "positions must be [B, T], got ", positions.desc());
  const int64_t b = positions.size(0), t = positions.size(1);
  const std::vector<double> pos = contiguous(positions).to_vector();
  std::vector<double> seg(pos.size());
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 1; i < t; ++i)
      seg[r * t + i] = seg[r * t + i - 1] + (pos[r * t + i] == 0 ? 1 : 0);
  return from_vector(seg, {b, t}, DType::i32);
}

namespace {

// cos/sin [B, T, dim / 2] of the per-row positions [B, T] (no gradient: tables, not parameters).
// The tables span 0..max position, so length-dependent RoPE (dynamic NTK) sees the longest
// document's length, as HF's does from max(position_ids) + 1.
std::pair<Tensor, Tensor> per_row_tables(RotaryTables& rope, const Tensor& positions,
                                         int64_t span) {
  const std::vector<double> pos = contiguous(positions).to_vector();
  double top = 0;
  for (double p : pos) top = std::max(top, p);
  auto [cos, sin] = rope.get(0, std::max(static_cast<int64_t>(top) + 1, span), DType::f32);
  const int64_t half = cos.size(1);
  Tensor c = empty({positions.size(0), positions.size(1), half}, DType::f32);
  Tensor s = empty(c.shape(), DType::f32);
  const Tensor cc = contiguous(cos), sc = contiguous(sin);
  for (size_t i = 0; i < pos.size(); ++i) {
    const int64_t p = static_cast<int64_t>(pos[i]);
    std::copy_n(cc.data<float>() + p * half, half, c.data<float>() + int64_t(i) * half);
    std::copy_n(sc.data<float>() + p * half, half, s.data<float>() + int64_t(i) * half);
  }
  return {c, s};
}

}  // namespace

std::pair<Tensor, Tensor> rotary_tables(const AttentionContext& ctx, int64_t t) {
  HP_CHECK(ctx.rope, "attention context without rotary tables");
  if (ctx.positions.defined()) {
    HP_CHECK(ctx.positions.size(1) == t, "per-row positions ", ctx.positions.desc(), " for ", t,
             " tokens");
    return per_row_tables(*ctx.rope, ctx.positions, ctx.position_span);
  }
  if (ctx.context) return ctx.context->rotary(*ctx.rope, ctx.start, t, ctx.row_length);
  return ctx.rope->get(ctx.start, t, DType::f32);
}

Tensor attend(const ContextSplit* context, const Tensor& q, const Tensor& k, const Tensor& v,
              bool causal, double scale, const Tensor& segments, int64_t window) {
  if (context) return context->attention(q, k, v, causal, scale, segments, window);
  if (window <= 0) return scaled_dot_product_attention(q, k, v, causal, scale, segments);
  return scaled_dot_product_attention_lse(q, k, v, {causal, scale, segments, window, Tensor()}).out;
}

Attention::Attention(const ModelConfig& c, bool qkv_bias, bool o_bias, bool qk_norm,
                     int64_t window)
    : heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      window_(window) {
  const double s = c.initializer_range;
  q_proj = register_module("q_proj", std::make_shared<nn::Linear>(c.hidden_size, heads_ * head_dim_,
                                                                  qkv_bias, c.dtype, s));
  k_proj = register_module(
      "k_proj",
      std::make_shared<nn::Linear>(c.hidden_size, kv_heads_ * head_dim_, qkv_bias, c.dtype, s));
  v_proj = register_module(
      "v_proj",
      std::make_shared<nn::Linear>(c.hidden_size, kv_heads_ * head_dim_, qkv_bias, c.dtype, s));
  o_proj = register_module("o_proj", std::make_shared<nn::Linear>(heads_ * head_dim_, c.hidden_size,
                                                                  o_bias, c.dtype, s));
  if (qk_norm) {
    q_norm = register_module("q_norm",
                             std::make_shared<nn::RMSNorm>(head_dim_, c.rms_norm_eps, c.dtype));
    k_norm = register_module("k_norm",
                             std::make_shared<nn::RMSNorm>(head_dim_, c.rms_norm_eps, c.dtype));
  }
}

Tensor Attention::forward(const Tensor& x, AttentionContext& ctx) const {
  const int64_t b = x.size(0);
  // Head counts come from the projection weights, not the config: under a tensor-parallel plan
  // (shard/plan.h) q/k/v hold this rank's heads only.
  const int64_t heads = q_proj->weight.size(0) / head_dim_;
  const int64_t kv_heads = k_proj->weight.size(0) / head_dim_;
  HP_CHECK(heads * head_dim_ == q_proj->weight.size(0) && kv_heads > 0 && heads % kv_heads == 0,
           "q/k projections of ", q_proj->weight.size(0), "/", k_proj->weight.size(0),
           " rows for head_dim ", head_dim_);
  // Projections viewed per head: [B, T, H, D] (rotary over seq_dim 1, then a strided
  // [B, H, T, D] view that attention reads with unit last stride).
  // The sequence length comes from the projections: under sequence parallelism (shard/plan.h)
  // x holds this rank's rows only and q/k/v all-gather the rest.
  Tensor qp = q_proj->forward(x);
  const int64_t t = qp.size(1);
  Tensor q = view(qp, {b, t, heads, head_dim_});
  Tensor k = view(k_proj->forward(x), {b, t, kv_heads, head_dim_});
  Tensor v = view(v_proj->forward(x), {b, t, kv_heads, head_dim_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  auto [cos, sin] = rotary_tables(ctx, t);
  q = transpose(rotary_embedding(q, cos, sin, false, 1), 1, 2);  // [B, Hq, T, D]
  k = transpose(rotary_embedding(k, cos, sin, false, 1), 1, 2);  // [B, Hkv, T, D]
  v = transpose(v, 1, 2);
  bool causal = true;
  if (ctx.cache) {
    LayerCache& lc = *ctx.cache;
    if (lc.k.defined()) {
      // The flash kernel aligns the causal mask top-left (query i sees keys <= i), which is only
      // right when queries and keys start together; a single new query may see the whole cache.
      if (t != 1)
        HP_THROW(ValueError, "models",
                 "incremental decoding feeds one token per step after the "
                 "prompt; got ",
                 t, " tokens with ", lc.k.size(2), " cached");
      k = cat({lc.k, k}, 2);
      v = cat({lc.v, v}, 2);
      causal = false;
    }
    lc.k = k.is_contiguous() ? k : contiguous(k);
    lc.v = v.is_contiguous() ? v : contiguous(v);
    k = lc.k;
    v = lc.v;
    if (!causal && window_ > 0 && k.size(2) > window_) {
      // The new token sees itself and the window − 1 cached keys before it.
      k = narrow(k, 2, k.size(2) - window_, window_);
      v = narrow(v, 2, v.size(2) - window_, window_);
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  Tensor o = attend(ctx.context, q, k, v, causal, scale, ctx.segments,
                    causal ? window_ : 0);  // [B, Hq, T, D]
  o = reshape(transpose(o, 1, 2), {b, t, heads * head_dim_});
  return o_proj->forward(o);
}

GatedMLP::GatedMLP(const ModelConfig& c, int64_t intermediate, bool bias) {
  const double s = c.initializer_range;
  gate_proj = register_module(
      "gate_proj", std::make_shared<nn::Linear>(c.hidden_size, intermediate, bias, c.dtype, s));
  up_proj = register_module(
      "up_proj", std::make_shared<nn::Linear>(c.hidden_size, intermediate, bias, c.dtype, s));
  down_proj = register_module(
      "down_proj", std::make_shared<nn::Linear>(intermediate, c.hidden_size, bias, c.dtype, s));
}

Tensor GatedMLP::forward(const Tensor& x) const {
  return down_proj->forward(fusion::swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

DecoderLayer::DecoderLayer(const ModelConfig& c, const LayerFactory& f, int64_t layer) {
  self_attn = register_module("self_attn", f.attention(c, layer));
  mlp = register_module(f.mlp_name, f.mlp(c, layer));
  input_layernorm = register_module(
      "input_layernorm", std::make_shared<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps, c.dtype));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      std::make_shared<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps, c.dtype));
  if (c.hc_mult > 0) {
    auto hc = [&c] {
      return std::make_shared<HyperConnection>(c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters,
                                               c.hc_eps, c.rms_norm_eps, c.dtype,
                                               c.initializer_range);
    };
    attn_hc = register_module("attn_hc", hc());
    ffn_hc = register_module("ffn_hc", hc());
  }
}

Tensor DecoderLayer::forward(const Tensor& x, AttentionContext& ctx) const {
  // Each block runs through its module's forward wrappers (recompute, FSDP gathering). The
  // closures copy the context (pointers and a position): a recompute wrapper keeps them and runs
  // them again in backward, after this call has returned.
  const AttentionContext c = ctx;
  if (attn_hc)
    return wrapped_forward(x, [this, c](const Tensor& streams) {
      // x: streams [B, T, N, hidden]; each block runs on their collapse and folds back.
      const HcMix am = attn_hc->mix(streams, *input_layernorm);
      Tensor a = self_attn->wrapped_forward(am.input, [this, c](const Tensor& y) {
        AttentionContext cc = c;
        return self_attn->forward(y, cc);
      });
      const Tensor h = HyperConnection::fold(am, a, streams);
      const HcMix fm = ffn_hc->mix(h, *post_attention_layernorm);
      Tensor m = mlp->wrapped_forward(
          fm.input, [this, c](const Tensor& y) { return mlp->forward_tokens(y, c); });
      return HyperConnection::fold(fm, m, h);
    });
  return wrapped_forward(x, [this, c](const Tensor& in) {
    Tensor a = self_attn->wrapped_forward(input_layernorm->forward(in), [this, c](const Tensor& y) {
      AttentionContext cc = c;
      return self_attn->forward(y, cc);
    });
    const auto [h, n] = post_attention_layernorm->add_forward(in, a);
    Tensor m =
        mlp->wrapped_forward(n, [this, c](const Tensor& y) { return mlp->forward_tokens(y, c); });
    return add(h, m);
  });
}

DecoderModel::DecoderModel(const ModelConfig& c, const LayerFactory& f) {
  embed_tokens = register_module(
      "embed_tokens",
      std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, c.dtype, c.initializer_range));
  auto list = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(std::make_shared<DecoderLayer>(c, f, i));
    list->append(layers.back());
  }
  norm = register_module("norm",
                         std::make_shared<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps, c.dtype));
  if (c.hc_mult > 0)
    hc_head = register_module(
        "hc_head", std::make_shared<HyperHead>(c.hc_mult, c.hidden_size, c.hc_eps, c.rms_norm_eps,
                                               c.dtype, c.initializer_range));
}

CausalLM::CausalLM(const ModelConfig& c, const LayerFactory& f)
    : config_(c), rope_(c, c.qk_rope_head_dim > 0 ? c.qk_rope_head_dim : c.head_dim) {
  model = register_module("model", std::make_shared<DecoderModel>(c, f));
  if (!c.tie_word_embeddings)
    lm_head =
        register_module("lm_head", std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, false,
                                                                c.dtype, c.initializer_range));
  else
    tied_head = register_module("lm_head", std::make_shared<TiedHead>(model->embed_tokens));
}

Tensor TiedHead::forward(const Tensor& x) const {
  return wrapped_forward(x, [this](const Tensor& t) { return linear(t, embedding_->weight); });
}

namespace {
// The packed-document fields of `docs` (CausalLM::loss), when given, into a forward's context.
void take_documents(AttentionContext& ctx, const AttentionContext* docs) {
  if (!docs) return;
  ctx.segments = docs->segments;
  ctx.positions = docs->positions;
  ctx.position_span = docs->position_span;
}
}  // namespace

Tensor CausalLM::to_streams(const Tensor& h) const {
  if (config_.hc_mult <= 0) return h;
  // Every mHC stream starts as the embedding: [B, T, hidden] → [B, T, N, hidden].
  return contiguous(expand(unsqueeze(h, 2), {h.size(0), h.size(1), config_.hc_mult, h.size(2)}));
}

Tensor CausalLM::final_norm(const Tensor& h) const {
  return model->norm->forward(model->hc_head ? model->hc_head->forward(h) : h);
}

Tensor CausalLM::hidden_states(const Tensor& ids, KVCache* cache) {
  return run(ids, cache, nullptr);
}

Tensor CausalLM::run(const Tensor& ids, KVCache* cache, const ContextSplit* context,
                     int64_t row_length, const AttentionContext* docs) {
  if (ids.dim() != 2) HP_THROW(ValueError, "models", "input ids must be [B, T], got ", ids.desc());
  if (cache && cache->layers.size() != model->layers.size())
    HP_THROW(ValueError, "models", "KV cache has ", cache->layers.size(), " layers, model has ",
             model->layers.size(), " (use new_cache())");
  AttentionContext ctx;
  ctx.start = cache ? cache->length : 0;
  ctx.rope = &rope_;
  ctx.context = context;
  ctx.row_length = row_length;
  take_documents(ctx, docs);
  ctx.ids = ids;
  Tensor h = to_streams(model->embed_tokens->forward(ids));  // [B, T, hidden] or [B, T, N, hidden]
  for (size_t i = 0; i < model->layers.size(); ++i) {
    ctx.cache = cache ? &cache->layers[i] : nullptr;
    h = model->layers[i]->forward(h, ctx);
  }
  if (cache) cache->length += ids.size(1);
  return final_norm(h);
}

Tensor CausalLM::forward(const Tensor& ids, KVCache* cache) {
  // The head runs as its module, so its kernel and wrappers (low precision, sharding) apply.
  const Tensor logits = head(hidden_states(ids, cache));
  return vocab_split_.gather ? vocab_split_.gather(logits) : logits;
}

Tensor CausalLM::logits_from_hidden(const Tensor& h) const {
  HP_CHECK(model->norm != nullptr, "the head is on another pipeline stage");
  const Tensor logits = head(final_norm(h));
  return vocab_split_.gather ? vocab_split_.gather(logits) : logits;
}

Tensor CausalLM::head(const Tensor& h) const {
  return lm_head ? lm_head->forward(h) : tied_head->forward(h);
}

Tensor flat_f32(const Tensor& logits) {
  Tensor f = reshape(logits, {logits.size(0) * logits.size(1), logits.size(2)});
  return f.dtype() == DType::f32 ? f : cast(f, DType::f32);
}

Tensor CausalLM::mean_cross_entropy(const Tensor& logits, const Tensor& targets) const {
  return vocab_split_.cross_entropy ? vocab_split_.cross_entropy(logits, targets)
                                    : cross_entropy(logits, targets, -100, "mean");
}

AttentionContext CausalLM::document_context(const Tensor& ids, const PackedDocuments& docs) const {
  AttentionContext doc_ctx;
  if (!docs.active()) return doc_ctx;
  if (docs.positions.shape() != ids.shape() ||
      (docs.positions.dtype() != DType::i64 && docs.positions.dtype() != DType::i32))
    HP_THROW(ValueError, "models", "document positions ", docs.positions.desc(),
             " must be i32/i64 shaped like ids ", ids.desc());
  double top = 0, low = 0;
  for (double p : contiguous(docs.positions).to_vector())
    top = std::max(top, p), low = std::min(low, p);
  if (low < 0) HP_THROW(ValueError, "models", "document positions must be >= 0, got ", low);
  if (docs.mask) doc_ctx.segments = document_segments(docs.positions);
  if (docs.reset_positions) {
    doc_ctx.positions = docs.positions;
    // Tables over the whole window's longest document (a rank of a split sees only its tokens).
    doc_ctx.position_span = static_cast<int64_t>(top) + 1;
  }
  return doc_ctx;
}

Tensor CausalLM::loss(const Tensor& ids, const Tensor& labels, const PackedDocuments& docs) {
  const Tensor lab = labels.defined() ? labels : ids;
  if (lab.shape() != ids.shape())
    HP_THROW(ValueError, "models", "labels ", lab.desc(), " must match ids ", ids.desc());
  if (ids.size(1) < 2)
    HP_THROW(ValueError, "models", "loss needs at least 2 tokens per row, got ", ids.desc());
  if (context_) return context_->loss(*this, ids, lab, docs);
  const AttentionContext doc_ctx = document_context(ids, docs);
  return loss_from_hidden(run_layers(ids, 0, static_cast<int64_t>(model->layers.size()), &doc_ctx),
                          ids, lab);
}

Tensor CausalLM::run_layers(const Tensor& x, int64_t begin, int64_t end,
                            const AttentionContext* docs) {
  const auto n = static_cast<int64_t>(model->layers.size());
  HP_CHECK(0 <= begin && begin <= end && end <= n, "layers [", begin, ", ", end, ") of ", n);
  AttentionContext ctx;
  ctx.rope = &rope_;
  take_documents(ctx, docs);
  if (begin == 0 && x.dim() != 2)
    HP_THROW(ValueError, "models", "input ids must be [B, T], got ", x.desc());
  HP_CHECK(begin > 0 || model->embed_tokens, "the embedding is on another pipeline stage");
  // A later stage's hash-routed layers read the micro-batch's token ids from `docs`.
  ctx.ids = begin == 0 ? x : docs ? docs->ids : Tensor();
  Tensor h = begin == 0 ? to_streams(model->embed_tokens->forward(x)) : x;  // [B, T, (N,) hidden]
  for (int64_t i = begin; i < end; ++i) {
    const auto& layer = model->layers[static_cast<size_t>(i)];
    HP_CHECK(layer != nullptr, "layer ", i, " is on another pipeline stage");
    h = layer->forward(h, ctx);
  }
  return h;
}

Tensor CausalLM::loss_from_hidden(const Tensor& h, const Tensor& ids, const Tensor& labels,
                                  bool router_loss) {
  const Tensor lab = labels.defined() ? labels : ids;
  const int64_t b = ids.size(0), t = ids.size(1);
  HP_CHECK(model->norm != nullptr, "the head is on another pipeline stage");
  const Tensor logits = head(final_norm(h));  // [B, T, V_local]
  // Position i predicts token i + 1, so the last position has no target: it gets ignore_index
  // instead of being cut off the logits. The loss and every gradient are bitwise those of the
  // [B, T - 1] rows (an ignored row adds 0 to the loss and has a zero gradient), without copying
  // the [B, T - 1, V] slice forward and scattering its gradient back into zeros in backward.
  const Tensor targets =  // [B·T]
      reshape(cat({narrow(lab, 1, 1, t - 1), full({b, 1}, -100.0, lab.dtype())}, 1), {b * t});
  return add_aux_losses(mean_cross_entropy(flat_f32(logits), targets), nullptr, router_loss);
}

std::vector<Tensor> CausalLM::router_logits(int64_t begin, int64_t end) const {
  std::vector<Tensor> out;
  for (int64_t i = begin; i < end; ++i)
    if (const auto& layer = model->layers[size_t(i)])
      if (Tensor r = layer->mlp->router_logits(); r.defined()) out.push_back(r);
  return out;
}

void CausalLM::keep_pipeline_stages(const std::function<bool(int64_t)>& keep_layer, bool embedding,
                                    bool head) {
  nn::Module* list = nullptr;
  for (const auto& [name, child] : model->children())
    if (name == "layers") list = child.get();
  HP_CHECK(list != nullptr);
  for (size_t i = 0; i < model->layers.size(); ++i)
    if (model->layers[i] && !keep_layer(static_cast<int64_t>(i))) {
      list->remove_child(std::to_string(i));
      model->layers[i] = nullptr;
    }
  if (!embedding && !(head && tied_head) && model->embed_tokens) {
    model->remove_child("embed_tokens");
    model->embed_tokens = nullptr;
  }
  if (!head && model->norm) {
    model->remove_child("norm");
    model->norm = nullptr;
    if (lm_head) remove_child("lm_head");
    if (tied_head) remove_child("lm_head");
    lm_head = nullptr;
    tied_head = nullptr;
  }
}

Tensor CausalLM::add_aux_losses(Tensor l, const ContextSplit* context, bool router_loss) const {
  const double share = context ? 1.0 / double(context->degree) : 1.0;
  std::vector<Tensor> router;
  for (const auto& layer : model->layers) {
    if (!layer) continue;  // on another pipeline stage
    if (Tensor aux = layer->mlp->aux_loss(); aux.defined())
      l = add(l, share == 1.0 ? aux : mul(aux, share));
    if (Tensor r = layer->mlp->router_logits(); r.defined()) router.push_back(r);
  }
  if (router_loss && has_router_loss() && !router.empty())
    l = add(l, load_balancing_loss(router, config_.num_experts, config_.num_experts_per_tok,
                                   context ? context->sum : nullptr) *
                   config_.router_aux_loss_coef);
  return l;
}

bool CausalLM::has_router_loss() const {
  return config_.output_router_logits && config_.router_aux_loss_coef != 0.0;
}

Tensor CausalLM::head_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

KVCache CausalLM::new_cache() const {
  KVCache c;
  c.layers.resize(model->layers.size());
  return c;
}

}  // namespace hp::models
