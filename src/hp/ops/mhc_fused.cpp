// MegaMHC (mhc_fused.h): forward and backward of the fused mHC mix and fold, one token row at a
// time.
#include "hp/ops/mhc_fused.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/norm.h"
#include "hp/kernels/cpu/norm_table.h"
#include "hp/ops/mhc_rows.h"
#include "hp/ops/ops.h"

namespace hp {

namespace {

using autograd::SavedTensor;
using kernels::EwOp;

constexpr int64_t kRowGrain = 8;

// Contiguous f32 row functions of the active ISA.
struct RowOps {
  const kernels::EwTable& t = kernels::kernel_table<kernels::EwTable>();
  const kernels::NormTable<float>& norm = kernels::kernel_table<kernels::NormTable<float>>();
  float dot(const float* a, const float* b, int64_t n) const { return t.dot_f32(a, b, n); }
  // y = a · x
  void scale(float a, const float* x, float* y, int64_t n) const {
    const float p[2] = {a, 0.0f};
    const float* in[1] = {x};
    t.f32[int(EwOp::affine)](y, in, n, p);
  }
  // y += a · x (tmp [n] scratch): a · x rounded, then the add, as the composed ops round.
  void axpy(float a, const float* x, float* y, float* tmp, int64_t n) const {
    scale(a, x, tmp, n);
    const float* in[2] = {tmp, y};
    t.f32[int(EwOp::add)](y, in, n, nullptr);
  }
  // A row of t (f32 or bf16) at element offset `off` as f32: the data itself, or converted to buf.
  const float* row_in(const Tensor& x, int64_t off, int64_t n, float* buf) const {
    if (x.dtype() == DType::f32) return x.data<float>() + off;
    t.bf16_to_f32(static_cast<const uint16_t*>(x.raw_data()) + off, buf, n);
    return buf;
  }
  // Writes an f32 row into y (f32 or bf16) at element offset `off`.
  void row_out(const float* src, const Tensor& y, int64_t off, int64_t n) const {
    if (y.dtype() == DType::f32) {
      if (src != y.data<float>() + off) std::copy(src, src + n, y.data<float>() + off);
    } else {
      t.f32_to_bf16(src, static_cast<uint16_t*>(y.raw_data()) + off, n);
    }
  }
};

float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

// One row's mixing weights from its mixes m [M]: pre and post [N], and every Sinkhorn state
// (states [L + 1, N, N]: the softmax + eps, then each normalization's output; den [L, N]: each
// normalization's denominators). L = max(1, 2·iters − 1): a column step, then iters − 1 rounds of
// a row and a column step (transformers' order).
struct RowMix {
  int64_t n, steps;
  float hc_eps;
  std::vector<float> sig_pre, pre, sig_post, post, p, states, den;
  RowMix(const MhcSpec& s)
      : n(s.hc_mult),
        steps(std::max<int64_t>(1, 2 * s.sinkhorn_iters - 1)),
        hc_eps(float(s.hc_eps)),
        sig_pre(size_t(n)),
        pre(size_t(n)),
        sig_post(size_t(n)),
        post(size_t(n)),
        p(size_t(n * n)),
        states(size_t((steps + 1) * n * n)),
        den(size_t(steps * n)) {}
  const float* comb() const { return states.data() + steps * n * n; }

  void compute(const float* m, const float* base, const float* scale) {
    for (int64_t k = 0; k < n; ++k) {
      sig_pre[k] = sigmoid(m[k] * scale[0] + base[k]);
      pre[k] = sig_pre[k] + hc_eps;
      sig_post[k] = sigmoid(m[n + k] * scale[1] + base[n + k]);
      post[k] = 2.0f * sig_post[k];
    }
    // comb[i, j] = m[2N + i·N + j]: softmax over j.
    float* c = states.data();
    for (int64_t i = 0; i < n; ++i) {
      float* pr = p.data() + i * n;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        pr[j] = m[2 * n + i * n + j] * scale[2] + base[2 * n + i * n + j];
        mx = std::max(mx, pr[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += (pr[j] = std::exp(pr[j] - mx));
      for (int64_t j = 0; j < n; ++j) {
        pr[j] /= sum;
        c[i * n + j] = pr[j] + hc_eps;
      }
    }
    for (int64_t s = 0; s < steps; ++s) {
      const float* in = states.data() + s * n * n;
      float* out = states.data() + (s + 1) * n * n;
      float* d = den.data() + s * n;
      const bool col = s % 2 == 0;
      for (int64_t a = 0; a < n; ++a) {
        float sum = 0.0f;
        for (int64_t b = 0; b < n; ++b) sum += col ? in[b * n + a] : in[a * n + b];
        d[a] = sum + hc_eps;
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] = in[i * n + j] / d[col ? j : i];
    }
  }

  // d logits of the comb block [N, N] from d comb (dc, overwritten as scratch) through the
  // Sinkhorn steps and the softmax: out' = in / d  ⇒  d in = (d out' − Σ d out'·out') / d, the
  // sum over the normalized axis.
  void comb_backward(float* dc, float* dz) const {
    for (int64_t s = steps - 1; s >= 0; --s) {
      const float* out = states.data() + (s + 1) * n * n;
      const float* d = den.data() + s * n;
      const bool col = s % 2 == 0;
      for (int64_t a = 0; a < n; ++a) {
        float dot = 0.0f;
        for (int64_t b = 0; b < n; ++b) {
          const int64_t ij = col ? b * n + a : a * n + b;
          dot += dc[ij] * out[ij];
        }
        for (int64_t b = 0; b < n; ++b) {
          const int64_t ij = col ? b * n + a : a * n + b;
          dc[ij] = (dc[ij] - dot) / d[a];
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {  // softmax: dz = p ⊙ (dp − Σ p·dp)
      const float* pr = p.data() + i * n;
      const float* dp = dc + i * n;
      float dot = 0.0f;
      for (int64_t j = 0; j < n; ++j) dot += pr[j] * dp[j];
      for (int64_t j = 0; j < n; ++j) dz[i * n + j] = pr[j] * (dp[j] - dot);
    }
  }
};

// y [D] = Σ_n pre_n · x_n, x [N, D].
void collapse_row(const RowOps& ops, const float* pre, const float* x, int64_t n, int64_t d,
                  float* y, float* tmp) {
  ops.scale(pre[0], x, y, d);
  for (int64_t k = 1; k < n; ++k) ops.axpy(pre[k], x + k * d, y, tmp, d);
}

}  // namespace

namespace mhc_detail {

void MixRows::operator()(int64_t lo, int64_t hi) const {
  const int64_t n = spec.hc_mult, d = input.shape().back(), k = n * d, m = (2 + n) * n;
  const RowOps ops;
  RowMix rm(spec);
  std::vector<float> xbuf(static_cast<size_t>(k)), y(static_cast<size_t>(d)),
      tmp(static_cast<size_t>(d)), o(static_cast<size_t>(d));
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = ops.row_in(x, r * k, k, xbuf.data());
    const float rs = 1.0f / std::sqrt(ops.dot(xr, xr, k) / float(k) + float(spec.mix_norm_eps));
    rstd[2 * r] = rs;
    float* mr = mixes + r * m;
    for (int64_t j = 0; j < m; ++j) mr[j] *= rs;
    rm.compute(mr, base, scale);
    std::copy(rm.post.begin(), rm.post.end(), post + r * n);
    std::copy(rm.comb(), rm.comb() + n * n, comb + r * n * n);
    collapse_row(ops, rm.pre.data(), xr, n, d, y.data(), tmp.data());
    if (norm_weight) {
      ops.norm.rms_fwd(y.data(), norm_weight, o.data(), rstd + 2 * r + 1, 1, d,
                       float(spec.norm_eps));
      ops.row_out(o.data(), input, r * d, d);
    } else {
      rstd[2 * r + 1] = 1.0f;
      ops.row_out(y.data(), input, r * d, d);
    }
  }
}

void MixGradRows::operator()(int64_t bi, int64_t r0, int64_t r1) const {
  const int64_t n = spec.hc_mult, d = dinput.shape().back(), k = n * d, m = (2 + n) * n;
  const RowOps ops;
  RowMix rm(spec);
  std::vector<float> xbuf(static_cast<size_t>(k)), gbuf(static_cast<size_t>(d)),
      y(static_cast<size_t>(d)), tmp(static_cast<size_t>(d)), dc(static_cast<size_t>(n * n)),
      dz(static_cast<size_t>(m));
  float* dw = dw_part ? dw_part + bi * d : nullptr;
  float* db = db_part + bi * m;
  float* ds = ds_part + bi * 3;
  // The block's partials start at 0 here (a plan reruns the pass on the same buffers).
  if (dw) std::fill(dw, dw + d, 0.0f);
  std::fill(db, db + m, 0.0f);
  std::fill(ds, ds + 3, 0.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const float* mr = mixes + r * m;
    rm.compute(mr, base, scale);
    const float* xr = ops.row_in(x, r * k, k, xbuf.data());
    collapse_row(ops, rm.pre.data(), xr, n, d, y.data(), tmp.data());
    const float* g = ops.row_in(dinput, r * d, d, gbuf.data());
    float* dyr = dy + r * d;
    if (norm_weight)
      ops.norm.rms_bwd(g, y.data(), norm_weight, rstd + 2 * r + 1, dyr, dw, 1, d);
    else
      std::copy(g, g + d, dyr);
    const float* dpr = dpost + r * n;
    for (int64_t i = 0; i < n; ++i) {
      const float dpre = ops.dot(dyr, xr + i * d, d);
      dz[i] = dpre * rm.sig_pre[i] * (1.0f - rm.sig_pre[i]);
      dz[n + i] = dpr[i] * 2.0f * rm.sig_post[i] * (1.0f - rm.sig_post[i]);
    }
    std::copy(dcomb + r * n * n, dcomb + (r + 1) * n * n, dc.begin());
    rm.comb_backward(dc.data(), dz.data() + 2 * n);
    const float rs = rstd[2 * r];
    for (int64_t j = 0; j < m; ++j) {
      const int64_t grp = j < n ? 0 : j < 2 * n ? 1 : 2;
      db[j] += dz[j];
      ds[grp] += dz[j] * mr[j];
      dm[r * m + j] = dz[j] * scale[grp] * rs;
    }
  }
}

void MixDxRows::operator()(int64_t lo, int64_t hi) const {
  const int64_t n = spec.hc_mult, k = x.shape().back(), d = k / n, m = (2 + n) * n;
  const RowOps ops;
  std::vector<float> xbuf(static_cast<size_t>(k)), tmp(static_cast<size_t>(k));
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = ops.row_in(x, r * k, k, xbuf.data());
    float* gr = g + r * k;
    const float rs = rstd[2 * r];
    const float c = rs * rs * ops.dot(gr, xr, k) / float(k);
    ops.axpy(-c, xr, gr, tmp.data(), k);
    const float* mr = mixes + r * m;
    for (int64_t i = 0; i < n; ++i) {
      const float pre = sigmoid(mr[i] * scale[0] + base[i]) + float(spec.hc_eps);
      ops.axpy(pre, dy + r * d, gr + i * d, tmp.data(), d);
    }
    ops.row_out(gr, dx, r * k, k);
  }
}

void sum_partials(const float* part, int64_t blocks, int64_t len, float* out) {
  std::fill(out, out + len, 0.0f);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < len; ++j) out[j] += part[b * len + j];
}

void FoldRows::operator()(int64_t lo, int64_t hi) const {
  const int64_t d = out.shape().back(), k = x.shape().back(), n = k / d;
  const RowOps ops;
  std::vector<float> xbuf(static_cast<size_t>(k)), obuf(static_cast<size_t>(d)),
      acc(static_cast<size_t>(k)), tmp(static_cast<size_t>(d));
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = ops.row_in(x, r * k, k, xbuf.data());
    const float* orow = ops.row_in(out, r * d, d, obuf.data());
    const float* pr = post + r * n;
    const float* cr = comb + r * n * n;
    // y_j = post_j · out + Σ_i comb[i, j] · x_i
    float* a = y.dtype() == DType::f32 ? y.data<float>() + r * k : acc.data();
    for (int64_t j = 0; j < n; ++j) {
      float* aj = a + j * d;
      ops.scale(pr[j], orow, aj, d);
      for (int64_t i = 0; i < n; ++i) ops.axpy(cr[i * n + j], xr + i * d, aj, tmp.data(), d);
    }
    ops.row_out(a, y, r * k, k);
  }
}

void FoldGradRows::operator()(int64_t lo, int64_t hi) const {
  const int64_t d = out.shape().back(), k = x.shape().back(), n = k / d;
  const RowOps ops;
  std::vector<float> gbuf(static_cast<size_t>(k)), xbuf(static_cast<size_t>(k)),
      obuf(static_cast<size_t>(d)), acc(static_cast<size_t>(k)), tmp(static_cast<size_t>(d));
  for (int64_t r = lo; r < hi; ++r) {
    const float* gr = ops.row_in(g, r * k, k, gbuf.data());
    const float* xr = ops.row_in(x, r * k, k, xbuf.data());
    const float* orow = ops.row_in(out, r * d, d, obuf.data());
    const float* pr = post + r * n;
    const float* cr = comb + r * n * n;
    for (int64_t j = 0; j < n; ++j) {
      dpost[r * n + j] = ops.dot(gr + j * d, orow, d);
      for (int64_t i = 0; i < n; ++i)
        dcomb[r * n * n + i * n + j] = ops.dot(gr + j * d, xr + i * d, d);
    }
    // d out = Σ_j post_j · g_j; d x_i = Σ_j comb[i, j] · g_j.
    float* a = acc.data();
    collapse_row(ops, pr, gr, n, d, a, tmp.data());
    ops.row_out(a, dout, r * d, d);
    for (int64_t i = 0; i < n; ++i) {
      float* ai = a + i * d;
      ops.scale(cr[i * n], gr, ai, d);
      for (int64_t j = 1; j < n; ++j) ops.axpy(cr[i * n + j], gr + j * d, ai, tmp.data(), d);
    }
    ops.row_out(a, dx, r * k, k);
  }
}

}  // namespace mhc_detail

namespace {

// The norm weight as f32 (undefined without a norm).
Tensor f32_weight(const Tensor& w) {
  if (!w.defined()) return Tensor();
  return w.dtype() == DType::f32 ? w.detach().contiguous() : cast(w.detach(), DType::f32);
}

void check_mix(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
               const Tensor& w, const MhcSpec& s) {
  const int64_t n = s.hc_mult;
  if (n < 1 || s.sinkhorn_iters < 0)
    HP_THROW(ValueError, "mhc", "hc_mult = ", n,
             " must be >= 1 and hc_sinkhorn_iters = ", s.sinkhorn_iters, " >= 0");
  if (x.dim() != 4 || x.size(2) != n || (x.dtype() != DType::f32 && x.dtype() != DType::bf16))
    HP_THROW(ValueError, "mhc", "streams must be [B, T, ", n, ", hidden] f32 or bf16, got ",
             x.desc());
  const int64_t d = x.size(3), m = (2 + n) * n;
  auto need = [](const Tensor& t, const Shape& shape, const char* what) {
    if (!t.defined() || t.shape() != shape || t.dtype() != DType::f32)
      HP_THROW(ValueError, "mhc", what, " must be ", shape_str(shape), " f32, got ",
               t.defined() ? t.desc() : std::string("undefined"));
  };
  need(fn, {m, n * d}, "fn");
  need(base, {m}, "base");
  need(scale, {3}, "scale");
  if (w.defined() && (w.shape() != Shape{d} || !is_floating(w.dtype())))
    HP_THROW(ValueError, "mhc", "the norm weight must be [", d, "] float, got ", w.desc());
}

struct MixSaved {
  SavedTensor x;  // [R, N, D] streams
  // Parameters (w32: the norm weight as f32; undefined: no norm), through the saved-tensor hooks
  // like the streams: under FSDP they are views of a gathered buffer that is freed after the
  // forward and re-gathered for the backward.
  SavedTensor fn, base, scale, w32;
  Tensor mixes;  // [R, M] f32
  Tensor rstd;   // [R, 2] f32: the streams' rms, the collapse's
  MhcSpec spec;
  bool need_x, need_fn, need_base, need_scale, need_w;
  DType w_dtype;
};

// The grads of the mix's inputs from d post [R, N], d comb [R, N, N], d input [R, D].
std::vector<Tensor> mix_backward(const MixSaved& sv, const Tensor& dpost_in, const Tensor& dcomb_in,
                                 const Tensor& dinput_in) {
  const Tensor x = sv.x.unpack();
  const Tensor fn = sv.fn.unpack(), base = sv.base.unpack(), scale = sv.scale.unpack(),
               w32 = sv.w32.unpack();
  const int64_t n = sv.spec.hc_mult, d = x.size(3), k = n * d, m = (2 + n) * n;
  const int64_t rows = x.numel() / k;
  const Tensor dpost = dpost_in.contiguous(), dcomb = dcomb_in.contiguous();
  const Tensor dinput = dinput_in.dtype() == x.dtype() ? dinput_in.contiguous()
                                                       : cast(dinput_in, x.dtype()).contiguous();
  const float* mp = sv.mixes.data<float>();
  const float* rp = sv.rstd.data<float>();
  // d mixes already scaled by the row's rms r ([R, M]: the GEMMs' left operand), and d collapse.
  Tensor dm = empty({rows, m});
  Tensor dy = empty({rows, d});
  const int64_t block = kernels::norm_grad_block_rows(rows);
  const int64_t nb = num_blocks(rows, block);
  // Per fixed block of rows: partials of d w [D], d base [M], d scale [3].
  std::vector<float> dw_part(size_t(nb * d), 0.0f), db_part(size_t(nb * m), 0.0f),
      ds_part(size_t(nb * 3), 0.0f);
  const mhc_detail::MixGradRows pass{reshape(x, {rows, k}),
                                     mp,
                                     rp,
                                     base.data<float>(),
                                     scale.data<float>(),
                                     w32.defined() ? w32.data<float>() : nullptr,
                                     dpost.data<float>(),
                                     dcomb.data<float>(),
                                     reshape(dinput, {rows, d}),
                                     dm.data<float>(),
                                     dy.data<float>(),
                                     sv.need_w ? dw_part.data() : nullptr,
                                     db_part.data(),
                                     ds_part.data(),
                                     sv.spec};
  parallel_blocks(rows, block, pass);
  std::vector<Tensor> grads;
  const Tensor xf = reshape(x.dtype() == DType::f32 ? x : cast(x, DType::f32), {rows, k});
  if (sv.need_x) {
    // x gets the collapse's pre_n · d y and, through m = (x · fnᵀ) · r, G − x · r² (G · x) / K
    // with G = (d m · r) · fn: in place in G [R, K].
    Tensor gx = matmul(dm, fn);
    Tensor dx = x.dtype() == DType::f32 ? gx : empty({rows, k}, x.dtype());
    const mhc_detail::MixDxRows last{reshape(x, {rows, k}),
                                     mp,
                                     rp,
                                     base.data<float>(),
                                     scale.data<float>(),
                                     dy.data<float>(),
                                     gx.data<float>(),
                                     dx,
                                     sv.spec};
    parallel_for(0, rows, kRowGrain, last);
    grads.push_back(reshape(dx, x.shape()));
  } else {
    grads.emplace_back();
  }
  grads.push_back(sv.need_fn ? matmul(transpose(dm, 0, 1), xf) : Tensor());
  auto summed = [nb](const std::vector<float>& part, int64_t len) {
    Tensor t = empty({len});
    mhc_detail::sum_partials(part.data(), nb, len, t.data<float>());
    return t;
  };
  grads.push_back(sv.need_base ? summed(db_part, m) : Tensor());
  grads.push_back(sv.need_scale ? summed(ds_part, 3) : Tensor());
  Tensor dw;
  if (sv.need_w) {
    dw = summed(dw_part, d);
    if (sv.w_dtype != DType::f32) dw = dw.to(sv.w_dtype);
  }
  grads.push_back(dw);  // the caller drops it when there is no norm weight
  return grads;
}

}  // namespace

FusedMix fused_mhc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base,
                       const Tensor& scale, const Tensor& norm_weight, const MhcSpec& spec) {
  check_mix(streams, fn, base, scale, norm_weight, spec);
  const int64_t b = streams.size(0), t = streams.size(1), n = spec.hc_mult, d = streams.size(3);
  const int64_t k = n * d, rows = b * t;
  const Tensor x = streams.detach().contiguous();
  const Tensor fnd = fn.detach().contiguous(), bd = base.detach().contiguous(),
               sd = scale.detach().contiguous();
  const Tensor w32 = f32_weight(norm_weight);
  Tensor mixes;
  {
    autograd::NoGradGuard ng;
    // The logits' GEMM on the raw streams ([R, K] · [K, M]); each row is scaled by its rms below.
    const Tensor xf = x.dtype() == DType::f32 ? x : cast(x, DType::f32);
    mixes = linear(reshape(xf, {rows, k}), fnd).contiguous();
  }
  FusedMix out;
  out.post = empty({b, t, n});
  out.comb = empty({b, t, n, n});
  out.input = empty({b, t, d}, x.dtype());
  Tensor rstd = empty({rows, 2});
  const mhc_detail::MixRows pass{reshape(x, {rows, k}),
                                 mixes.data<float>(),
                                 rstd.data<float>(),
                                 bd.data<float>(),
                                 sd.data<float>(),
                                 w32.defined() ? w32.data<float>() : nullptr,
                                 out.post.data<float>(),
                                 out.comb.data<float>(),
                                 reshape(out.input, {rows, d}),
                                 spec};
  parallel_for(0, rows, kRowGrain, pass);
  std::vector<Tensor> inputs = {streams, fn, base, scale};
  if (norm_weight.defined()) inputs.push_back(norm_weight);
  if (autograd::needs_grad(inputs)) {
    auto sv = std::make_shared<MixSaved>();
    sv->x = SavedTensor(x);
    sv->fn = SavedTensor(fnd);
    sv->base = SavedTensor(bd);
    sv->scale = SavedTensor(sd);
    sv->w32 = SavedTensor(w32);
    sv->mixes = mixes;
    sv->rstd = rstd;
    sv->spec = spec;
    sv->need_x = streams.requires_grad();
    sv->need_fn = fn.requires_grad();
    sv->need_base = base.requires_grad();
    sv->need_scale = scale.requires_grad();
    sv->need_w = norm_weight.defined() && norm_weight.requires_grad();
    sv->w_dtype = norm_weight.defined() ? norm_weight.dtype() : DType::f32;
    const bool has_w = norm_weight.defined();
    autograd::record("MegaMHC", inputs, {out.post, out.comb, out.input},
                     [sv, has_w](const std::vector<Tensor>& g) {
                       std::vector<Tensor> grads = mix_backward(*sv, g[0], g[1], g[2]);
                       if (!has_w) grads.resize(4);
                       return grads;
                     });
  }
  return out;
}

namespace {

// d post [R, N], d comb [R, N, N], d out [R, D], d streams [R, N, D] from d new streams g.
std::vector<Tensor> fold_backward(const Tensor& post, const Tensor& comb, const Tensor& out,
                                  const Tensor& x, const Tensor& g_in) {
  const int64_t n = x.size(2), d = x.size(3), k = n * d, rows = x.numel() / k;
  const Tensor g =
      g_in.dtype() == x.dtype() ? g_in.contiguous() : cast(g_in, x.dtype()).contiguous();
  Tensor dpost = empty(post.shape()), dcomb = empty(comb.shape());
  Tensor dout = empty(out.shape(), out.dtype()), dx = empty(x.shape(), x.dtype());
  const mhc_detail::FoldGradRows pass{
      post.data<float>(),    comb.data<float>(),       reshape(out, {rows, d}),
      reshape(x, {rows, k}), reshape(g, {rows, k}),    dpost.data<float>(),
      dcomb.data<float>(),   reshape(dout, {rows, d}), reshape(dx, {rows, k})};
  parallel_for(0, rows, kRowGrain, pass);
  return {dpost, dcomb, dout, dx};
}

}  // namespace

Tensor fused_mhc_fold(const Tensor& post_in, const Tensor& comb_in, const Tensor& out_in,
                      const Tensor& streams) {
  if (streams.dim() != 4 || (streams.dtype() != DType::f32 && streams.dtype() != DType::bf16))
    HP_THROW(ValueError, "mhc", "fold: streams must be [B, T, N, hidden] f32 or bf16, got ",
             streams.desc());
  const int64_t b = streams.size(0), t = streams.size(1), n = streams.size(2), d = streams.size(3);
  const int64_t k = n * d, rows = b * t;
  if (post_in.shape() != Shape{b, t, n} || post_in.dtype() != DType::f32 ||
      comb_in.shape() != Shape{b, t, n, n} || comb_in.dtype() != DType::f32 ||
      out_in.shape() != Shape{b, t, d} || out_in.dtype() != streams.dtype())
    HP_THROW(ValueError, "mhc", "fold: post ", post_in.desc(), ", comb ", comb_in.desc(), ", out ",
             out_in.desc(), " do not fit streams ", streams.desc());
  const Tensor post = post_in.detach().contiguous(), comb = comb_in.detach().contiguous();
  const Tensor out = out_in.detach().contiguous(), x = streams.detach().contiguous();
  Tensor y = empty(x.shape(), x.dtype());
  const mhc_detail::FoldRows pass{post.data<float>(), comb.data<float>(), reshape(out, {rows, d}),
                                  reshape(x, {rows, k}), reshape(y, {rows, k})};
  parallel_for(0, rows, kRowGrain, pass);
  if (autograd::needs_grad({post_in, comb_in, out_in, streams})) {
    const SavedTensor so(out), sx(x);
    autograd::record("MegaMHCFold", {post_in, comb_in, out_in, streams}, {y},
                     [post, comb, so, sx](const std::vector<Tensor>& g) {
                       return fold_backward(post, comb, so.unpack(), sx.unpack(), g[0]);
                     });
  }
  return y;
}

}  // namespace hp
