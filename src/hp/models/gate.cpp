// MegaGate (gate.h): forward and backward of the fused router, one token row at a time.
#include "hp/models/gate.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/ops/ops.h"

namespace hp::models {

GateScore gate_score_from_name(const std::string& name) {
  if (name == "softmax") return GateScore::softmax;
  if (name == "sigmoid") return GateScore::sigmoid;
  if (name == "sqrtsoftplus") return GateScore::sqrt_softplus;
  HP_THROW(ValueError, "moe", "router scoring '", name,
           "' is not softmax, sigmoid or sqrtsoftplus");
}

namespace {

constexpr int64_t kRowGrain = 16;

// The k largest values pushed (with their indices), descending; ties keep the earlier push first.
// By insertion: one compare per value once k are held, which beats sorting for k << n.
struct TopK {
  int64_t k, held = 0;
  int64_t* idx;
  float* val;
  void push(float x, int64_t j) {
    if (held == k && !(x > val[k - 1])) return;
    int64_t pos = held < k ? held++ : k - 1;
    for (; pos > 0 && x > val[pos - 1]; --pos) {
      val[pos] = val[pos - 1];
      idx[pos] = idx[pos - 1];
    }
    val[pos] = x;
    idx[pos] = j;
  }
};

float softplus(float x) {  // log(1 + e^x) without overflow
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Contiguous f32 row functions of the active ISA (the elementwise kernels' own, so a row's
// results match the tensor ops' bit for bit and never depend on the thread count).
struct RowOps {
  const kernels::EwTable& t = kernels::ew_table(kernels::active_isa());
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

// Per-thread buffers of one row: p [E] (scores; for softmax first exp(l - max)), c [E] (p + bias),
// the top-k's and the kept groups' indices and values.
struct Scratch {
  // top2 [2 · n_group]: each group's two largest; kept2: the kept groups' ones, descending.
  std::vector<float> p, c, val, gval, top2, kept2;
  std::vector<int64_t> idx, gidx;
  std::vector<char> keep;
  Scratch(int64_t e, const GateSpec& g)
      : p(size_t(e)),
        c(size_t(e)),
        val(size_t(g.top_k)),
        gval(size_t(g.n_group)),
        top2(size_t(2 * g.n_group)),
        kept2(size_t(2 * g.n_group)),
        idx(size_t(g.top_k)),
        gidx(size_t(g.n_group)),
        keep(size_t(g.n_group)) {}
};

// The top_k of c [E] into top (descending; ties: lower index), group-limited when n_group > 1.
void select_top(const GateSpec& g, const float* c, int64_t e, Scratch& sc, TopK& top) {
  if (g.n_group <= 1) {
    for (int64_t j = 0; j < e; ++j) top.push(c[j], j);
    return;
  }
  // Groups scored by the sum of their top-2; the topk_group best compete, in index order.
  const int64_t per = e / g.n_group;
  TopK groups{g.topk_group, 0, sc.gidx.data(), sc.gval.data()};
  for (int64_t q = 0; q < g.n_group; ++q) {
    // The two largest values of the group (no indices needed), branch-free.
    float m1 = -std::numeric_limits<float>::infinity(), m2 = m1;
    for (int64_t j = q * per; j < (q + 1) * per; ++j) {
      const float x = c[j];
      m2 = std::max(m2, std::min(m1, x));
      m1 = std::max(m1, x);
    }
    sc.top2[size_t(2 * q)] = m1;
    sc.top2[size_t(2 * q + 1)] = m2;
    groups.push(m1 + m2, q);
  }
  std::fill(sc.keep.begin(), sc.keep.end(), 0);
  for (int64_t q = 0; q < g.topk_group; ++q) sc.keep[size_t(sc.gidx[size_t(q)])] = 1;
  // The kept groups' two largest are candidates themselves: when they number >= k, their k-th
  // largest tau bounds the selection from below (k candidates are >= tau, so no value below it is
  // among the top k) and only values >= tau go through the insertion, in index order as before.
  // NaN breaks the bound; a row left with fewer than k then takes the full pass.
  float tau = -std::numeric_limits<float>::infinity();
  if (2 * g.topk_group >= g.top_k) {
    float* kept = sc.kept2.data();
    int64_t m = 0;
    for (int64_t q = 0; q < g.n_group; ++q)
      if (sc.keep[size_t(q)])
        for (int64_t r = 0; r < 2; ++r) {  // insertion, descending, into kept[0, m)
          const float x = sc.top2[size_t(2 * q + r)];
          int64_t pos = m++;
          for (; pos > 0 && x > kept[pos - 1]; --pos) kept[pos] = kept[pos - 1];
          kept[pos] = x;
        }
    tau = kept[g.top_k - 1];
  }
  for (int64_t q = 0; q < g.n_group; ++q)
    if (sc.keep[size_t(q)])
      for (int64_t j = q * per; j < (q + 1) * per; ++j)
        if (c[j] >= tau) top.push(c[j], j);
  if (top.held == g.top_k) return;
  top.held = 0;
  for (int64_t q = 0; q < g.n_group; ++q)
    if (sc.keep[size_t(q)])
      for (int64_t j = q * per; j < (q + 1) * per; ++j) top.push(c[j], j);
}

// One row, all in cache: the scores into sc.p, the selection into sc.idx[0, k) and the selected
// scores into p_sel [k]. Softmax returns its row statistics {max, 1 / Σ exp(l - max)} (what the
// backward needs to recompute the row), the others {0, 1}.
std::pair<float, float> gate_row(const GateSpec& g, const RowOps& ops, const float* l,
                                 const float* bias, int64_t e, Scratch& sc, float* p_sel) {
  const int64_t k = g.top_k;
  float* p = sc.p.data();
  TopK top{k, 0, sc.idx.data(), sc.val.data()};
  float m = 0.0f, inv = 1.0f;
  switch (g.score) {
    case GateScore::softmax:
      m = ops.t.max_f32(l, e);
      ops.exp_shifted(l, m, p, e);
      inv = 1.0f / ops.t.sum_f32(p, e);
      if (!bias && g.n_group <= 1) {  // softmax is monotone: select on l itself
        for (int64_t j = 0; j < e; ++j) top.push(l[j], j);
        for (int64_t j = 0; j < k; ++j) p_sel[j] = p[sc.idx[size_t(j)]] * inv;
        return {m, inv};
      }
      ops.unary(kernels::EwOp::affine, p, p, e, {inv, 0.0f});
      break;
    case GateScore::sigmoid:
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
  select_top(g, c, e, sc, top);
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
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    Scratch sc(e, g);
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
      }
    }
  });
  out.counts.assign(size_t(e), 0);
  for (int64_t i = 0; i < n * k; ++i) ++out.counts[size_t(ip[i])];
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
      autograd::NoGradGuard ng;  // the selection loop (no gradient either way)
      out.indices = fused_gate(logits, bias, g).indices;
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

}  // namespace hp::models
