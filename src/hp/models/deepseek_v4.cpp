// DeepSeek-V4 attention (sliding / CSA / HCA with compressors and the lightning indexer); the plan
// and shapes are in deepseek_v4.h.
#include "hp/models/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "hp/autograd/grad_mode.h"
#include "hp/models/sink_attention.h"
#include "hp/ops/ops.h"

namespace hp::models {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A module holding parameters registered from outside (HF's bare nn.Parameter members).
class ParamModule : public nn::Module {
 public:
  Tensor add(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  template <class M>
  std::shared_ptr<M> add_module(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

std::shared_ptr<nn::Linear> lin(const ModelConfig& c, int64_t in, int64_t out) {
  return std::make_shared<nn::Linear>(in, out, false, c.dtype, c.initializer_range);
}

// The compress rope's config: compress_rope_theta and its own scaling (yarn).
ModelConfig compress_config(const ModelConfig& c) {
  ModelConfig t = c;
  t.rope_theta = c.compress_rope_theta;
  t.rope_scaling = c.compress_rope;
  return t;
}

}  // namespace

V4Compressor::V4Compressor(const ModelConfig& c, int64_t dim, int64_t rate, bool overlap)
    : dim_(dim), rate_(rate), overlap_(overlap) {
  const int64_t width = dim * (overlap ? 2 : 1);
  kv_proj = register_module("kv_proj", lin(c, c.hidden_size, width));
  gate_proj = register_module("gate_proj", lin(c, c.hidden_size, width));
  position_bias = register_parameter("position_bias", zeros({rate, width}, DType::f32));
  kv_norm = register_module("kv_norm", std::make_shared<nn::RMSNorm>(dim, c.rms_norm_eps, c.dtype));
}

Tensor V4Compressor::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
  const int64_t b = x.size(0), t = x.size(1), nw = t / rate_, m = rate_;
  if (nw == 0) return zeros({b, 0, dim_}, x.dtype());
  // The complete windows (a partial last one is not compressed).
  return pool(narrow(kv_proj->forward(x), 1, 0, nw * m),
              narrow(gate_proj->forward(x), 1, 0, nw * m), Tensor(), Tensor(),
              slice(cos, 0, 0, nw * m, m), slice(sin, 0, 0, nw * m, m));
}

Tensor V4Compressor::pool(const Tensor& kv_in, const Tensor& gate_in, const Tensor& prior_kv,
                          const Tensor& prior_gate, const Tensor& cos, const Tensor& sin,
                          Tensor* last_kv, Tensor* last_gate) const {
  const int64_t b = kv_in.size(0), m = rate_, nw = kv_in.size(1) / m, d = dim_;
  const int64_t width = d * (overlap_ ? 2 : 1);
  // [B, nw, rate, width]
  Tensor kv = reshape(kv_in, {b, nw, m, width});
  Tensor gate = add(reshape(gate_in, {b, nw, m, width}), position_bias);
  if (overlap_) {
    // Entry w pools window w−1's first series (Ca, [..., :d]) and window w's second (Cb): slots
    // [B, nw, 2·rate, d]; window 0's Ca slots are the prior window's (decoding) or zero kv with a
    // -inf gate (weight 0).
    auto kp = split(kv, {d, d}, -1);
    auto gp = split(gate, {d, d}, -1);
    if (last_kv) *last_kv = contiguous(squeeze(narrow(kp[0], 1, nw - 1, 1), 1));
    if (last_gate) *last_gate = contiguous(squeeze(narrow(gp[0], 1, nw - 1, 1), 1));
    Tensor prev_kv = prior_kv.defined() ? unsqueeze(prior_kv, 1) : zeros({b, 1, m, d}, kv.dtype());
    Tensor prev_gate =
        prior_gate.defined() ? unsqueeze(prior_gate, 1) : full({b, 1, m, d}, -kInf, gate.dtype());
    if (nw > 1) {
      prev_kv = cat({prev_kv, narrow(kp[0], 1, 0, nw - 1)}, 1);
      prev_gate = cat({prev_gate, narrow(gp[0], 1, 0, nw - 1)}, 1);
    }
    kv = cat({prev_kv, kp[1]}, 2);
    gate = cat({prev_gate, gp[1]}, 2);
  }
  // softmax(gate) over each window's slots (f32), the weighted sum, kv_norm, RoPE at w · rate.
  Tensor g = gate.dtype() == DType::f32 ? gate : cast(gate, DType::f32);
  Tensor w = softmax(g, 2);
  if (w.dtype() != kv.dtype()) w = cast(w, kv.dtype());
  Tensor pooled = kv_norm->forward(sum(mul(kv, w), {2}));  // [B, nw, d]
  return squeeze(rotate_trailing(unsqueeze(pooled, 2), cos, sin, true, 1), 2);
}

V4Indexer::V4Indexer(const ModelConfig& c)
    : heads_(c.index_n_heads), dim_(c.index_head_dim), topk_(c.index_topk),
      rate_(c.compress_rate_csa) {
  // HF nests the indexer's compressor parameters directly in the indexer (kv_proj, gate_proj,
  // position_bias, kv_norm), so the compressor's children are registered here by name.
  compressor = std::make_shared<V4Compressor>(c, dim_, rate_, true);
  register_module("kv_proj", compressor->kv_proj);
  register_module("gate_proj", compressor->gate_proj);
  compressor->position_bias =
      register_parameter("position_bias", compressor->position_bias);
  register_module("kv_norm", compressor->kv_norm);
  q_b_proj = register_module("q_b_proj", lin(c, c.q_lora_rank, heads_ * dim_));
  auto s = std::make_shared<ParamModule>();
  weights_proj = s->add_module("weights_proj", lin(c, c.hidden_size, heads_));
  scorer = register_module("scorer", std::static_pointer_cast<nn::Module>(s));
}

Tensor V4Indexer::select(const Tensor& x, const Tensor& q_residual, const Tensor& cos,
                         const Tensor& sin) const {
  // Only the selection leaves the indexer, so none of it is recorded (HF's indexer parameters get
  // no gradient either).
  autograd::NoGradGuard no_grad;
  return select_from(x, q_residual, compressor->forward(x, cos, sin), cos, sin, 0);
}

Tensor V4Indexer::select_from(const Tensor& x, const Tensor& q_residual, const Tensor& entries,
                              const Tensor& cos, const Tensor& sin, int64_t start) const {
  autograd::NoGradGuard no_grad;
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t nw = entries.size(1);  // entries [B, nw, Di]
  Tensor q = view(q_b_proj->forward(q_residual), {b, t, heads_, dim_});
  q = rotate_trailing(q, cos, sin, true, 1);  // [B, T, nI, Di] at the query positions
  // Σ_h w_{t,h} · ReLU(q_{t,h} · k_s) · Di^-½, w = weights_proj(x) · nI^-½: [B, T, nw].
  Tensor scores = mul(relu(matmul(q, transpose(unsqueeze(entries, 1), -1, -2))),
                      1.0 / std::sqrt(double(dim_)));
  Tensor w = mul(weights_proj->forward(x), 1.0 / std::sqrt(double(heads_)));
  const std::vector<double> s = contiguous(cast(sum(mul(scores, unsqueeze(w, -1)), {2}),
                                                DType::f32))
                                    .to_vector();
  // Per query: the top index_topk of the entries complete before it (w < (start + t + 1) /
  // rate); ties go to the lower index.
  std::vector<double> bias(static_cast<size_t>(b * t * nw), -kInf);
  std::vector<int64_t> order;
  for (int64_t r = 0; r < b * t; ++r) {
    const int64_t visible = std::min(nw, (start + r % t + 1) / rate_);
    order.resize(static_cast<size_t>(visible));
    std::iota(order.begin(), order.end(), 0);
    const double* row = s.data() + r * nw;
    const int64_t k = std::min(topk_, visible);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int64_t a, int64_t c) {
      return row[a] > row[c] || (row[a] == row[c] && a < c);
    });
    for (int64_t i = 0; i < k; ++i) bias[static_cast<size_t>(r * nw + order[i])] = 0;
  }
  return from_vector(bias, {b, t, nw}, DType::f32);
}

DeepseekV4Attention::DeepseekV4Attention(const ModelConfig& c, int64_t layer)
    : type_(c.layer_types.at(static_cast<size_t>(layer))),
      heads_(c.num_attention_heads),
      head_dim_(c.head_dim),
      rope_dim_(c.qk_rope_head_dim),
      window_(c.sliding_window),
      groups_(c.o_groups),
      eps_(c.rms_norm_eps),
      main_rope_(c, c.qk_rope_head_dim),
      compress_rope_(compress_config(c), c.qk_rope_head_dim) {
  // Registration in HF's order, so named_parameters lists like its state dict.
  q_a_proj = register_module("q_a_proj", lin(c, c.hidden_size, c.q_lora_rank));
  q_a_norm = register_module("q_a_norm",
                             std::make_shared<nn::RMSNorm>(c.q_lora_rank, c.rms_norm_eps, c.dtype));
  q_b_proj = register_module("q_b_proj", lin(c, c.q_lora_rank, heads_ * head_dim_));
  kv_proj = register_module("kv_proj", lin(c, c.hidden_size, head_dim_));
  kv_norm = register_module("kv_norm",
                            std::make_shared<nn::RMSNorm>(head_dim_, c.rms_norm_eps, c.dtype));
  // Grouped output projection: o_a is o_groups blocks [o_lora_rank, H·d / g] stacked on dim 0.
  o_a_proj = register_module("o_a_proj",
                             lin(c, heads_ * head_dim_ / groups_, groups_ * c.o_lora_rank));
  o_b_proj = register_module("o_b_proj", lin(c, groups_ * c.o_lora_rank, c.hidden_size));
  sinks = register_parameter("sinks", zeros({heads_}, DType::f32));
  if (type_ == kSlidingAttention) return;
  const bool csa = type_ == kCompressedSparseAttention;
  auto comp = std::make_shared<ParamModule>();
  kv_compressor = std::make_shared<V4Compressor>(
      c, head_dim_, csa ? c.compress_rate_csa : c.compress_rate_hca, csa);
  comp->add_module("kv_proj", kv_compressor->kv_proj);
  comp->add_module("gate_proj", kv_compressor->gate_proj);
  kv_compressor->position_bias = comp->add("position_bias", kv_compressor->position_bias);
  comp->add_module("kv_norm", kv_compressor->kv_norm);
  if (csa) indexer = comp->add_module("indexer", std::make_shared<V4Indexer>(c));
  compressor = register_module("compressor", std::static_pointer_cast<nn::Module>(comp));
}

DeepseekV4Attention::Projected DeepseekV4Attention::project(const Tensor& x, const Tensor& cos,
                                                            const Tensor& sin) const {
  // h: this rank's heads (all of them unless a tensor-parallel plan split q_b_proj, sinks and the
  // output projection's groups: models/deepseek_v4_tp.cpp).
  const int64_t b = x.size(0), t = x.size(1), d = head_dim_, h = q_b_proj->weight.size(0) / d;
  Projected p;
  p.q_res = q_a_norm->forward(q_a_proj->forward(x));  // [B, T, q_lora_rank]
  Tensor q = rms_norm(view(q_b_proj->forward(p.q_res), {b, t, h, d}), Tensor(), eps_);
  p.q = transpose(rotate_trailing(q, cos, sin, true, 1), 1, 2);  // [B, H, T, d]
  // One K=V head: [B, 1, T, d].
  p.kv = rotate_trailing(unsqueeze(kv_norm->forward(kv_proj->forward(x)), 1), cos, sin, true, 2);
  return p;
}

Tensor DeepseekV4Attention::forward(const Tensor& x, AttentionContext& ctx) const {
  if ((ctx.context && ctx.context->degree > 1) || ctx.segments.defined() ||
      ctx.positions.defined())
    HP_THROW(ValueError, "deepseek_v4",
             "context parallelism and packed documents are not supported for DeepSeek-V4");
  if (ctx.cache) return forward_cached(x, ctx);
  const int64_t t = x.size(1), d = head_dim_;
  auto [cos, sin] =
      (type_ == kSlidingAttention ? main_rope_ : compress_rope_).get(0, t, DType::f32);

  const Projected p = project(x, cos, sin);
  // The window keys through the flash kernel (window + sinks); the compressed entries
  // [B, 1, nw, d] as extra keys with their per-query visibility [B or 1, 1, T, nw].
  Tensor entries, entry_bias;
  if (kv_compressor) {
    entries = kv_compressor->forward(x, cos, sin);  // [B, nw, d]
    const int64_t nw = entries.size(1);
    if (nw > 0) {
      entry_bias = unsqueeze(indexer ? indexer->select(x, p.q_res, cos, sin)
                                     : detail::causal_entry_bias(t, nw, kv_compressor->rate()),
                             -3);
      entries = unsqueeze(entries, 1);
    } else {
      entries = Tensor();
    }
  }
  return project_out(window_sink_attention(p.q, p.kv, p.kv, window_, sinks,
                                           1.0 / std::sqrt(double(d)), entries, entry_bias),
                     cos, sin);
}

Tensor DeepseekV4Attention::project_out(const Tensor& attn, const Tensor& cos,
                                        const Tensor& sin) const {
  const int64_t b = attn.size(0), h = attn.size(1), t = attn.size(2), d = head_dim_;
  // K = V carried RoPE into the output's rope slice: rotate it back by the query's angle.
  Tensor o = rotate_trailing(attn, cos, neg(sin), true, 2);  // [B, H, T, d]
  // Grouped output projection: [g, B·T, H·d / g] · per-group [H·d / g, o_lora] → [B, T, g·o_lora].
  const int64_t g = groups_ * h / heads_, in = h * d / g, rank = o_a_proj->weight.size(0) / g;
  Tensor og = reshape(permute(reshape(transpose(o, 1, 2), {b, t, g, in}), {2, 0, 1, 3}),
                      {g, b * t, in});
  Tensor wa = transpose(view(o_a_proj->weight, {g, rank, in}), 1, 2);
  Tensor y = matmul(og, wa.dtype() == og.dtype() ? wa : cast(wa, og.dtype()));
  y = reshape(permute(view(y, {g, b, t, rank}), {1, 2, 0, 3}), {b, t, g * rank});
  return o_b_proj->forward(y);
}

}  // namespace hp::models
