// MegaMoE forward and backward plans (megamoe.h).
#include "hp/moe/megamoe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/grouped_gemm.h"
#include "hp/kernels/cpu/swiglu.h"
#include "hp/moe/expert_parallel.h"
#include "hp/moe/megamoe_pipeline.h"
#include "hp/multicore/runtime.h"
#include "hp/multicore/trace.h"
#include "hp/mx/expert_gemm.h"
#include "hp/ops/ops.h"

namespace hp::moe {

namespace {

using megamoe_detail::add_pipeline;
using megamoe_detail::Group;
using megamoe_detail::GroupBuffers;
using megamoe_detail::Layout;
using megamoe_detail::make_layout;
using megamoe_detail::rows_of;
using megamoe_detail::suffix;
using multicore::BufferId;
using multicore::Deps;
using multicore::EventId;
using multicore::Plan;
using multicore::TaskContext;

// The process-wide runtime MegaMoE runs on (its workers sleep between runs): as many GEMM workers
// as the process pool has threads (the pool drops to one thread during a run, so the workers are
// the rank's cores), one vector worker and the comm worker. Made again when the pool size or the
// link model asked for changes. MegaMoE runs from one thread at a time.
multicore::Runtime& runtime(int rank, const std::optional<multicore::LinkModel>& link) {
  static std::mutex mu;
  static std::unique_ptr<multicore::Runtime> rt;
  static multicore::LinkModel env_link = multicore::LinkModel::from_env();
  std::lock_guard<std::mutex> lock(mu);
  const multicore::LinkModel want = link ? *link : env_link;
  const int cube = std::max(1, num_threads());
  if (!rt || rt->options().link.gbps != want.gbps ||
      rt->options().link.latency_us != want.latency_us || rt->options().cube_threads != cube) {
    rt.reset();
    multicore::RuntimeOptions o = multicore::RuntimeOptions::from_env();
    o.rank = rank;
    o.link = want;
    o.cube_threads = cube;
    rt = std::make_unique<multicore::Runtime>(o);
  }
  return *rt;
}

MegaMoERunStats g_last_forward, g_last_backward;

// Runs a plan as `options` says and records its timings.
void run_plan(Plan& plan, const MegaMoEOptions& options, int rank, MegaMoERunStats* stats) {
  multicore::Runtime& rt = runtime(rank, options.link);
  const multicore::RunTrace t =
      options.overlap ? rt.run(plan) : multicore::run_sequential(plan, rt.options().link);
  // Union of the compute spans (cube and vector together) and of the comm spans.
  auto busy = [&](bool comm) {
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const multicore::Span& sp : t.spans)
      if ((plan.task(sp.task).role == multicore::Role::comm) == comm)
        iv.emplace_back(sp.t0_ns, sp.t1_ns);
    std::sort(iv.begin(), iv.end());
    int64_t total = 0, end = INT64_MIN;
    for (auto [a, b] : iv) {
      if (b <= end) continue;
      total += b - std::max(a, end);
      end = b;
    }
    return double(total) * 1e-9;
  };
  stats->wall_s = t.seconds();
  stats->compute_s = busy(false);
  stats->comm_s = busy(true);
  stats->bytes = 0;
  for (multicore::TaskId i = 0; i < plan.num_tasks(); ++i) stats->bytes += plan.task(i).comm.bytes;
  stats->chrome_trace = options.trace ? multicore::chrome_trace(plan, t, rank) : std::string();
}

// What the backward needs from the forward: the layout (its receive side filled by the forward
// run), the weights and, per group, the regrouped input and the gate / up projections ([R, H],
// [R, I], [R, I], in the compute dtype: f32, or the rows' with MX experts).
struct Saved {
  MegaMoEOptions options;
  mx::ExpertDTypes dt;  // the rows' (xs) and the weights' dtypes; both f32 without options.mx
  Layout layout;
  dist::CommPtr ep;
  LocalExpertWeights w;
  std::vector<Tensor> x, gate, up;
};

// Expert j of a group: its local expert index e, its first row r0 in the group's buffers and its
// row count as grouped_gemm's one group end offset.
struct ExpertRows {
  size_t e;
  int64_t r0;
  int32_t end;
};

// A task with one block per expert of group gi (at least one, so that an empty group still fires
// its event); fn(ctx, rows) runs each expert's part. Cube: its GEMMs; vector: its elementwise rows.
template <class Fn>
void add_per_expert(Plan& p, multicore::Role role, const std::string& name,
                    std::vector<BufferId> reads, std::vector<BufferId> writes, const Saved* s,
                    size_t gi, Deps deps, Fn fn) {
  const int64_t slots = std::max<int64_t>(s->layout.groups[gi].experts(), 1);
  auto body = [s, gi, fn](const TaskContext& ctx, int64_t j, int64_t, int64_t) {
    const Group& g = s->layout.groups[gi];
    if (j >= g.experts()) return;
    const int64_t r0 = g.expert_at[size_t(j)];
    fn(ctx, ExpertRows{size_t(g.e_lo + j), r0, int32_t(g.expert_at[size_t(j) + 1] - r0)});
  };
  if (role == multicore::Role::cube)
    p.add_cube(name, std::move(reads), std::move(writes), slots, 1, body, std::move(deps));
  else
    p.add_vector(name, std::move(reads), std::move(writes), slots, 1, body, std::move(deps));
}

template <class Fn>
void add_expert_cube(Plan& p, const std::string& name, std::vector<BufferId> reads,
                     std::vector<BufferId> writes, const Saved* s, size_t gi, Deps deps, Fn fn) {
  add_per_expert(p, multicore::Role::cube, name, std::move(reads), std::move(writes), s, gi,
                 std::move(deps), std::move(fn));
}

// One expert's math on its rows [rows, ·]: f32 GEMMs (grouped_gemm's kernels) and SwiGLU
// (kernels/cpu/swiglu.h) as the fused grouped experts, or with options.mx the MX GEMMs
// (mx/expert_gemm.h) and the eager SwiGLU ops (silu, mul, silu_bwd) as mx_grouped_experts and
// fusion::swiglu in the sequential path; either way bitwise its counterpart there. MX rows may be
// bf16 (s.dt.act): the sequential path's projections, SwiGLU results and token gradients are bf16
// tensors then, each rounded once where it is written, and so are the buffers here. bf16 rows of
// the f32 experts are widened to f32 by "regroup g" and rounded back by "unregroup g" (the
// pipeline's Layout::compute), so everything here reads and writes f32 for them.

// Elements [at, at + len) of a buffer as a flat tensor of its dtype.
Tensor flat(const TaskContext& ctx, BufferId b, int64_t at, int64_t len) {
  return narrow(reshape(ctx.buffer(b), {-1}), 0, at, len);
}

// Row r of a [·, cols] buffer.
void* row(const TaskContext& ctx, BufferId b, int64_t r, int64_t cols) {
  const Tensor& t = ctx.buffer(b);
  return static_cast<char*>(t.raw_data()) + r * cols * int64_t(t.itemsize());
}

// y [rows, N] = x [rows, K] · w [N, K]ᵀ.
void fprop(const Saved& s, const void* x, const Tensor& w, int32_t rows, int64_t N, int64_t K,
           void* y) {
  if (s.options.mx) return mx::expert_fprop(x, w.raw_data(), rows, N, K, *s.options.mx, s.dt, y);
  const float* wp = w.data<float>();
  kernels::grouped_gemm_f32(true, 1, &rows, N, K, static_cast<const float*>(x), K, &wp, K, 0.0f,
                            static_cast<float*>(y), N);
}

// dx [rows, K] (+)= dy [rows, N] · w [N, K], dx the flat [rows · K] view of the output rows;
// accumulate: add to dx (the second projection's share of the same input's gradient, one
// rounding as autograd's sum, an elementwise add in dx's dtype).
void dgrad(const Saved& s, const void* dy, const Tensor& w, int32_t rows, int64_t N, int64_t K,
           const Tensor& dx, bool accumulate) {
  if (!s.options.mx) {
    const float* wp = w.data<float>();
    kernels::grouped_gemm_f32(false, 1, &rows, K, N, static_cast<const float*>(dy), N, &wp, K,
                              accumulate ? 1.0f : 0.0f, dx.data<float>(), K);
    return;
  }
  if (!accumulate)
    return mx::expert_dgrad(dy, w.raw_data(), rows, N, K, *s.options.mx, s.dt, dx.raw_data());
  if (rows == 0) return;
  const Tensor part = empty({int64_t(rows) * K}, s.dt.act);
  mx::expert_dgrad(dy, w.raw_data(), rows, N, K, *s.options.mx, s.dt, part.raw_data());
  kernels::elementwise_into(kernels::EwOp::add, dx, dx, part);
}

// dw [N, K] = dyᵀ · x over the expert's rows (zeros when it has none).
void wgrad(const Saved& s, const void* dy, const void* x, int32_t rows, int64_t N, int64_t K,
           const Tensor& dw) {
  if (s.options.mx) return mx::expert_wgrad(dy, x, rows, N, K, *s.options.mx, s.dt, dw.raw_data());
  float* c = dw.data<float>();
  kernels::grouped_gemm_wgrad_f32(1, &rows, N, K, static_cast<const float*>(dy), N,
                                  static_cast<const float*>(x), K, 0.0f, &c, K);
}

// act = silu(gate) · up on elements [at, at + len).
void swiglu(const Saved& s, const TaskContext& ctx, BufferId gt, BufferId up, BufferId act,
            int64_t at, int64_t len) {
  if (len == 0) return;
  if (!s.options.mx) {
    kernels::swiglu_f32(ctx.data<float>(gt) + at, ctx.data<float>(up) + at,
                        ctx.data<float>(act) + at, len);
    return;
  }
  const Tensor a = flat(ctx, act, at, len);
  kernels::elementwise_into(kernels::EwOp::silu, a, flat(ctx, gt, at, len), Tensor());
  kernels::elementwise_into(kernels::EwOp::mul, a, a, flat(ctx, up, at, len));
}

// The SwiGLU backward on elements [at, at + len): act again (the down projection's weight gradient
// reads it), dgate and dup from dact. b: gate, up, dact, act, dgate, dup.
void swiglu_backward(const Saved& s, const TaskContext& ctx, const std::array<BufferId, 6>& b,
                     int64_t at, int64_t len) {
  if (len == 0) return;
  if (!s.options.mx) {
    const float *g0 = ctx.data<float>(b[0]) + at, *u0 = ctx.data<float>(b[1]) + at;
    kernels::swiglu_f32(g0, u0, ctx.data<float>(b[3]) + at, len);
    kernels::swiglu_backward_f32(g0, u0, ctx.data<float>(b[2]) + at, ctx.data<float>(b[4]) + at,
                                 ctx.data<float>(b[5]) + at, len);
    return;
  }
  using kernels::EwOp;
  const Tensor g = flat(ctx, b[0], at, len), u = flat(ctx, b[1], at, len),
               dact = flat(ctx, b[2], at, len), act = flat(ctx, b[3], at, len),
               dg = flat(ctx, b[4], at, len), du = flat(ctx, b[5], at, len);
  // Eager autograd of mul(silu(g), u): s = silu(g); du = dact · s; ds = dact · u;
  // dg = silu_bwd(g, ds).
  kernels::elementwise_into(EwOp::silu, act, g, Tensor());
  kernels::elementwise_into(EwOp::mul, du, dact, act);
  kernels::elementwise_into(EwOp::mul, act, act, u);
  kernels::elementwise_into(EwOp::mul, dg, dact, u);
  kernels::elementwise_into(EwOp::silu_bwd, dg, g, dg);
}

Tensor forward_plan(const std::shared_ptr<Saved>& sv, const Tensor& xs,
                    const std::vector<int64_t>& count) {
  Layout& L = sv->layout;
  const int64_t H = L.hidden, I = L.inter;
  Plan plan;
  const BufferId cnt = plan.add_buffer("count", from_data<int64_t>(count, {int64_t(count.size())}));
  const BufferId in = plan.add_buffer("xs", L.rows > 0 ? xs : rows_of(1, H, L.dtype));
  Tensor y = rows_of(L.rows, H, L.dtype);
  const BufferId out = plan.add_buffer("ys", y);
  const Saved* s = sv.get();
  auto compute = [s, H, I](Plan& p, size_t gi, const GroupBuffers& b, EventId ready) {
    const std::string n = suffix(int64_t(gi));
    const BufferId x = b.x, yb = b.y, gt = b.rows[0], up = b.rows[1], act = b.rows[2];
    const EventId e_up = p.add_event("up" + n), e_act = p.add_event("act" + n),
                  e_down = p.add_event("down" + n);
    add_expert_cube(p, "up" + n, {x}, {gt, up}, s, gi, {{{ready, 1}}, e_up},
                    [s, x, gt, up, H, I](const TaskContext& ctx, ExpertRows r) {
                      const void* a = row(ctx, x, r.r0, H);
                      fprop(*s, a, s->w.gate[r.e], r.end, I, H, row(ctx, gt, r.r0, I));
                      fprop(*s, a, s->w.up[r.e], r.end, I, H, row(ctx, up, r.r0, I));
                    });
    add_per_expert(p, multicore::Role::vector, "swiglu" + n, {gt, up}, {act}, s, gi,
                   {{{e_up, 1}}, e_act}, [s, gt, up, act, I](const TaskContext& ctx, ExpertRows r) {
                     swiglu(*s, ctx, gt, up, act, r.r0 * I, r.end * I);
                   });
    add_expert_cube(p, "down" + n, {act}, {yb}, s, gi, {{{e_act, 1}}, e_down},
                    [s, act, yb, H, I](const TaskContext& ctx, ExpertRows r) {
                      fprop(*s, row(ctx, act, r.r0, I), s->w.down[r.e], r.end, H, I,
                            row(ctx, yb, r.r0, H));
                    });
    return e_down;
  };
  const std::vector<GroupBuffers> ids = add_pipeline(
      plan, L, sv->ep, cnt, in, out, {{"gate", I}, {"up", I}, {"act", I}}, compute, nullptr);
  run_plan(plan, sv->options, int(L.rank), &g_last_forward);
  // The regrouped inputs and projections, kept for the backward.
  for (const GroupBuffers& b : ids) {
    sv->x.push_back(plan.buffer(b.x));
    sv->gate.push_back(plan.buffer(b.rows[0]));
    sv->up.push_back(plan.buffer(b.rows[1]));
  }
  return narrow(y, 0, 0, L.rows);
}

// dy [A, H] → dxs [A, H] and the weight gradients (zero for experts that got no rows).
std::vector<Tensor> backward_plan(const std::shared_ptr<Saved>& sv, const Tensor& dy) {
  Layout& L = sv->layout;
  const int64_t H = L.hidden, I = L.inter, local = int64_t(sv->w.gate.size());
  Plan plan;
  const BufferId in = plan.add_buffer("dys", L.rows > 0 ? dy : rows_of(1, H, L.dtype));
  Tensor dx = rows_of(L.rows, H, L.dtype);
  const BufferId out = plan.add_buffer("dxs", dx);
  std::vector<Tensor> dgate, dup, ddown;
  for (int64_t e = 0; e < local; ++e) {
    dgate.push_back(empty({I, H}, sv->dt.weight));
    dup.push_back(empty({I, H}, sv->dt.weight));
    ddown.push_back(empty({H, I}, sv->dt.weight));
  }
  struct GroupIds {
    BufferId dy, act, dg, du;
    EventId ready;
  };
  auto ids = std::make_shared<std::vector<GroupIds>>(L.groups.size());
  const Saved* s = sv.get();
  auto compute = [s, ids, H, I](Plan& p, size_t gi, const GroupBuffers& b, EventId ready) {
    const std::string n = suffix(int64_t(gi));
    const BufferId dyg = b.x, dxg = b.y, dact = b.rows[0], act = b.rows[1], dg = b.rows[2],
                   du = b.rows[3];
    const BufferId gt = p.add_buffer("gate" + n, s->gate[gi]),
                   up = p.add_buffer("up" + n, s->up[gi]);
    const EventId e_dact = p.add_event("dact" + n), e_sw = p.add_event("dswiglu" + n),
                  e_dx = p.add_event("dx" + n);
    add_expert_cube(p, "dact" + n, {dyg}, {dact}, s, gi, {{{ready, 1}}, e_dact},
                    [s, dyg, dact, H, I](const TaskContext& ctx, ExpertRows r) {
                      dgrad(*s, row(ctx, dyg, r.r0, H), s->w.down[r.e], r.end, H, I,
                            flat(ctx, dact, r.r0 * I, r.end * I), false);
                    });
    add_per_expert(p, multicore::Role::vector, "dswiglu" + n, {gt, up, dact}, {act, dg, du}, s, gi,
                   {{{e_dact, 1}}, e_sw},
                   [s, gt, up, dact, act, dg, du, I](const TaskContext& ctx, ExpertRows r) {
                     swiglu_backward(*s, ctx, {gt, up, dact, act, dg, du}, r.r0 * I, r.end * I);
                   });
    add_expert_cube(p, "dx" + n, {dg, du}, {dxg}, s, gi, {{{e_sw, 1}}, e_dx},
                    [s, dg, du, dxg, H, I](const TaskContext& ctx, ExpertRows r) {
                      const Tensor o = flat(ctx, dxg, r.r0 * H, r.end * H);
                      dgrad(*s, row(ctx, dg, r.r0, I), s->w.gate[r.e], r.end, I, H, o, false);
                      dgrad(*s, row(ctx, du, r.r0, I), s->w.up[r.e], r.end, I, H, o, true);
                    });
    (*ids)[gi] = {dyg, act, dg, du, e_sw};
    return e_dx;
  };
  // Group g's weight gradients, on the GEMM workers while its return all-to-all travels.
  std::vector<Tensor>*gd = &dgate, *ud = &dup, *dd = &ddown;
  auto after = [s, ids, gd, ud, dd, H, I](Plan& p, size_t gi) {
    const GroupIds d = (*ids)[gi];
    const BufferId x = p.add_buffer("x " + std::to_string(gi) + " saved", s->x[gi]);
    add_expert_cube(p, "dW " + std::to_string(gi), {x, d.dy, d.act, d.dg, d.du}, {}, s, gi,
                    {{{d.ready, 1}}, multicore::kNoEvent},
                    [s, d, x, gd, ud, dd, H, I](const TaskContext& ctx, ExpertRows r) {
                      const void* xr = row(ctx, x, r.r0, H);
                      wgrad(*s, row(ctx, d.dg, r.r0, I), xr, r.end, I, H, (*gd)[r.e]);
                      wgrad(*s, row(ctx, d.du, r.r0, I), xr, r.end, I, H, (*ud)[r.e]);
                      wgrad(*s, row(ctx, d.dy, r.r0, H), row(ctx, d.act, r.r0, I), r.end, H, I,
                            (*dd)[r.e]);
                    });
  };
  add_pipeline(plan, L, sv->ep, multicore::kNoBuffer, in, out,
               {{"dact", I}, {"act", I}, {"dgate", I}, {"dup", I}}, compute, after);
  run_plan(plan, sv->options, int(L.rank), &g_last_backward);
  std::vector<Tensor> grads{narrow(dx, 0, 0, L.rows)};
  grads.insert(grads.end(), dgate.begin(), dgate.end());
  grads.insert(grads.end(), dup.begin(), dup.end());
  grads.insert(grads.end(), ddown.begin(), ddown.end());
  return grads;
}

}  // namespace

MegaMoERunStats megamoe_last_forward() {
  return g_last_forward;
}
MegaMoERunStats megamoe_last_backward() {
  return g_last_backward;
}

Tensor megamoe_experts(const Tensor& xs, const std::vector<int64_t>& count, int64_t num_experts,
                       const LocalExpertWeights& w, const dist::CommPtr& ep,
                       const MegaMoEOptions& options) {
  const int64_t groups = options.groups;
  const int64_t local = local_experts(num_experts, ep->size(), ep->rank()).count;
  if (groups < 1) HP_THROW(ValueError, "megamoe", "groups must be >= 1, got ", groups);
  if (int64_t(w.gate.size()) != local || w.up.size() != w.gate.size() ||
      w.down.size() != w.gate.size())
    HP_THROW(ValueError, "megamoe", "rank ", ep->rank(), " owns ", local, " experts but got ",
             w.gate.size(), "/", w.up.size(), "/", w.down.size(), " gate/up/down weights");
  // Rows are f32 or bf16; MX experts take f32 or bf16 weights (as mx_grouped_experts), the
  // others f32 ones (their kernels are f32; bf16 rows are widened per group inside the plan).
  auto allowed = [&](DType d) { return d == DType::f32 || (options.mx && d == DType::bf16); };
  if (xs.dim() != 2 || (xs.dtype() != DType::f32 && xs.dtype() != DType::bf16))
    HP_THROW(ValueError, "megamoe", "needs xs [rows, hidden] f32 or bf16, got ", xs.desc());
  const int64_t H = xs.size(1);
  const int64_t I = local > 0 ? w.gate[0].size(0) : 1;
  const DType wt = local > 0 ? w.gate[0].dtype() : DType::f32;
  for (int64_t e = 0; e < local; ++e)
    for (const Tensor* t : {&w.gate[size_t(e)], &w.up[size_t(e)], &w.down[size_t(e)]}) {
      const Shape want = t == &w.down[size_t(e)] ? Shape{H, I} : Shape{I, H};
      if (t->shape() != want || t->dtype() != wt || !allowed(wt) || !t->is_contiguous())
        HP_THROW(ValueError, "megamoe", "local expert ", e, " weight ", t->desc(),
                 " must be contiguous ", shape_str(want), " in the first weight's dtype (f32",
                 options.mx ? " or bf16" : "", ")");
    }
  auto sv = std::make_shared<Saved>();
  if (int64_t(count.size()) != num_experts)
    HP_THROW(ValueError, "megamoe", "count has ", count.size(), " entries for ", num_experts,
             " experts");
  // The f32 experts compute in f32 whatever the rows' dtype, as run_local_experts after its casts.
  sv->layout = make_layout(count, num_experts, ep->size(), ep->rank(), groups, H, I, xs.dtype(),
                           options.mx ? xs.dtype() : DType::f32);
  sv->dt = {xs.dtype(), wt};
  sv->ep = ep;
  sv->w = w;
  sv->options = options;
  if (sv->layout.rows != xs.size(0))
    HP_THROW(ValueError, "megamoe", "counts add up to ", sv->layout.rows, " rows, xs has ",
             xs.size(0));
  std::vector<Tensor> inputs{xs};
  for (const auto* v : {&w.gate, &w.up, &w.down}) inputs.insert(inputs.end(), v->begin(), v->end());
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = forward_plan(sv, contiguous(xs.detach()), count);
  }
  if (autograd::needs_grad(inputs)) {
    std::vector<bool> need;
    for (const Tensor& t : inputs) need.push_back(t.requires_grad());
    autograd::record("MegaMoE", inputs, {y}, [sv, need](const std::vector<Tensor>& g) {
      autograd::NoGradGuard ng;
      // The output gradient in the rows' dtype (what the sequential MX experts quantize, and
      // what the sequential exchange sends back).
      const Tensor dy = g[0].dtype() == sv->dt.act ? g[0] : g[0].to(sv->dt.act);
      std::vector<Tensor> grads = backward_plan(sv, contiguous(dy));
      for (size_t i = 0; i < grads.size(); ++i)
        if (!need[i]) grads[i] = Tensor();
      return grads;
    });
  }
  return y;
}

int64_t megamoe_groups(int64_t num_experts, int64_t n, int64_t groups) {
  const int64_t chunk = (num_experts + n - 1) / n;
  const int64_t slots = (chunk + groups - 1) / groups;
  return (chunk + slots - 1) / slots;
}

}  // namespace hp::moe
