// MegaGate (gate.h): forward and backward of the fused router, one token row at a time.
#include "hp/models/gate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/ops/ops.h"

namespace hp::models {

GateScore gate_score_from_name(const std::string& name) {
  if (name == "softmax") return GateScore::softmax;
  if (name == "sigmoid") return GateScore::sigmoid;
  if (name == "sqrtsoftplus") return GateScore::sqrt_softplus;
  HP_THROW(ValueError, "moe", "router scoring '", name, "' is not softmax, sigmoid or sqrtsoftplus");
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

// p [N, E]: the scores of every row of logits. Softmax and sigmoid run the SIMD kernels of the ops
// (one pass over [N, E]); sqrt-softplus is computed here.
Tensor score_tensor(const Tensor& logits, GateScore s) {
  autograd::NoGradGuard ng;
  if (s == GateScore::softmax) return softmax(logits, -1).contiguous();
  if (s == GateScore::sigmoid) return sigmoid(logits).contiguous();
  Tensor p = empty(logits.shape());
  const float* l = logits.data<float>();
  float* q = p.data<float>();
  parallel_for(0, logits.numel(), 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) q[i] = std::sqrt(softplus(l[i]));
  });
  return p;
}

// Per-thread buffers of the selection: c [E], the top-k's and the kept groups' indices and values.
struct Scratch {
  std::vector<float> c, val, gval;
  std::vector<int64_t> idx, gidx;
  std::vector<char> keep;
  Scratch(int64_t e, const GateSpec& g)
      : c(size_t(e)), val(size_t(g.top_k)), gval(size_t(g.n_group)),
        idx(size_t(g.top_k)), gidx(size_t(g.n_group)), keep(size_t(g.n_group)) {}
};

// The selection of one row into sc.idx[0, k) (descending by c = p + bias; ties: lower index).
void select_row(const GateSpec& g, const float* l, const float* p, const float* bias, int64_t e,
                Scratch& sc) {
  TopK top{g.top_k, 0, sc.idx.data(), sc.val.data()};
  if (g.score == GateScore::softmax && !bias && g.n_group <= 1) {
    for (int64_t j = 0; j < e; ++j) top.push(l[j], j);  // softmax is monotone
    return;
  }
  float* c = sc.c.data();
  for (int64_t j = 0; j < e; ++j) c[j] = p[j] + (bias ? bias[j] : 0.0f);
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
    groups.push(m1 + m2, q);
  }
  std::fill(sc.keep.begin(), sc.keep.end(), 0);
  for (int64_t q = 0; q < g.topk_group; ++q) sc.keep[size_t(sc.gidx[size_t(q)])] = 1;
  for (int64_t q = 0; q < g.n_group; ++q)
    if (sc.keep[size_t(q)])
      for (int64_t j = q * per; j < (q + 1) * per; ++j) top.push(c[j], j);
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
    HP_THROW(ValueError, "moe", "group-limited gate: n_group = ", g.n_group, ", topk_group = ",
             g.topk_group, " do not fit ", e, " experts and top_k = ", g.top_k);
}

// d logits [N, E] from d weights [N, k], from the saved scores p [N, E] (and, for sqrt-softplus,
// the logits).
Tensor gate_backward(const Tensor& p_all, const Tensor& logits, const Tensor& indices,
                     const Tensor& grad_w, const GateSpec& g) {
  const int64_t n = p_all.size(0), e = p_all.size(1), k = g.top_k;
  // Softmax writes every element of a row; the others only the selected ones.
  Tensor dl = g.score == GateScore::softmax ? empty({n, e}) : zeros({n, e});
  const Tensor dw = grad_w.contiguous();
  const float* pp = p_all.data<float>();
  const float* lp = logits.defined() ? logits.data<float>() : nullptr;
  const int64_t* ip = indices.data<int64_t>();
  const float* dwp = dw.data<float>();
  float* dlp = dl.data<float>();
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    std::vector<float> du(static_cast<size_t>(k));
    for (int64_t t = lo; t < hi; ++t) {
      const float* p = pp + t * e;
      const int64_t* idx = ip + t * k;
      const float* dwr = dwp + t * k;
      float* d = dlp + t * e;
      // w_j = s · u_j / S (S = Σ u + eps) or s · u_j, with u_j = p[idx_j].
      const float s = float(g.scaling);
      if (g.norm_topk_prob) {
        float sum = 0.0f, dot = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += p[idx[j]];
        sum += float(g.norm_eps);
        for (int64_t j = 0; j < k; ++j) dot += dwr[j] * p[idx[j]];
        for (int64_t j = 0; j < k; ++j) du[size_t(j)] = s * (dwr[j] / sum - dot / (sum * sum));
      } else {
        for (int64_t j = 0; j < k; ++j) du[size_t(j)] = s * dwr[j];
      }
      switch (g.score) {
        case GateScore::softmax: {  // dl = p ⊙ (dp − Σ p·dp), dp nonzero at the selected
          float pdp = 0.0f;
          for (int64_t j = 0; j < k; ++j) pdp += p[idx[j]] * du[size_t(j)];
          for (int64_t m = 0; m < e; ++m) d[m] = -p[m] * pdp;
          for (int64_t j = 0; j < k; ++j) d[idx[j]] += p[idx[j]] * du[size_t(j)];
          break;
        }
        case GateScore::sigmoid:  // dp/dl = p (1 − p)
          for (int64_t j = 0; j < k; ++j) {
            const float q = p[idx[j]];
            d[idx[j]] += du[size_t(j)] * q * (1.0f - q);
          }
          break;
        case GateScore::sqrt_softplus:  // dp/dl = sigmoid(l) / (2 p)
          for (int64_t j = 0; j < k; ++j) {
            const float q = p[idx[j]];
            const float sig = 1.0f / (1.0f + std::exp(-lp[t * e + idx[j]]));
            d[idx[j]] += du[size_t(j)] * sig / (2.0f * q);
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
  const Tensor p_all = score_tensor(logits, g.score);  // [N, E]
  const float* pp = p_all.data<float>();
  parallel_for(0, n, kRowGrain, [&](int64_t lo, int64_t hi) {
    Scratch sc(e, g);
    for (int64_t t = lo; t < hi; ++t) {
      const float* p = pp + t * e;
      select_row(g, lp + t * e, p, bp, e, sc);
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += p[sc.idx[size_t(j)]];
      const float scale = float(g.scaling) / (g.norm_topk_prob ? sum + float(g.norm_eps) : 1.0f);
      for (int64_t j = 0; j < k; ++j) {
        ip[t * k + j] = sc.idx[size_t(j)];
        wp[t * k + j] = p[sc.idx[size_t(j)]] * scale;
      }
    }
  });
  out.counts.assign(size_t(e), 0);
  for (int64_t i = 0; i < n * k; ++i) ++out.counts[size_t(ip[i])];
  if (autograd::needs_grad({logits_in})) {
    // The scores (the backward's only need but for sqrt-softplus, which also reads the logits).
    autograd::SavedTensor saved_p(p_all),
        saved_l(g.score == GateScore::sqrt_softplus ? logits : Tensor());
    const Tensor indices = out.indices;
    autograd::record("MegaGate", {logits_in}, {out.weights},
                     [saved_p, saved_l, indices, g](const std::vector<Tensor>& grads) {
                       return std::vector<Tensor>{gate_backward(
                           saved_p.unpack(), saved_l.unpack(), indices, grads[0], g)};
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
