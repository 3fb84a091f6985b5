// MoE blocks: routers (differentiable ops plus a no-grad selection loop) and the grouped-expert
// autograd Function (permute by expert → grouped GEMMs → weighted combine, and its backward).
#include "hp/models/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "hp/autograd/function.h"
#include "hp/core/thread_pool.h"
#include "hp/fusion/patterns.h"
#include "hp/kernels/cpu/grouped_gemm.h"
#include "hp/kernels/cpu/swiglu.h"
#include "hp/mx/linear.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"
#include "hp/moe/megamoe.h"

namespace hp::models {

MoEOptions MoEOptions::qwen3_moe(int64_t hidden, int64_t moe_intermediate, int64_t experts,
                                 int64_t top_k, bool norm_topk_prob) {
  MoEOptions o;
  o.hidden_size = hidden;
  o.moe_intermediate_size = moe_intermediate;
  o.num_experts = experts;
  o.top_k = top_k;
  o.norm_topk_prob = norm_topk_prob;
  return o;
}

MoEOptions MoEOptions::mixtral(int64_t hidden, int64_t intermediate, int64_t experts,
                               int64_t top_k) {
  MoEOptions o = qwen3_moe(hidden, intermediate, experts, top_k, true);
  o.expert_names = {"w1", "w3", "w2"};
  return o;
}

MoEOptions MoEOptions::deepseek_v3(int64_t hidden, int64_t moe_intermediate, int64_t experts,
                                   int64_t top_k, int64_t n_group, int64_t topk_group,
                                   bool norm_topk_prob, double routed_scaling_factor,
                                   int64_t n_shared_experts) {
  MoEOptions o = qwen3_moe(hidden, moe_intermediate, experts, top_k, norm_topk_prob);
  o.router = RouterKind::sigmoid_group_topk;
  o.n_group = n_group;
  o.topk_group = topk_group;
  o.routed_scaling_factor = routed_scaling_factor;
  o.n_shared_experts = n_shared_experts;
  return o;
}

namespace {

void validate(const MoEOptions& o) {
  if (o.hidden_size <= 0 || o.moe_intermediate_size <= 0 || o.num_experts <= 0)
    HP_THROW(ValueError, "moe",
             "hidden_size, moe_intermediate_size and num_experts must be > 0, got ", o.hidden_size,
             ", ", o.moe_intermediate_size, ", ", o.num_experts);
  if (o.top_k <= 0 || o.top_k > o.num_experts)
    HP_THROW(ValueError, "moe", "num_experts_per_tok must be in [1, num_experts = ", o.num_experts,
             "], got ", o.top_k);
  if (o.router == RouterKind::sigmoid_group_topk) {
    if (o.n_group <= 0 || o.num_experts % o.n_group != 0 || o.num_experts / o.n_group < 2)
      HP_THROW(ValueError, "moe", "n_group = ", o.n_group,
               " must divide num_experts = ", o.num_experts, " into groups of at least 2 experts");
    if (o.topk_group <= 0 || o.topk_group > o.n_group ||
        o.topk_group * (o.num_experts / o.n_group) < o.top_k)
      HP_THROW(ValueError, "moe", "topk_group = ", o.topk_group, " (of n_group = ", o.n_group,
               ") leaves fewer than num_experts_per_tok = ", o.top_k, " experts");
  }
}

}  // namespace

SwiGLUMLP::SwiGLUMLP(int64_t hidden, int64_t intermediate, const ExpertNames& names, DType dt,
                     double init_std) {
  gate_proj = register_module(
      names.gate, std::make_shared<nn::Linear>(hidden, intermediate, false, dt, init_std));
  up_proj = register_module(
      names.up, std::make_shared<nn::Linear>(hidden, intermediate, false, dt, init_std));
  down_proj = register_module(
      names.down, std::make_shared<nn::Linear>(intermediate, hidden, false, dt, init_std));
}

Tensor SwiGLUMLP::forward(const Tensor& x) const {
  return down_proj->forward(fusion::swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

TopKRouter::TopKRouter(const MoEOptions& opt) : opt_(opt) {
  validate(opt);
  weight = register_parameter(
      "weight",
      randn({opt.num_experts, opt.hidden_size}, DType::f32, 0.0, opt.init_std).to(opt.dtype));
  if (opt.router == RouterKind::sigmoid_group_topk) {
    e_score_correction_bias =
        register_parameter("e_score_correction_bias", zeros({opt.num_experts}, DType::f32));
  }
}

moe::GateSpec gate_spec(const MoEOptions& o) {
  moe::GateSpec g;
  g.top_k = o.top_k;
  g.norm_topk_prob = o.norm_topk_prob;
  if (o.router == RouterKind::sigmoid_group_topk) {
    g.score = moe::GateScore::sigmoid;
    g.n_group = o.n_group;
    g.topk_group = o.topk_group;
    g.norm_eps = 1e-20;  // as transformers' DeepseekV3 router
    g.scaling = o.routed_scaling_factor;
  }
  return g;
}

RouterOutput TopKRouter::route(const Tensor& x) const {
  if (x.dim() != 2 || x.size(1) != opt_.hidden_size)
    HP_THROW(ValueError, "moe", "router expects x [tokens, ", opt_.hidden_size, "], got ",
             x.desc());
  RouterOutput r;
  // DeepSeek's router runs in f32 whatever the model dtype (as HF's DeepseekV3TopkRouter).
  r.logits = opt_.router == RouterKind::sigmoid_group_topk
                 ? linear(cast(x, DType::f32), cast(weight, DType::f32))
                 : linear(x, weight);  // [N, E]
  moe::GateOutput g = moe::fused_gate(cast(r.logits, DType::f32),
                            opt_.router == RouterKind::sigmoid_group_topk
                                ? cast(e_score_correction_bias, DType::f32)
                                : Tensor(),
                            gate_spec(opt_));
  r.weights = g.weights;
  r.indices = g.indices;
  r.counts = std::move(g.counts);
  return r;
}

namespace {
class ExpertList : public nn::Module {
 public:
  void add(int64_t i, std::shared_ptr<SwiGLUMLP> m) { register_module(std::to_string(i), m); }
};
}  // namespace

MoEBlock::MoEBlock(const MoEOptions& opt) : opt_(opt) {
  validate(opt);
  gate = register_module("gate", std::make_shared<TopKRouter>(opt));
  auto list = register_module("experts", std::make_shared<ExpertList>());
  for (int64_t e = 0; e < opt.num_experts; ++e) {
    experts.push_back(std::make_shared<SwiGLUMLP>(opt.hidden_size, opt.moe_intermediate_size,
                                                  opt.expert_names, opt.dtype, opt.init_std));
    list->add(e, experts.back());
  }
  if (opt.n_shared_experts > 0)
    shared_experts = register_module(
        "shared_experts", std::make_shared<SwiGLUMLP>(
                              opt.hidden_size, opt.moe_intermediate_size * opt.n_shared_experts,
                              ExpertNames{}, opt.dtype, opt.init_std));
}

Tensor MoEBlock::forward(const Tensor& x) const {
  MoEOutput o = forward_with_router(x);
  last_router_logits_ = o.router_logits;
  return o.output;
}

MoEOutput MoEBlock::forward_with_router(const Tensor& x) const {
  if (x.dim() < 1 || x.size(-1) != opt_.hidden_size)
    HP_THROW(ValueError, "moe", "expects x [..., hidden_size = ", opt_.hidden_size, "], got ",
             x.desc());
  const Tensor x2 = reshape(x, {-1, opt_.hidden_size});  // [N, hidden]
  RouterOutput r = gate->route(x2);
  last_counts_ = r.counts;
  if (grouped_kernel_ || ep_) {
    moe::ExpertExchange exchange;
    if (ep_ && ep_->size() > 1 && ep_kernel_.megamoe && megamoe_runs(x2))
      exchange = [this](const Tensor& xs, const std::vector<int64_t>& count) {
        return run_megamoe(xs, count);
      };
    Tensor out = moe::routed_experts(
        x2, r.weights, r.indices, opt_.num_experts,
        [this](const Tensor& xs, const std::vector<int64_t>& counts) {
          return run_local_experts(xs, counts);
        },
        ep_, exchange);
    if (shared_experts) out = out + shared_experts->forward(x2);
    return {reshape(out, x.shape()), r.logits};
  }
  // The grouped kernels are f32; other dtypes go through differentiable casts (a weight copy per
  // call, until bf16 grouped kernels exist) and the result is cast back to x's dtype.
  const bool f32 = x.dtype() == DType::f32 && opt_.dtype == DType::f32;
  auto as_f32 = [&](const Tensor& t) { return f32 ? t : cast(t, DType::f32); };
  std::vector<Tensor> g, u, d;
  for (const auto& e : experts) {
    g.push_back(as_f32(e->gate_proj->weight));
    u.push_back(as_f32(e->up_proj->weight));
    d.push_back(as_f32(e->down_proj->weight));
  }
  Tensor out = grouped_experts(as_f32(x2), r.weights, r.indices, g, u, d);
  if (!f32) out = cast(out, x.dtype());
  if (shared_experts) out = out + shared_experts->forward(x2);
  return {reshape(out, x.shape()), r.logits};
}

RouterStats router_stats(const std::vector<Tensor>& router_logits, int64_t num_experts,
                         int64_t top_k) {
  RouterStats out;
  out.counts.assign(static_cast<size_t>(num_experts), 0.0);
  int64_t rows = 0;
  for (const Tensor& l : router_logits) {
    if (l.dim() != 2 || l.size(1) != num_experts)
      HP_THROW(ValueError, "moe", "router logits must be [tokens, num_experts = ", num_experts,
               "], got ", l.desc());
    const Tensor p = softmax(cast(l, DType::f32), -1);
    for (double id : topk(p.detach(), top_k, -1).second.to_vector())
      out.counts[static_cast<size_t>(id)] += 1.0;
    const Tensor s = sum(p, {0});
    out.prob_sum = out.prob_sum.defined() ? out.prob_sum + s : s;
    rows += l.size(0);
  }
  out.rows = static_cast<double>(rows);
  return out;
}

Tensor load_balancing_share(const std::vector<double>& counts, double rows, const Tensor& prob_sum,
                            int64_t num_experts) {
  return sum(from_vector(counts, {num_experts}) * prob_sum) *
         (static_cast<double>(num_experts) / (rows * rows));
}

Tensor load_balancing_loss(const std::vector<Tensor>& router_logits, int64_t num_experts,
                           int64_t top_k, const VectorSum& sum_over_ranks) {
  if (router_logits.empty())
    HP_THROW(ValueError, "moe", "load_balancing_loss needs at least one layer's router logits");
  RouterStats st = router_stats(router_logits, num_experts, top_k);
  if (sum_over_ranks) {
    st.counts.push_back(st.rows);
    st.counts = sum_over_ranks(st.counts);
    st.rows = st.counts.back();
    st.counts.pop_back();
  }
  return load_balancing_share(st.counts, st.rows, st.prob_sum, num_experts);
}

namespace {

// The routing plan shared by forward and backward: assignments (token n, slot j) sorted by expert
// (stable, so rows of one expert keep token order), A = N·k rows.
struct Plan {
  int64_t tokens = 0, hidden = 0, inter = 0, experts = 0, k = 0;
  std::vector<int32_t> sorted_slot;  // [A] row a → assignment n·k + j
  std::vector<int32_t> row_of;       // [A] assignment n·k + j → row a
  std::vector<int32_t> group_end;    // [E] end offsets of each expert's rows
  float swiglu_limit = 0.0f;         // > 0: the SwiGLU clamp (kernels/cpu/swiglu.h)
};

Plan make_plan(const Tensor& indices, int64_t experts, int64_t hidden, int64_t inter) {
  Plan p;
  p.tokens = indices.size(0);
  p.k = indices.size(1);
  p.hidden = hidden;
  p.inter = inter;
  p.experts = experts;
  const int64_t a = p.tokens * p.k;
  const std::vector<double> ids = indices.to_vector();
  p.group_end.assign(experts, 0);
  for (int64_t i = 0; i < a; ++i) {
    const auto e = static_cast<int64_t>(ids[i]);
    if (e < 0 || e >= experts)
      HP_THROW(IndexError, "moe", "expert index ", e, " out of range [0, ", experts, ")");
    ++p.group_end[e];
  }
  std::vector<int32_t> next(experts, 0);
  for (int64_t e = 1; e < experts; ++e) next[e] = next[e - 1] + p.group_end[e - 1];
  for (int64_t e = 1; e < experts; ++e) p.group_end[e] += p.group_end[e - 1];
  p.sorted_slot.resize(a);
  p.row_of.resize(a);
  for (int64_t i = 0; i < a; ++i) {
    const int32_t row = next[static_cast<int64_t>(ids[i])]++;
    p.sorted_slot[row] = static_cast<int32_t>(i);
    p.row_of[i] = row;
  }
  return p;
}

std::vector<const float*> ptrs(const std::vector<Tensor>& ts) {
  std::vector<const float*> out;
  for (const Tensor& t : ts) out.push_back(t.data<float>());
  return out;
}

// Inputs: x [N, H], w [N, k], indices [N, k] i64, then E gate [I, H], E up [I, H], E down [H, I]
// weights.
struct GroupedExpertsFn {
  static constexpr const char* kName = "GroupedExperts";

  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    const int64_t e = (static_cast<int64_t>(in.size()) - 3) / 3;
    // The caller's state, when set, is the SwiGLU clamp limit (grouped_experts).
    const float limit = ctx.state.has_value() ? std::any_cast<float>(ctx.state) : 0.0f;
    Plan plan = make_plan(in[2], e, in[0].size(1), in[3].size(0));
    plan.swiglu_limit = limit;
    ctx.state = std::move(plan);
    const auto& p = std::any_cast<const Plan&>(ctx.state);
    const int64_t a = p.tokens * p.k, h = p.hidden, i = p.inter;
    const std::vector<Tensor> gw(in.begin() + 3, in.begin() + 3 + e),
        uw(in.begin() + 3 + e, in.begin() + 3 + 2 * e), dw(in.begin() + 3 + 2 * e, in.end());
    const Tensor x = in[0].contiguous(), w = in[1].contiguous();
    Tensor xp = empty({a, h}), g = empty({a, i}), u = empty({a, i}), act = empty({a, i}),
           y = empty({a, h}), out = empty({p.tokens, h});
    const float* xd = x.data<float>();
    float* xpd = xp.data<float>();
    parallel_for(0, a, 64, [&](int64_t lo, int64_t hi) {  // permute rows into expert order
      for (int64_t r = lo; r < hi; ++r)
        std::copy_n(xd + (p.sorted_slot[r] / p.k) * h, h, xpd + r * h);
    });
    kernels::grouped_gemm_f32(true, e, p.group_end.data(), i, h, xpd, h, ptrs(gw).data(), h, 0.0f,
                              g.data<float>(), i);
    kernels::grouped_gemm_f32(true, e, p.group_end.data(), i, h, xpd, h, ptrs(uw).data(), h, 0.0f,
                              u.data<float>(), i);
    const float *gd = g.data<float>(), *ud = u.data<float>();
    float* ad = act.data<float>();
    parallel_for(0, a * i, 4096, [&](int64_t lo, int64_t hi) {
      kernels::swiglu_f32(gd + lo, ud + lo, ad + lo, hi - lo, p.swiglu_limit);
    });
    kernels::grouped_gemm_f32(true, e, p.group_end.data(), h, i, ad, i, ptrs(dw).data(), i, 0.0f,
                              y.data<float>(), h);
    // Combine per token in slot order (a gather, not a scatter): fixed order, no write races.
    const float *yd = y.data<float>(), *wd = w.data<float>();
    float* od = out.data<float>();
    parallel_for(0, p.tokens, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        float* o = od + n * h;
        std::fill(o, o + h, 0.0f);
        for (int64_t j = 0; j < p.k; ++j) {
          const float c = wd[n * p.k + j];
          const float* yr = yd + p.row_of[n * p.k + j] * h;
          for (int64_t d = 0; d < h; ++d) o[d] += c * yr[d];
        }
      }
    });
    std::vector<Tensor> saved{xp, g, u, y, w};
    saved.insert(saved.end(), in.begin() + 3, in.end());
    ctx.save_for_backward(saved);
    return {out};
  }

  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& go) {
    const auto& p = std::any_cast<const Plan&>(ctx.state);
    const int64_t a = p.tokens * p.k, h = p.hidden, i = p.inter, e = p.experts, k = p.k;
    const std::vector<Tensor> s = ctx.saved_tensors();
    const Tensor &xp = s[0], &g = s[1], &u = s[2], &y = s[3], &w = s[4];
    const std::vector<Tensor> gw(s.begin() + 5, s.begin() + 5 + e),
        uw(s.begin() + 5 + e, s.begin() + 5 + 2 * e), dwn(s.begin() + 5 + 2 * e, s.end());
    const Tensor dout = go[0].to(DType::f32);  // [N, H] contiguous copy
    const float *dod = dout.data<float>(), *yd = y.data<float>(), *wd = w.data<float>();
    const float *gd = g.data<float>(), *ud = u.data<float>();
    std::vector<Tensor> grads(ctx.needs_input_grad.size());
    if (ctx.needs_input_grad[1]) {  // d weights[n, j] = <dout[n], y[row(n, j)]>
      Tensor dw = empty({p.tokens, k});
      float* d = dw.data<float>();
      parallel_for(0, p.tokens * k, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t q = lo; q < hi; ++q) {
          const float *yr = yd + p.row_of[q] * h, *o = dod + (q / k) * h;
          float acc = 0.0f;
          for (int64_t c = 0; c < h; ++c) acc += o[c] * yr[c];
          d[q] = acc;
        }
      });
      grads[1] = dw;
    }
    Tensor dy = empty({a, h}), act = empty({a, i}), dact = empty({a, i}), dg = empty({a, i}),
           du = empty({a, i});
    float *dyd = dy.data<float>(), *ad = act.data<float>();
    parallel_for(0, a, 64, [&](int64_t lo, int64_t hi) {  // dy[row] = w[slot] · dout[token]
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t q = p.sorted_slot[r];
        const float c = wd[q];
        const float* o = dod + (q / k) * h;
        for (int64_t d = 0; d < h; ++d) dyd[r * h + d] = c * o[d];
      }
    });
    parallel_for(0, a * i, 4096, [&](int64_t lo, int64_t hi) {
      kernels::swiglu_f32(gd + lo, ud + lo, ad + lo, hi - lo, p.swiglu_limit);
    });
    const int32_t* ends = p.group_end.data();
    kernels::grouped_gemm_f32(false, e, ends, i, h, dyd, h, ptrs(dwn).data(), i, 0.0f,
                              dact.data<float>(), i);
    const float* dad = dact.data<float>();
    float *dgd = dg.data<float>(), *dud = du.data<float>();
    parallel_for(0, a * i, 4096, [&](int64_t lo, int64_t hi) {
      kernels::swiglu_backward_f32(gd + lo, ud + lo, dad + lo, dgd + lo, dud + lo, hi - lo,
                                   p.swiglu_limit);
    });
    // Weight gradients: one [out, in] matrix per expert, zero for unused experts.
    auto wgrad = [&](int64_t first, int64_t rows, int64_t cols, const float* lhs,
                     const float* rhs) {
      // Frozen experts (no grad wanted) write into a scratch matrix.
      std::vector<float*> outs(e);
      Tensor scratch;
      for (int64_t x = 0; x < e; ++x) {
        if (!ctx.needs_input_grad[first + x]) {
          if (!scratch.defined()) scratch = empty({rows, cols});
          outs[x] = scratch.data<float>();
          continue;
        }
        grads[first + x] = empty({rows, cols});
        outs[x] = grads[first + x].data<float>();
      }
      kernels::grouped_gemm_wgrad_f32(e, ends, rows, cols, lhs, rows, rhs, cols, 0.0f, outs.data(),
                                      cols);
    };
    auto any_needed = [&](int64_t first) {
      return std::any_of(ctx.needs_input_grad.begin() + first,
                         ctx.needs_input_grad.begin() + first + e, [](bool b) { return b; });
    };
    if (any_needed(3)) wgrad(3, i, h, dgd, xp.data<float>());
    if (any_needed(3 + e)) wgrad(3 + e, i, h, dud, xp.data<float>());
    if (any_needed(3 + 2 * e)) wgrad(3 + 2 * e, h, i, dyd, ad);
    if (ctx.needs_input_grad[0]) {
      Tensor dxp = empty({a, h}), dx = empty({p.tokens, h});
      float* dxpd = dxp.data<float>();
      kernels::grouped_gemm_f32(false, e, ends, h, i, dgd, i, ptrs(gw).data(), h, 0.0f, dxpd, h);
      kernels::grouped_gemm_f32(false, e, ends, h, i, dud, i, ptrs(uw).data(), h, 1.0f, dxpd, h);
      float* dxd = dx.data<float>();
      parallel_for(0, p.tokens, 16, [&](int64_t lo, int64_t hi) {  // un-permute: sum the k rows
        for (int64_t n = lo; n < hi; ++n) {
          float* o = dxd + n * h;
          std::fill(o, o + h, 0.0f);
          for (int64_t j = 0; j < k; ++j) {
            const float* r = dxpd + p.row_of[n * k + j] * h;
            for (int64_t d = 0; d < h; ++d) o[d] += r[d];
          }
        }
      });
      grads[0] = dx;
    }
    return grads;
  }
};

}  // namespace

void check_all_experts_held(const std::vector<std::shared_ptr<SwiGLUMLP>>& experts) {
  // Once keep_local_experts dropped the others, no other split can run them.
  for (const auto& e : experts)
    if (!e)
      HP_THROW(ValueError, "moe", "set_expert_parallel after keep_local_experts: this block holds ",
               "only its own experts");
}

void drop_nonlocal_experts(nn::Module& block, std::vector<std::shared_ptr<SwiGLUMLP>>& experts,
                           const dist::CommPtr& ep) {
  if (!ep) HP_THROW(ValueError, "moe", "keep_local_experts needs set_expert_parallel first");
  const auto count = static_cast<int64_t>(experts.size());
  const moe::ExpertRange mine = moe::local_experts(count, ep->size(), ep->rank());
  nn::Module* list = nullptr;
  for (const auto& [name, child] : block.children())
    if (name == "experts") list = child.get();
  HP_CHECK(list != nullptr);
  for (int64_t e = 0; e < count; ++e) {
    if (e >= mine.first && e < mine.first + mine.count) continue;
    if (experts[size_t(e)]) list->remove_child(std::to_string(e));
    experts[size_t(e)] = nullptr;
  }
}

void MoEBlock::set_expert_parallel(dist::CommPtr ep, ExpertParallelKernel kernel) {
  if (kernel.groups < 1)
    HP_THROW(ValueError, "moe", "MegaMoE needs at least one expert group, got ", kernel.groups);
  check_all_experts_held(experts);
  ep_kernel_ = kernel;
  ep_ = std::move(ep);
}

void MoEBlock::keep_local_experts() { drop_nonlocal_experts(*this, experts, ep_); }

Tensor MoEBlock::run_local_experts(const Tensor& xs, const std::vector<int64_t>& counts) const {
  const moe::ExpertRange mine =
      ep_ ? moe::local_experts(opt_.num_experts, ep_->size(), ep_->rank())
          : moe::ExpertRange{0, opt_.num_experts};
  if (mine.count == 0) return xs;  // [0, hidden]: no expert here, so no row arrives either
  const auto first = experts.begin() + mine.first, last = first + mine.count;
  if (grouped_kernel_) {
    std::vector<int32_t> ends(counts.size());
    int64_t end = 0;
    for (size_t e = 0; e < counts.size(); ++e) ends[e] = static_cast<int32_t>(end += counts[e]);
    const Tensor group_ends = from_data<int32_t>(ends, {mine.count});
    auto stacked = [&](std::shared_ptr<nn::Linear> SwiGLUMLP::*proj) {  // [E_local, out, in]
      std::vector<Tensor> w;
      for (auto ex = first; ex != last; ++ex) w.push_back((**ex.*proj)->weight);
      return stack(w, 0);
    };
    const Tensor g = grouped_kernel_(xs, group_ends, stacked(&SwiGLUMLP::gate_proj));  // [R, inter]
    const Tensor u = grouped_kernel_(xs, group_ends, stacked(&SwiGLUMLP::up_proj));    // [R, inter]
    return grouped_kernel_(fusion::swiglu(g, u), group_ends,
                           stacked(&SwiGLUMLP::down_proj));  // [R, hidden]
  }
  // The fused f32 grouped experts with one assignment per row (weight 1, the local expert id).
  const bool f32 = xs.dtype() == DType::f32 && opt_.dtype == DType::f32;
  auto as_f32 = [&](const Tensor& t) { return f32 ? t : cast(t, DType::f32); };
  std::vector<Tensor> g, u, d;
  for (auto ex = first; ex != last; ++ex) {
    g.push_back(as_f32((*ex)->gate_proj->weight));
    u.push_back(as_f32((*ex)->up_proj->weight));
    d.push_back(as_f32((*ex)->down_proj->weight));
  }
  std::vector<int64_t> id;
  for (size_t e = 0; e < counts.size(); ++e) id.insert(id.end(), size_t(counts[e]), int64_t(e));
  const int64_t rows = xs.size(0);
  Tensor y = grouped_experts(as_f32(xs), ones({rows, 1}), from_data<int64_t>(id, {rows, 1}), g, u, d);
  return f32 ? y : cast(y, xs.dtype());
}

bool MoEBlock::megamoe_runs(const Tensor& x) const {
  if (!grouped_kernel_) return true;
  // MX experts compute in x's and the weights' dtypes (f32 or bf16) in the sequential path, and
  // MegaMoE runs them in the same dtypes.
  auto fits = [](DType d) { return d == DType::f32 || d == DType::bf16; };
  return grouped_kernel_.target<mx::MxGroupedKernel>() && fits(x.dtype()) && fits(opt_.dtype);
}

Tensor MoEBlock::run_megamoe(const Tensor& xs, const std::vector<int64_t>& count) const {
  const moe::ExpertRange mine = moe::local_experts(opt_.num_experts, ep_->size(), ep_->rank());
  const auto* mx_kernel = grouped_kernel_ ? grouped_kernel_.target<mx::MxGroupedKernel>() : nullptr;
  // MX experts run in the rows' and weights' own dtypes, as mx_grouped_experts. The f32 experts
  // take the weights through the same differentiable cast as run_local_experts (so their gradients
  // round to the parameters' dtype as there) and f32 or bf16 rows as they are: the rows travel in
  // their dtype and MegaMoE widens and rounds them where run_local_experts casts.
  auto weight = [&](const Tensor& t) { return mx_kernel ? t : cast(t, DType::f32); };
  moe::LocalExpertWeights w;
  for (int64_t e = mine.first; e < mine.first + mine.count; ++e) {
    w.gate.push_back(weight(experts[size_t(e)]->gate_proj->weight));
    w.up.push_back(weight(experts[size_t(e)]->up_proj->weight));
    w.down.push_back(weight(experts[size_t(e)]->down_proj->weight));
  }
  const bool native = xs.dtype() == DType::f32 || xs.dtype() == DType::bf16;
  const Tensor y =
      moe::megamoe_experts(native ? xs : cast(xs, DType::f32), count, opt_.num_experts, w, ep_,
                             {.groups = ep_kernel_.groups,
                              .mx = mx_kernel ? std::optional(mx_kernel->spec) : std::nullopt});
  return native ? y : cast(y, xs.dtype());
}

Tensor grouped_experts(const Tensor& x, const Tensor& weights, const Tensor& indices,
                       const std::vector<Tensor>& gate_w, const std::vector<Tensor>& up_w,
                       const std::vector<Tensor>& down_w, double swiglu_limit) {
  const auto e = static_cast<int64_t>(gate_w.size());
  if (e == 0 || up_w.size() != gate_w.size() || down_w.size() != gate_w.size())
    HP_THROW(ValueError, "moe", "need one gate/up/down weight per expert, got ", gate_w.size(), "/",
             up_w.size(), "/", down_w.size());
  if (x.dim() != 2 || x.dtype() != DType::f32 || weights.dtype() != DType::f32)
    HP_THROW(ValueError, "moe",
             "grouped experts need x [tokens, hidden] f32 and f32 weights, got x ", x.desc(),
             ", weights ", weights.desc());
  if (indices.dim() != 2 || weights.shape() != indices.shape() || indices.size(0) != x.size(0))
    HP_THROW(ValueError, "moe", "weights ", weights.desc(), " and indices ", indices.desc(),
             " must both be [tokens = ", x.size(0), ", k]");
  const int64_t h = x.size(1), i = gate_w[0].size(0);
  for (int64_t q = 0; q < e; ++q) {
    const Shape in_shape{i, h}, out_shape{h, i};
    for (const Tensor* t : {&gate_w[q], &up_w[q], &down_w[q]}) {
      const Shape& want = t == &down_w[q] ? out_shape : in_shape;
      if (t->shape() != want || t->dtype() != DType::f32 || !t->is_contiguous())
        HP_THROW(ValueError, "moe", "expert ", q, " weight ", t->desc(), " must be contiguous f32 ",
                 shape_str(want));
    }
  }
  std::vector<Tensor> in{x, weights, indices};
  in.insert(in.end(), gate_w.begin(), gate_w.end());
  in.insert(in.end(), up_w.begin(), up_w.end());
  in.insert(in.end(), down_w.begin(), down_w.end());
  return autograd::apply_function<GroupedExpertsFn>(
      in, swiglu_limit > 0 ? std::any(static_cast<float>(swiglu_limit)) : std::any())[0];
}

}  // namespace hp::models
