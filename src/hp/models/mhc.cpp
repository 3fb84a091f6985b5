#include "hp/models/mhc.h"

#include "hp/ops/ops.h"

namespace hp::models {

namespace {
bool fusable(const Tensor& streams) {
  return streams.dtype() == DType::f32 || streams.dtype() == DType::bf16;
}
Tensor normal(const Shape& s, DType dt, double std) {
  return nn::init_skipped() ? empty(s, dt) : randn(s, DType::f32, 0.0, std).to(dt);
}
// rms(flatten(streams)) in f32: [B, T, N, D] → [B, T, N·D] (HF's unweighted RMSNorm).
Tensor normed_flat(const Tensor& streams, double eps) {
  Tensor flat = reshape(streams, {streams.size(0), streams.size(1), -1});
  if (flat.dtype() != DType::f32) flat = cast(flat, DType::f32);
  return rms_norm(flat, Tensor(), eps);
}
Tensor f32(const Tensor& t) { return t.dtype() == DType::f32 ? t : cast(t, DType::f32); }
}  // namespace

Tensor collapse_streams(const Tensor& pre, const Tensor& streams) {
  Tensor p = pre.dtype() == streams.dtype() ? pre : cast(pre, streams.dtype());
  return sum(mul(unsqueeze(p, -1), streams), {2});
}

HyperConnection::HyperConnection(int64_t hc_mult, int64_t hidden, int64_t sinkhorn_iters,
                                 double hc_eps, double norm_eps, DType dt, double init_std)
    : spec_{hc_mult, sinkhorn_iters, hc_eps, norm_eps, norm_eps} {
  const int64_t n = hc_mult, mixes = (2 + n) * n;
  // HF's _init_weights: fn normal, base zeros, scale ones (the f32 modules stay f32 in HF).
  (void)dt;
  fn = register_parameter("fn", normal({mixes, n * hidden}, DType::f32, init_std));
  base = register_parameter("base", zeros({mixes}, DType::f32));
  scale = register_parameter("scale", ones({3}, DType::f32));
}

HcMix HyperConnection::mix(const Tensor& streams, const nn::RMSNorm& norm) const {
  if (!fusable(streams)) return mix_composed(streams, norm);
  MhcSpec s = spec_;
  s.norm_eps = norm.eps;
  // A norm with a forward wrapper (TP, recompute, FSDP gathering) must see its input: it runs
  // after the fused collapse instead of inside it.
  const bool wrapped = norm.has_forward_wrapper();
  FusedMix f = fused_mhc_mix(streams, f32(fn), f32(base), f32(scale),
                             wrapped ? Tensor() : norm.weight, s);
  return HcMix{f.post, f.comb, wrapped ? norm.forward(f.input) : f.input};
}

HcMix HyperConnection::mix_composed(const Tensor& streams, const nn::RMSNorm& norm) const {
  const int64_t b = streams.size(0), t = streams.size(1), n = spec_.hc_mult;
  const double eps = spec_.hc_eps;
  // In f32 whatever the compute dtype (HF keeps the mHC modules in f32).
  const Tensor mixes = linear(normed_flat(streams, spec_.mix_norm_eps), f32(fn));  // [B, T, M]
  auto parts = split(mixes, {n, n, n * n}, -1);
  auto bases = split(f32(base), {n, n, n * n}, 0);
  auto scales = split(f32(scale), {1, 1, 1}, 0);
  HcMix m;
  const Tensor pre = add(sigmoid(add(mul(parts[0], scales[0]), bases[0])), eps);
  m.post = mul(sigmoid(add(mul(parts[1], scales[1]), bases[1])), 2.0);
  Tensor comb = add(mul(view(parts[2], {b, t, n, n}), scales[2]), view(bases[2], {n, n}));
  comb = add(softmax(comb, -1), eps);
  // Sinkhorn-Knopp: columns first, then iters − 1 rounds of rows and columns (HF's order).
  comb = div(comb, add(sum(comb, {-2}, true), eps));
  for (int64_t i = 0; i + 1 < spec_.sinkhorn_iters; ++i) {
    comb = div(comb, add(sum(comb, {-1}, true), eps));
    comb = div(comb, add(sum(comb, {-2}, true), eps));
  }
  m.comb = comb;
  m.input = norm.forward(collapse_streams(pre, streams));
  return m;
}

Tensor HyperConnection::fold(const HcMix& m, const Tensor& out, const Tensor& streams) {
  if (!fusable(streams) || out.dtype() != streams.dtype()) return fold_composed(m, out, streams);
  return fused_mhc_fold(m.post, m.comb, out, streams);
}

Tensor HyperConnection::fold_composed(const HcMix& m, const Tensor& out, const Tensor& streams) {
  const DType dt = streams.dtype();
  const Tensor post = m.post.dtype() == dt ? m.post : cast(m.post, dt);
  const Tensor comb = m.comb.dtype() == dt ? m.comb : cast(m.comb, dt);
  // post [B, T, N, 1] · out [B, T, 1, D] + combᵀ [B, T, N, N] · streams [B, T, N, D].
  return add(mul(unsqueeze(post, -1), unsqueeze(out, -2)),
             matmul(transpose(comb, -1, -2), streams));
}

HyperHead::HyperHead(int64_t hc_mult, int64_t hidden, double hc_eps, double norm_eps, DType dt,
                     double init_std)
    : n_(hc_mult), hc_eps_(hc_eps), norm_eps_(norm_eps) {
  (void)dt;
  hc_fn = register_parameter("hc_fn", normal({n_, n_ * hidden}, DType::f32, init_std));
  hc_base = register_parameter("hc_base", zeros({n_}, DType::f32));
  hc_scale = register_parameter("hc_scale", ones({1}, DType::f32));
}

Tensor HyperHead::forward(const Tensor& streams) const {
  return wrapped_forward(streams, [this](const Tensor& s) {
    const Tensor mixes = linear(normed_flat(s, norm_eps_), f32(hc_fn));  // [B, T, N]
    const Tensor pre = add(sigmoid(add(mul(mixes, f32(hc_scale)), f32(hc_base))), hc_eps_);
    return collapse_streams(pre, s);
  });
}

}  // namespace hp::models
