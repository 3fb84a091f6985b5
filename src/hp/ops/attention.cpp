// scaled_dot_product_attention(_lse): the flash kernel (f32; bf16/f16 run through f32) with its
// fused backward (sliding window, sinks and the lse output included), or — for f64 inputs, used
// by gradient checks — the same math composed from ops with a materialized [T, S] softmax.
#include <cmath>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/attention.h"
#include "hp/ops/attention.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// Kernel view of a [B, H, T, D] tensor whose last dim is unit-stride (copied otherwise).
Tensor unit_last(const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// An uninitialized f32 tensor of t's [B, H, T, D] shape laid out as t is when t is a [B, T, H, D]
// buffer seen through transpose(1, 2) — the models' q, k, v, per-head views of a projection —
// else contiguous. The kernels write through strides, so the values are the same either way; the
// models' transpose back of the output is then contiguous (no copy before o_proj), and so are the
// q, k, v gradients after their transpose backward (no copy in the rotary and view backward).
Tensor empty_heads_like(const Tensor& t) {
  const Shape& s = t.shape();
  const bool heads_inner = t.stride(3) == 1 && t.stride(1) == s[3] && t.stride(2) == s[1] * s[3] &&
                           t.stride(0) == s[1] * s[2] * s[3];
  if (!heads_inner || t.is_contiguous()) return empty(s, DType::f32);
  return empty({s[0], s[2], s[1], s[3]}, DType::f32)
      .as_strided(s, {s[1] * s[2] * s[3], s[3], s[1] * s[3], 1}, 0);
}

kernels::AttentionStrides strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// f64 reference path: softmax(q kᵀ · scale + causal / window / segment mask | sinks) v, kv heads
// repeated for GQA, and the row log-sum-exp. seg: contiguous i32 [B, T] or undefined. Without
// sinks, a query that sees no key gets o = 0 and lse = -inf (the kernels' rule).
AttentionOut attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                 double scale, const Tensor& seg, int64_t window,
                                 const Tensor& sinks) {
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), Hkv = k.size(1), S = k.size(2),
                D = q.size(3);
  auto repeat = [&](const Tensor& t) {
    if (Hq == Hkv) return t;
    return reshape(expand(unsqueeze(t, 2), {B, Hkv, Hq / Hkv, S, D}), {B, Hq, S, D});
  };
  Tensor s = mul(matmul(q, transpose(repeat(k), -1, -2)), scale);  // [B, Hq, T, S]
  const int64_t mb = seg.defined() ? B : 1;
  Tensor mask = empty({mb, 1, T, S}, DType::f64), seen = empty({mb, 1, T, 1}, DType::f64);
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t i = 0; i < T; ++i) {
      bool any = false;
      for (int64_t j = 0; j < S; ++j) {
        const bool visible =
            (!causal || j <= i) && (window <= 0 || i - j < window) &&
            (!seg.defined() || seg.data<int32_t>()[b * T + i] == seg.data<int32_t>()[b * S + j]);
        mask.data<double>()[(b * T + i) * S + j] = visible ? 0.0 : -INFINITY;
        any = any || visible;
      }
      seen.data<double>()[b * T + i] = any ? 1.0 : 0.0;
    }
  if (sinks.defined()) {
    // The sink column keeps every row finite: softmax over [scores + mask | sink_h].
    const Tensor z = sinks.dtype() == s.dtype() ? sinks : cast(sinks, s.dtype());
    const Tensor full_s = cat({add(s, mask), expand(view(z, {1, Hq, 1, 1}), {B, Hq, T, 1})}, -1);
    return {matmul(narrow(softmax(full_s, -1), -1, 0, S), repeat(v)),
            logsumexp(full_s, {-1})};
  }
  // A fully masked row: scores 0 instead of -inf (no NaN), then its output zeroed, lse -inf.
  Tensor finite_mask = empty(mask.shape(), DType::f64);
  for (int64_t x = 0; x < mask.numel(); ++x) {
    const int64_t row = x / S;
    finite_mask.data<double>()[x] = seen.data<double>()[row] != 0.0 ? mask.data<double>()[x] : 0.0;
  }
  const Tensor masked = add(s, finite_mask), row_seen = squeeze(seen, -1);  // [mb, 1, T]
  return {mul(matmul(softmax(masked, -1), repeat(v)), seen),
          add(mul(logsumexp(masked, {-1}), row_seen), log(row_seen))};
}

// segments as contiguous i32 [B, T] (checked against q and k), or undefined.
Tensor segment_ids(const Tensor& segments, const Tensor& q, const Tensor& k) {
  if (!segments.defined()) return Tensor();
  if (segments.dim() != 2 || segments.size(0) != q.size(0) || segments.size(1) != q.size(2) ||
      k.size(2) != q.size(2) || (segments.dtype() != DType::i32 && segments.dtype() != DType::i64))
    HP_THROW(ValueError, "attention", "segments must be i32/i64 [B, T] with as many keys as ",
             "queries: got segments ", segments.desc(), " for q ", q.desc(), ", k ", k.desc());
  return segments.dtype() == DType::i32 ? segments.contiguous()
                                        : contiguous(cast(segments, DType::i32));
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<double> scale_opt, const Tensor& segments) {
  return scaled_dot_product_attention_lse(q, k, v, {causal, scale_opt, segments, 0, Tensor()}).out;
}

AttentionOut scaled_dot_product_attention_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOpts& ao) {
  HP_PROFILE_OP("scaled_dot_product_attention");
  for (const Tensor* t : {&q, &k, &v})
    if (!t->defined() || t->dim() != 4)
      HP_THROW(ValueError, "attention", "expects 4-D [B, H, T, D] operands, got q ", q.desc(),
               ", k ", k.desc(), ", v ", v.desc());
  if (k.shape() != v.shape() || q.size(0) != k.size(0) || q.size(3) != k.size(3) ||
      k.size(1) == 0 || q.size(1) % k.size(1) != 0)
    HP_THROW(ValueError, "attention", "incompatible q ", q.desc(), ", k ", k.desc(), ", v ", v.desc(),
             " (need k == v shapes, equal B and D, Hq divisible by Hkv)");
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    HP_THROW(ValueError, "attention", "dtypes differ: q ", q.desc(), ", k ", k.desc(), ", v ", v.desc());
  if (ao.window < 0 || (ao.window > 0 && !ao.causal))
    HP_THROW(ValueError, "attention", "window=", ao.window,
             ao.window < 0 ? " must be >= 0" : " needs causal attention");
  if (ao.sinks.defined() && (ao.sinks.dim() != 1 || ao.sinks.size(0) != q.size(1)))
    HP_THROW(ValueError, "attention", "sinks must be [heads_q=", q.size(1), "], got ",
             ao.sinks.desc());
  const bool causal = ao.causal;
  const double scale = ao.scale ? *ao.scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const Tensor seg = segment_ids(ao.segments, q, k);
  if (q.dtype() == DType::f64)
    return attention_composite(q, k, v, causal, scale, seg, ao.window, ao.sinks);
  if (q.dtype() != DType::f32) {
    // bf16/f16: compute in f32 (the cast ops carry the gradient back to the narrow dtype).
    AttentionOpts f = ao;
    f.scale = scale;
    f.segments = seg;
    AttentionOut r = scaled_dot_product_attention_lse(cast(q, DType::f32), cast(k, DType::f32),
                                                      cast(v, DType::f32), f);
    return {cast(r.out, q.dtype()), r.lse};
  }
  const kernels::AttentionShape shape{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  const Tensor sinks = !ao.sinks.defined()                ? Tensor()
                       : ao.sinks.dtype() == DType::f32 ? ao.sinks.contiguous()
                                                        : contiguous(cast(ao.sinks, DType::f32));
  kernels::AttentionOptions opts;
  opts.causal = causal;
  opts.scale = static_cast<float>(scale);
  opts.window = ao.window;
  if (sinks.defined()) opts.sinks = sinks.data<float>();
  if (seg.defined())
    opts.segments = {seg.data<int32_t>(), shape.seq_q, seg.data<int32_t>(), shape.seq_kv};
  Tensor qu = unit_last(q), ku = unit_last(k), vu = unit_last(v);
  Tensor o = empty_heads_like(qu);  // [B, Hq, T, D]
  Tensor lse = empty({shape.batch, shape.heads_q, shape.seq_q}, DType::f32);
  if (o.numel() > 0)
    kernels::attention_forward(shape, opts, {qu.raw_data(), strides_of(qu)},
                               {ku.raw_data(), strides_of(ku)}, {vu.raw_data(), strides_of(vu)},
                               {o.raw_data(), strides_of(o)}, lse.data<float>());
  const DType sink_dt = ao.sinks.defined() ? ao.sinks.dtype() : DType::f32;
  std::vector<Tensor> inputs = {q, k, v};
  if (sinks.defined()) inputs.push_back(ao.sinks);
  if (autograd::needs_grad(inputs)) {
    autograd::SavedTensor sq(qu), sk(ku), sv(vu), so(o), sl(lse);
    // The sinks (a parameter) go through the saved-tensor hooks like q, k, v: under FSDP the
    // gathered storage opts.sinks points at is released after the forward, and the hooks give the
    // re-gathered one. The ids stay alive with the closure: opts points into them.
    const autograd::SavedTensor ssink(sinks);
    const bool has_sinks = sinks.defined();
    autograd::record("attention", inputs, {o, lse}, [=](const std::vector<Tensor>& g) {
      (void)seg;
      kernels::AttentionOptions bo = opts;
      const Tensor sk_now = ssink.unpack();
      bo.sinks = has_sinks ? sk_now.data<float>() : nullptr;
      Tensor qq = sq.unpack(), kk = sk.unpack(), vv = sv.unpack(), oo = so.unpack();
      Tensor dout = unit_last(g[0]), dlse = g[1].contiguous();
      Tensor dq = empty_heads_like(qq), dk = empty_heads_like(kk), dv = empty_heads_like(vv);
      Tensor dz = has_sinks ? zeros({shape.heads_q}, DType::f32) : Tensor();
      if (dq.numel() > 0)
        kernels::attention_backward(
            shape, bo, {qq.raw_data(), strides_of(qq)}, {kk.raw_data(), strides_of(kk)},
            {vv.raw_data(), strides_of(vv)}, {oo.raw_data(), strides_of(oo)},
            sl.unpack().data<float>(), {dout.raw_data(), strides_of(dout)},
            {dq.raw_data(), strides_of(dq)}, {dk.raw_data(), strides_of(dk)},
            {dv.raw_data(), strides_of(dv)}, dlse.data<float>(),
            dz.defined() ? dz.data<float>() : nullptr);
      else
        dk.fill_(0.0), dv.fill_(0.0);
      std::vector<Tensor> grads = {dq, dk, dv};
      if (dz.defined()) grads.push_back(sink_dt == DType::f32 ? dz : cast(dz, sink_dt));
      return grads;
    });
  }
  return {o, lse};
}

}  // namespace hp
