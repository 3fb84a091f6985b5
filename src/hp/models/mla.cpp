#include "hp/models/mla.h"

#include <algorithm>
#include <cmath>

#include "hp/ops/ops.h"

namespace hp::models {

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double mla_softmax_scale(int64_t qk_head_dim, double yarn_factor, double mscale_all_dim) {
  double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
  if (mscale_all_dim != 0.0) {
    const double m = yarn_get_mscale(yarn_factor, mscale_all_dim);
    s *= m * m;
  }
  return s;
}

MLAttention::MLAttention(const MLAOptions& opt) : opt_(opt) {
  const MLAOptions& o = opt;
  if (o.hidden_size <= 0 || o.num_heads <= 0 || o.kv_lora_rank <= 0 || o.qk_rope_head_dim <= 0 ||
      o.qk_rope_head_dim % 2 != 0 || o.qk_nope_head_dim < 0 || o.v_head_dim <= 0 ||
      o.q_lora_rank < 0)
    HP_THROW(ValueError, "mla", "invalid sizes: hidden_size ", o.hidden_size, ", num_heads ",
             o.num_heads, ", q_lora_rank ", o.q_lora_rank, ", kv_lora_rank ", o.kv_lora_rank,
             ", qk_nope_head_dim ", o.qk_nope_head_dim, ", qk_rope_head_dim ", o.qk_rope_head_dim,
             " (must be even), v_head_dim ", o.v_head_dim);
  const int64_t h = o.hidden_size, qk = qk_head_dim(), nh = o.num_heads;
  auto lin = [&](int64_t in, int64_t out, bool bias) {
    return std::make_shared<nn::Linear>(in, out, bias, o.dtype, o.init_std);
  };
  // Registration order follows HF's __init__ so named_parameters lists like a state dict.
  if (o.q_lora_rank == 0) {
    q_proj = register_module("q_proj", lin(h, nh * qk, false));
  } else {
    q_a_proj = register_module("q_a_proj", lin(h, o.q_lora_rank, o.attention_bias));
    q_a_layernorm = register_module(
        "q_a_layernorm", std::make_shared<nn::RMSNorm>(o.q_lora_rank, o.rms_norm_eps, o.dtype));
    q_b_proj = register_module("q_b_proj", lin(o.q_lora_rank, nh * qk, false));
  }
  kv_a_proj_with_mqa = register_module(
      "kv_a_proj_with_mqa", lin(h, o.kv_lora_rank + o.qk_rope_head_dim, o.attention_bias));
  kv_a_layernorm = register_module(
      "kv_a_layernorm", std::make_shared<nn::RMSNorm>(o.kv_lora_rank, o.rms_norm_eps, o.dtype));
  kv_b_proj = register_module("kv_b_proj",
                              lin(o.kv_lora_rank, nh * (o.qk_nope_head_dim + o.v_head_dim), false));
  o_proj = register_module("o_proj", lin(nh * o.v_head_dim, h, o.attention_bias));
}

namespace {
// Appends `extra` zero columns to the last dim of a [B, H, T, D] tensor.
Tensor pad_last(const Tensor& t, int64_t extra) {
  if (extra == 0) return t;
  Shape s = t.shape();
  s.back() = extra;
  return cat({t, zeros(s, t.dtype())}, -1);
}
}  // namespace

Tensor MLAttention::forward(const Tensor& x, AttentionContext& ctx) const {
  if (x.dim() != 3)
    HP_THROW(ValueError, "mla", "expects x [batch, seq, hidden_size = ", opt_.hidden_size,
             "], got ", x.desc());
  if (!ctx.rope || ctx.rope->dim() != opt_.qk_rope_head_dim)
    HP_THROW(ValueError, "mla",
             "needs rotary tables over qk_rope_head_dim = ", opt_.qk_rope_head_dim, ", got ",
             ctx.rope ? ctx.rope->dim() : 0);
  auto [cos, sin] = rotary_tables(ctx, x.size(1));
  return attend(x, cos, sin, ctx.cache, ctx.context, ctx.segments);
}

Tensor MLAttention::attend(const Tensor& x, const Tensor& cos, const Tensor& sin, LayerCache* cache,
                           const ContextSplit* context, const Tensor& segments) const {
  const MLAOptions& o = opt_;
  if (x.dim() != 3 || x.size(2) != o.hidden_size)
    HP_THROW(ValueError, "mla", "expects x [batch, seq, hidden_size = ", o.hidden_size, "], got ",
             x.desc());
  const int64_t b = x.size(0), t = x.size(1), nh = o.num_heads, dn = o.qk_nope_head_dim,
                dr = o.qk_rope_head_dim, dv = o.v_head_dim, qk = qk_head_dim();
  const bool per_row = cos.dim() == 3 && cos.size(0) == b;  // [B, T, dr / 2]: positions per row
  if ((cos.dim() != 2 && !per_row) || cos.size(-2) != t || cos.size(-1) != dr / 2 ||
      sin.shape() != cos.shape())
    HP_THROW(ValueError, "mla", "cos/sin must be [seq = ", t, ", qk_rope_head_dim / 2 = ", dr / 2,
             "] (or [batch = ", b, ", seq, qk_rope_head_dim / 2]), got ", cos.desc(), " and ",
             sin.desc());

  Tensor q =
      q_proj ? q_proj->forward(x) : q_b_proj->forward(q_a_layernorm->forward(q_a_proj->forward(x)));
  q = transpose(view(q, {b, t, nh, qk}), 1, 2);  // [B, nh, T, qk]
  auto q_parts = split(q, {dn, dr}, -1);
  const Tensor q_rot = rotary_embedding(q_parts[1], cos, sin, o.rope_interleave, 2);

  auto kv_parts = split(kv_a_proj_with_mqa->forward(x), {o.kv_lora_rank, dr}, -1);
  const Tensor latent = kv_a_layernorm->forward(kv_parts[0]);  // [B, T, kv_lora_rank]
  // k_pe: a single head shared by all heads, [B, 1, T, dr] → broadcast to [B, nh, T, dr].
  const Tensor k_rot = expand(
      rotary_embedding(unsqueeze(kv_parts[1], 1), cos, sin, o.rope_interleave, 2), {b, nh, t, dr});
  Tensor kv = transpose(view(kv_b_proj->forward(latent), {b, t, nh, dn + dv}), 1, 2);
  auto kv_split = split(kv, {dn, dv}, -1);  // k_nope [B, nh, T, dn], v [B, nh, T, dv]

  const int64_t d = std::max(qk, dv);
  const Tensor qf = pad_last(cat({q_parts[0], q_rot}, -1), d - qk);
  Tensor kf = pad_last(cat({kv_split[0], k_rot}, -1), d - qk);
  Tensor vf = pad_last(contiguous(kv_split[1]), d - dv);
  bool causal = true;
  if (cache) {
    if (cache->k.defined()) {
      // The flash kernel's causal mask is aligned top-left, right only when queries and keys start
      // together; one new query may see the whole cache.
      if (t != 1)
        HP_THROW(ValueError, "mla",
                 "incremental decoding feeds one token per step after the prompt; got ", t,
                 " tokens with ", cache->k.size(2), " cached");
      kf = cat({cache->k, kf}, 2);
      vf = cat({cache->v, vf}, 2);
      causal = false;
    }
    cache->k = kf.is_contiguous() ? kf : contiguous(kf);
    cache->v = vf.is_contiguous() ? vf : contiguous(vf);
    kf = cache->k;
    vf = cache->v;
  }
  const double scale = o.softmax_scale > 0.0 ? o.softmax_scale : mla_softmax_scale(qk);
  Tensor attn = models::attend(context, qf, kf, vf, causal, scale, segments);  // [B, nh, T, d]
  if (d != dv) attn = narrow(attn, -1, 0, dv);
  attn = reshape(transpose(attn, 1, 2), {b, t, nh * dv});
  return o_proj->forward(attn);
}

}  // namespace hp::models
