// scaled_dot_product_attention: the flash kernel (f32; bf16/f16 run through f32) with its fused
// backward, or — for f64 inputs, used by gradient checks — the same math composed from ops with a
// materialized [T, S] softmax.
#include <cmath>

#include "hp/autograd/node.h"
#include "hp/core/profiler.h"
#include "hp/kernels/cpu/attention.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

// Kernel view of a [B, H, T, D] tensor whose last dim is unit-stride (copied otherwise).
Tensor unit_last(const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

kernels::AttentionStrides strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// f64 reference path: softmax(q kᵀ · scale + causal / segment mask) v, kv heads repeated for
// GQA. seg: contiguous i32 [B, T] or undefined. A query that sees no key gets 0 (the kernels'
// rule).
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                           double scale, const Tensor& seg) {
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), Hkv = k.size(1), S = k.size(2),
                D = q.size(3);
  auto repeat = [&](const Tensor& t) {
    if (Hq == Hkv) return t;
    return reshape(expand(unsqueeze(t, 2), {B, Hkv, Hq / Hkv, S, D}), {B, Hq, S, D});
  };
  Tensor s = mul(matmul(q, transpose(repeat(k), -1, -2)), scale);  // [B, Hq, T, S]
  if (!causal && !seg.defined()) return matmul(softmax(s, -1), repeat(v));
  const int64_t mb = seg.defined() ? B : 1;
  Tensor mask = empty({mb, 1, T, S}, DType::f64), seen = empty({mb, 1, T, 1}, DType::f64);
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t i = 0; i < T; ++i) {
      bool any = false;
      for (int64_t j = 0; j < S; ++j) {
        const bool visible =
            (!causal || j <= i) &&
            (!seg.defined() || seg.data<int32_t>()[b * T + i] == seg.data<int32_t>()[b * T + j]);
        mask.data<double>()[(b * T + i) * S + j] = visible ? 0.0 : -INFINITY;
        any = any || visible;
      }
      seen.data<double>()[b * T + i] = any ? 1.0 : 0.0;
    }
  // A fully masked row: scores 0 instead of -inf (no NaN), then its output zeroed.
  Tensor finite_mask = empty(mask.shape(), DType::f64);
  for (int64_t x = 0; x < mask.numel(); ++x) {
    const int64_t row = x / S;
    finite_mask.data<double>()[x] = seen.data<double>()[row] != 0.0 ? mask.data<double>()[x] : 0.0;
  }
  return mul(matmul(softmax(add(s, finite_mask), -1), repeat(v)), seen);
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
  const double scale = scale_opt ? *scale_opt : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const Tensor seg = segment_ids(segments, q, k);
  if (q.dtype() == DType::f64) return attention_composite(q, k, v, causal, scale, seg);
  if (q.dtype() != DType::f32) {
    // bf16/f16: compute in f32 (the cast ops carry the gradient back to the narrow dtype).
    return cast(scaled_dot_product_attention(cast(q, DType::f32), cast(k, DType::f32),
                                             cast(v, DType::f32), causal, scale, seg),
                q.dtype());
  }
  const kernels::AttentionShape shape{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  kernels::AttentionOptions opts;
  opts.causal = causal;
  opts.scale = static_cast<float>(scale);
  if (seg.defined())
    opts.segments = {seg.data<int32_t>(), shape.seq_q, seg.data<int32_t>(), shape.seq_kv};
  Tensor qu = unit_last(q), ku = unit_last(k), vu = unit_last(v);
  Tensor o = empty(q.shape(), DType::f32);
  Tensor lse = empty({shape.batch, shape.heads_q, shape.seq_q}, DType::f32);
  if (o.numel() > 0)
    kernels::attention_forward(shape, opts, {qu.raw_data(), strides_of(qu)},
                               {ku.raw_data(), strides_of(ku)}, {vu.raw_data(), strides_of(vu)},
                               {o.raw_data(), strides_of(o)}, lse.data<float>());
  if (autograd::needs_grad({q, k, v})) {
    autograd::SavedTensor sq(qu), sk(ku), sv(vu), so(o), sl(lse);
    // The ids stay alive with the closure: opts points into them.
    autograd::record("attention", {q, k, v}, {o}, [=](const std::vector<Tensor>& g) {
      (void)seg;
      Tensor qq = sq.unpack(), kk = sk.unpack(), vv = sv.unpack(), oo = so.unpack();
      Tensor dout = unit_last(g[0]);
      Tensor dq = empty(qq.shape(), DType::f32), dk = empty(kk.shape(), DType::f32),
             dv = empty(vv.shape(), DType::f32);
      if (dq.numel() > 0)
        kernels::attention_backward(
            shape, opts, {qq.raw_data(), strides_of(qq)}, {kk.raw_data(), strides_of(kk)},
            {vv.raw_data(), strides_of(vv)}, {oo.raw_data(), strides_of(oo)},
            sl.unpack().data<float>(), {dout.raw_data(), strides_of(dout)},
            {dq.raw_data(), strides_of(dq)}, {dk.raw_data(), strides_of(dk)},
            {dv.raw_data(), strides_of(dv)});
      else
        dk.fill_(0.0), dv.fill_(0.0);
      return std::vector<Tensor>{dq, dk, dv};
    });
  }
  return o;
}

}  // namespace hp
