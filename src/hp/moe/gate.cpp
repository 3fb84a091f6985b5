// MegaGate (gate.h): forward and backward of the fused router, one token row at a time.
#include "hp/moe/gate.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <mutex>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/gate_topk.h"
#include "hp/ops/ops.h"

namespace hp::moe {

GateScore gate_score_from_name(const std::string& name) {
  if (name == "softmax") return GateScore::softmax;
  if (name == "sigmoid") return GateScore::sigmoid;
  if (name == "sqrtsoftplus") return GateScore::sqrt_softplus;
  HP_THROW(ValueError, "moe", "router scoring '", name,
           "' is not softmax, sigmoid or sqrtsoftplus");
}

namespace {

using kernels::GateSigmoidTopKFn;
using kernels::GateTopKFn;
using kernels::GateTopKScratch;
using kernels::GateTopKShape;
using kernels::GateTopKTable;

constexpr int64_t kRowGrain = 16;

float softplus(float x) {  // log(1 + e^x) without overflow
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Contiguous f32 row functions of the active ISA (the elementwise kernels' own, so a row's
// results match the tensor ops' bit for bit and never depend on the thread count) and the
// selection's.
struct RowOps {
  const kernels::EwTable& t = kernels::kernel_table<kernels::EwTable>();
  const GateTopKFn topk = kernels::kernel_table<GateTopKTable>().topk;
  const GateSigmoidTopKFn sigmoid_topk = kernels::kernel_table<GateTopKTable>().sigmoid_topk;
  void unary(kernels::EwOp op, const float* x, float* y, int64_t n,
             std::initializer_list<float> params = {}) const {
    const float* in[1] = {x};
    t.f32[int(op)](y, in, n, params.begin());
  }
  void add(const float* a, const float* b, float* y, int64_t n) const {
    const float* in[2] = {a, b};
    t.f32[int(kernels::EwOp::add)](y, in, n, nullptr);
  }
  // y = exp(x - m)
  void exp_shifted(const float* x, float m, float* y, int64_t n) const {
    unary(kernels::EwOp::affine, x, y, n, {1.0f, -m});
    unary(kernels::EwOp::exp, y, y, n);
  }
};

// Per-thread buffers of one row: p [E] (scores; for softmax first exp(l - max)), c [E] (p + bias)
// and the selection's (gate_topk.h).
struct Scratch {
  std::vector<float> p, c, val, gval, top2, kept2;
  std::vector<int64_t> idx, gidx;
  std::vector<char> keep;
  GateTopKShape shape;
  Scratch(int64_t e, const GateSpec& g)
      : p(size_t(e)),
        c(size_t(e)),
        val(size_t(g.top_k)),
        gval(size_t(g.n_group)),
        top2(size_t(2 * g.n_group)),
        kept2(size_t(2 * g.n_group)),
        idx(size_t(g.top_k)),
        gidx(size_t(g.n_group)),
        keep(size_t(g.n_group)),
        shape{e, g.top_k, g.n_group, g.topk_group} {}
  GateTopKScratch view() {
    return {idx.data(), val.data(), gidx.data(), gval.data(), top2.data(), kept2.data(),
            keep.data()};
  }
};

// One row, all in cache: the scores into sc.p, the selection into sc.idx[0, k) and the selected
// scores into p_sel [k]. Softmax returns its row statistics {max, 1 / Σ exp(l - max)} (what the
// backward needs to recompute the row), the others {0, 1}.
std::pair<float, float> gate_row(const GateSpec& g, const RowOps& ops, const float* l,
                                 const float* bias, int64_t e, Scratch& sc, float* p_sel) {
  const int64_t k = g.top_k;
  float* p = sc.p.data();
  float m = 0.0f, inv = 1.0f;
  switch (g.score) {
    case GateScore::softmax:
      m = ops.t.max_f32(l, e);
      ops.exp_shifted(l, m, p, e);
      inv = 1.0f / ops.t.sum_f32(p, e);
      if (!bias && g.n_group <= 1) {  // softmax is monotone: select on l itself
        GateTopKShape plain = sc.shape;
        plain.n_group = 1;
        ops.topk(l, plain, sc.view());
        for (int64_t j = 0; j < k; ++j) p_sel[j] = p[sc.idx[size_t(j)]] * inv;
        return {m, inv};
      }
      ops.unary(kernels::EwOp::affine, p, p, e, {inv, 0.0f});
      break;
    case GateScore::sigmoid:
      if (ops.sigmoid_topk) {  // scores, correction and selection in one pass
        ops.sigmoid_topk(l, bias, p, sc.c.data(), sc.shape, sc.view());
        for (int64_t j = 0; j < k; ++j) p_sel[j] = p[sc.idx[size_t(j)]];
        return {m, inv};
      }
      ops.unary(kernels::EwOp::sigmoid, l, p, e);
      break;
    case GateScore::sqrt_softplus:
      for (int64_t j = 0; j < e; ++j) p[j] = std::sqrt(softplus(l[j]));
      break;
  }
  const float* c = p;
  if (bias) {
    ops.add(p, bias, sc.c.data(), e);
    c = sc.c.data();
  }
  ops.topk(c, sc.shape, sc.view());
  for (int64_t j = 0; j < k; ++j) p_sel[j] = p[sc.idx[size_t(j)]];
  return {m, inv};
}

void check(const Tensor& logits, const Tensor& bias, const GateSpec& g) {
  if (logits.dim() != 2 || logits.dtype() != DType::f32)
    HP_THROW(ValueError, "moe", "the gate needs logits [tokens, experts] f32, got ", logits.desc());
  const int64_t e = logits.size(1);
  if (bias.defined() && (bias.shape() != Shape{e} || bias.dtype() != DType::f32))
    HP_THROW(ValueError, "moe", "the gate's bias must be [", e, "] f32, got ", bias.desc());
  if (g.top_k < 1 || g.top_k > e)
    HP_THROW(ValueError, "moe", "top_k = ", g.top_k, " must be in [1, experts = ", e, "]");
  if (g.n_group > 1 && (e % g.n_group != 0 || e / g.n_group < 2 || g.topk_group < 1 ||
                        g.topk_group > g.n_group || g.topk_group * (e / g.n_group) < g.top_k))
    HP_THROW(ValueError, "moe", "group-limited gate: n_group = ", g.n_group,
             ", topk_group = ", g.topk_group, " do not fit ", e, " experts and top_k = ", g.top_k);
}

// d logits [N, E] from d weights [N, k], from what the forward saved: the logits [N, E], the
// selected scores p_sel [N, k] and, for softmax, each row's {max, 1 / Σ exp(l − max)} [N, 2]
// (the row's scores are recomputed in cache rather than stored as an [N, E] tensor).
Tensor gate_backward(const Tensor& logits, const Tensor& stats, const Tensor& p_sel,
                     const Tensor& indices, const Tensor& grad_w, const GateSpec& g) {
  const int64_t n = logits.size(0), e = logits.size(1), k = g.top_k;
  Tensor dl = empty({n, e});
  const Tensor dw = grad_w.contiguous();
  const float* lp = logits.data<float>();
  const float* sp = stats.defined() ? stats.data<float>() : nullptr;
  const float* psp = p_sel.data<float>();
  const int64_t* ip = indices.data<int64_t>();
  const float* dwp = dw.data<float>();
  float* dlp = dl.data<float>();
  const RowOps ops;
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    std::vector<float> du(static_cast<size_t>(k));
    for (int64_t t = lo; t < hi; ++t) {
      const float* u = psp + t * k;  // u_j = p[idx_j]
      const int64_t* idx = ip + t * k;
      const float* dwr = dwp + t * k;
      float* d = dlp + t * e;
      // w_j = s · u_j / S (S = Σ u + eps) or s · u_j.
      const float s = float(g.scaling);
      if (g.norm_topk_prob) {
        float sum = 0.0f, dot = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += u[j];
        sum += float(g.norm_eps);
        for (int64_t j = 0; j < k; ++j) dot += dwr[j] * u[j];
        for (int64_t j = 0; j < k; ++j) du[size_t(j)] = s * (dwr[j] / sum - dot / (sum * sum));
      } else {
        for (int64_t j = 0; j < k; ++j) du[size_t(j)] = s * dwr[j];
      }
      switch (g.score) {
        case GateScore::softmax: {  // dl = p ⊙ (dp − Σ p·dp), dp nonzero at the selected
          float pdp = 0.0f;
          for (int64_t j = 0; j < k; ++j) pdp += u[j] * du[size_t(j)];
          const float m = sp[2 * t], inv = sp[2 * t + 1];
          ops.exp_shifted(lp + t * e, m, d, e);                           // p · Σ exp
          ops.unary(kernels::EwOp::affine, d, d, e, {-inv * pdp, 0.0f});  // −p · pdp
          for (int64_t j = 0; j < k; ++j) d[idx[j]] += u[j] * du[size_t(j)];
          break;
        }
        case GateScore::sigmoid:  // dp/dl = p (1 − p)
          std::fill(d, d + e, 0.0f);
          for (int64_t j = 0; j < k; ++j) d[idx[j]] += du[size_t(j)] * u[j] * (1.0f - u[j]);
          break;
        case GateScore::sqrt_softplus:  // dp/dl = sigmoid(l) / (2 p)
          std::fill(d, d + e, 0.0f);
          for (int64_t j = 0; j < k; ++j) {
            const float sig = 1.0f / (1.0f + std::exp(-lp[t * e + idx[j]]));
            d[idx[j]] += du[size_t(j)] * sig / (2.0f * u[j]);
          }
          break;
      }
    }
  });
  return dl;
}

// The selection loop alone: indices [N, k] i64 of each row of corrected scores c [N, E] f32.
Tensor select_rows(const Tensor& c_in, const GateSpec& g) {
  const Tensor c = c_in.contiguous();
  const int64_t n = c.size(0), e = c.size(1), k = g.top_k;
  Tensor idx = empty({n, k}, DType::i64);
  const float* cp = c.data<float>();
  int64_t* ip = idx.data<int64_t>();
  const GateTopKFn topk = kernels::kernel_table<GateTopKTable>().topk;
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    Scratch sc(e, g);
    for (int64_t t = lo; t < hi; ++t) {
      topk(cp + t * e, sc.shape, sc.view());
      std::copy(sc.idx.begin(), sc.idx.end(), ip + t * k);
    }
  });
  return idx;
}

}  // namespace

GateOutput fused_gate(const Tensor& logits_in, const Tensor& bias_in, const GateSpec& g) {
  check(logits_in, bias_in, g);
  const Tensor logits = logits_in.detach().contiguous();
  const Tensor bias = bias_in.defined() ? bias_in.detach().contiguous() : Tensor();
  const int64_t n = logits.size(0), e = logits.size(1), k = g.top_k;
  GateOutput out;
  out.weights = empty({n, k});
  out.indices = empty({n, k}, DType::i64);
  const float* lp = logits.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* wp = out.weights.data<float>();
  int64_t* ip = out.indices.data<int64_t>();
  // Saved for the backward: the selected scores [N, k] and softmax's row statistics [N, 2].
  Tensor p_sel = empty({n, k});
  Tensor stats = g.score == GateScore::softmax ? empty({n, 2}) : Tensor();
  float* psp = p_sel.data<float>();
  float* sp = stats.defined() ? stats.data<float>() : nullptr;
  const RowOps ops;
  out.counts.assign(size_t(e), 0);
  std::mutex counts_mu;  // each chunk counts its rows' experts, then adds them (integers: exact)
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    Scratch sc(e, g);
    std::vector<int64_t> counts(static_cast<size_t>(e), 0);
    for (int64_t t = lo; t < hi; ++t) {
      float* u = psp + t * k;
      const auto [m, inv] = gate_row(g, ops, lp + t * e, bp, e, sc, u);
      if (sp) sp[2 * t] = m, sp[2 * t + 1] = inv;
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += u[j];
      const float scale = float(g.scaling) / (g.norm_topk_prob ? sum + float(g.norm_eps) : 1.0f);
      for (int64_t j = 0; j < k; ++j) {
        ip[t * k + j] = sc.idx[size_t(j)];
        wp[t * k + j] = u[j] * scale;
        ++counts[size_t(sc.idx[size_t(j)])];
      }
    }
    const std::lock_guard<std::mutex> lock(counts_mu);
    for (int64_t j = 0; j < e; ++j) out.counts[size_t(j)] += counts[size_t(j)];
  });
  if (autograd::needs_grad({logits_in})) {
    const autograd::SavedTensor saved_l(logits);
    const Tensor indices = out.indices;
    autograd::record("MegaGate", {logits_in}, {out.weights},
                     [saved_l, stats, p_sel, indices, g](const std::vector<Tensor>& grads) {
                       return std::vector<Tensor>{
                           gate_backward(saved_l.unpack(), stats, p_sel, indices, grads[0], g)};
                     });
  }
  return out;
}

GateOutput composed_gate(const Tensor& logits, const Tensor& bias, const GateSpec& g) {
  check(logits, bias, g);
  GateOutput out;
  if (g.score == GateScore::softmax && !bias.defined() && g.n_group <= 1) {
    auto [vals, idx] = topk(softmax(logits, -1), g.top_k, -1);
    if (g.norm_topk_prob) vals = vals / sum(vals, {-1}, true);
    out.weights = g.scaling == 1.0 ? vals : vals * g.scaling;
    out.indices = idx;
  } else if (g.score == GateScore::sigmoid) {
    const Tensor p = sigmoid(logits);  // [N, E]
    {
      autograd::NoGradGuard ng;  // the selection loop on p + bias (no gradient either way)
      out.indices = select_rows(bias.defined() ? add(p, bias) : p, g);
    }
    Tensor w = gather(p, 1, out.indices);
    if (g.norm_topk_prob) w = w / (sum(w, {-1}, true) + g.norm_eps);
    out.weights = w * g.scaling;
  } else {
    HP_THROW(ValueError, "moe", "composed_gate covers softmax without bias or groups, and sigmoid");
  }
  const Tensor idx = out.indices.contiguous();
  out.counts.assign(size_t(logits.size(1)), 0);
  for (int64_t i = 0; i < idx.numel(); ++i) ++out.counts[size_t(idx.data<int64_t>()[i])];
  return out;
}

}  // namespace hp::moe
