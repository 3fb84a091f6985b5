// MegaMoE forward and backward plans (megamoe.h).
#include "hp/shard/megamoe.h"

#include <algorithm>
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
#include "hp/kernels/cpu/grouped_gemm.h"
#include "hp/kernels/cpu/swiglu.h"
#include "hp/multicore/runtime.h"
#include "hp/ops/ops.h"
#include "hp/shard/expert_parallel.h"

namespace hp::shard {

namespace {

using multicore::BufferId;
using multicore::Deps;
using multicore::EventId;
using multicore::Plan;
using multicore::TaskContext;

// One expert group as this rank sees it. Rows are [rows, H] unless said otherwise.
struct Group {
  int64_t e_lo = 0, e_hi = 0;       // this rank's local experts [e_lo, e_hi) in the group
  std::vector<int64_t> send, recv;  // [n] rows to / from each rank
  std::vector<int64_t> send_at;     // [n] first row of owner r's block in the send buffer
  std::vector<int64_t> recv_at;     // [n] first row of source s's block in the receive buffer
  int64_t S = 0, R = 0;             // Σ send, Σ recv
  std::vector<int64_t> home;        // [n] first row in xs of the rows owner r gets
  std::vector<int64_t> expert_at;   // [e_hi - e_lo + 1] row offsets of each expert, regrouped
  std::vector<int64_t> perm;        // [R] regrouped row i = received row perm[i]
  int64_t experts() const { return e_hi - e_lo; }
};

struct Layout {
  int64_t n = 0, rank = 0, hidden = 0, inter = 0, rows = 0;
  std::vector<Group> groups;  // the groups with at least one expert slot
};

Layout make_layout(const std::vector<int64_t>& count, int64_t num_experts, const dist::CommPtr& ep,
                   int64_t groups, int64_t hidden, int64_t inter) {
  const ExchangeCounts ex = exchange_counts(count, num_experts, ep);
  Layout L;
  L.n = ep->size();
  L.rank = ep->rank();
  L.hidden = hidden;
  L.inter = inter;
  const size_t n = size_t(L.n);
  const int64_t chunk = (num_experts + L.n - 1) / L.n;
  const int64_t per = local_experts(num_experts, L.n, L.rank).count;
  const int64_t slots = (chunk + groups - 1) / groups;
  std::vector<int64_t> offset(size_t(num_experts) + 1, 0);  // [E + 1] rows of xs before expert e
  for (int64_t e = 0; e < num_experts; ++e)
    offset[size_t(e) + 1] = offset[size_t(e)] + count[size_t(e)];
  L.rows = offset.back();
  for (int64_t lo = 0; lo < chunk; lo += slots) {
    const int64_t hi = std::min(chunk, lo + slots);
    Group g;
    g.e_lo = std::min(lo, per);
    g.e_hi = std::min(hi, per);
    g.send.assign(n, 0);
    g.recv.assign(n, 0);
    g.send_at.assign(n, 0);
    g.recv_at.assign(n, 0);
    g.home.assign(n, 0);
    for (size_t r = 0; r < n; ++r) {  // owner r's experts in slots [lo, hi): contiguous in xs
      const ExpertRange own = local_experts(num_experts, L.n, int64_t(r));
      const int64_t a = own.first + std::min(lo, own.count),
                    b = own.first + std::min(hi, own.count);
      g.home[r] = offset[size_t(a)];
      g.send[r] = offset[size_t(b)] - offset[size_t(a)];
      g.send_at[r] = g.S;
      g.S += g.send[r];
    }
    // Received: source-major, each source's rows by local expert (exchange_counts' layout).
    std::vector<int64_t> block_at(n * size_t(std::max<int64_t>(per, 1)), 0);
    for (size_t s = 0; s < n; ++s) {
      g.recv_at[s] = g.R;
      for (int64_t e = g.e_lo; e < g.e_hi; ++e) {
        block_at[s * size_t(per) + size_t(e)] = g.R;
        const int64_t c = ex.recv_by_expert[s * size_t(per) + size_t(e)];
        g.recv[s] += c;
        g.R += c;
      }
    }
    // Regrouped: by local expert, stable by source (the order of the sequential path).
    g.expert_at.push_back(0);
    for (int64_t e = g.e_lo; e < g.e_hi; ++e) {
      for (size_t s = 0; s < n; ++s) {
        const size_t b = s * size_t(per) + size_t(e);
        for (int64_t i = 0; i < ex.recv_by_expert[b]; ++i) g.perm.push_back(block_at[b] + i);
      }
      g.expert_at.push_back(int64_t(g.perm.size()));
    }
    L.groups.push_back(std::move(g));
  }
  return L;
}

// " g": task, buffer and event names of group g (appended, not "a" + to_string: GCC 12's
// -Wrestrict misfires on that).
std::string suffix(int64_t g) {
  std::string s(" ");
  s += std::to_string(g);
  return s;
}

// Buffers get at least one row so that no tensor is empty; the row counts above say what is used.
Tensor rows_of(int64_t rows, int64_t cols) {
  return empty({std::max<int64_t>(rows, 1), cols});
}

void copy_rows(const float* src, int64_t src_row, float* dst, int64_t dst_row, int64_t rows,
               int64_t cols) {
  std::copy_n(src + src_row * cols, rows * cols, dst + dst_row * cols);
}

// Group g's compute between regroup and unregroup: tasks reading `x` (regrouped [R, H]) and
// writing `y` ([R, H]), the first waiting on `ready`; returns the event the last one triggers.
using Compute = std::function<EventId(Plan&, size_t g, BufferId x, BufferId y, EventId ready)>;
// Tasks after group g's return all-to-all is in the comm order (the weight gradients).
using AfterCombine = std::function<void(Plan&, size_t g)>;

// The exchange pipeline over every group (megamoe.h): rows of `in` [A, H] to their owners, through
// `compute`, back into `out` [A, H] at the same rows.
void add_pipeline(Plan& plan, const Layout& L, const dist::CommPtr& comm, BufferId in, BufferId out,
                  const Compute& compute, const AfterCombine& after) {
  const int64_t H = L.hidden, G = int64_t(L.groups.size());
  struct Ids {
    BufferId send, recv, x, y, ysend, back;
    EventId routed, dispatched, regrouped, unregrouped, combined, placed;
  };
  std::vector<Ids> ids(L.groups.size());
  for (int64_t gi = 0; gi < G; ++gi) {
    const Group& g = L.groups[size_t(gi)];
    const std::string s = suffix(int64_t(gi));
    Ids& d = ids[size_t(gi)];
    d.send = plan.add_buffer("send" + s, rows_of(g.S, H));
    d.recv = plan.add_buffer("recv" + s, rows_of(g.R, H));
    d.x = plan.add_buffer("x" + s, rows_of(g.R, H));
    d.y = plan.add_buffer("y" + s, rows_of(g.R, H));
    d.ysend = plan.add_buffer("y send" + s, rows_of(g.R, H));
    d.back = plan.add_buffer("back" + s, rows_of(g.S, H));
    d.routed = plan.add_event("routed" + s);
    d.dispatched = plan.add_event("dispatched" + s);
    d.regrouped = plan.add_event("regrouped" + s);
    d.unregrouped = plan.add_event("unregrouped" + s);
    d.combined = plan.add_event("combined" + s);
    d.placed = plan.add_event("placed" + s);
  }
  const Layout* lp = &L;
  // route g: owner r's rows home[r] of `in` → send rows [send_at[r], +send[r]); one block per
  // owner.
  for (int64_t gi = 0; gi < G; ++gi) {
    const Ids& d = ids[size_t(gi)];
    plan.add_vector("route " + std::to_string(gi), {in}, {d.send}, L.n, 1,
                    [lp, gi, in, d, H](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      const Group& g = lp->groups[size_t(gi)];
                      for (int64_t r = b; r < e; ++r)
                        copy_rows(ctx.data<float>(in), g.home[size_t(r)], ctx.data<float>(d.send),
                                  g.send_at[size_t(r)], g.send[size_t(r)], H);
                    },
                    {{}, d.routed});
  }
  auto dispatch = [&](int64_t gi) {
    const Ids& d = ids[size_t(gi)];
    const Group& g = L.groups[size_t(gi)];
    const BufferId send = d.send;
    auto post = [comm, send, lp, gi](const TaskContext& ctx) {
      const Group& gg = lp->groups[size_t(gi)];
      return comm->iall_to_all_v(narrow(ctx.buffer(send), 0, 0, gg.S), gg.send, gg.recv);
    };
    plan.add_comm(
        "dispatch " + std::to_string(gi), {d.send}, {},
        {.post = post, .result_into = d.recv, .bytes = (g.S - g.send[size_t(L.rank)]) * H * 4},
        {{{d.routed, 1}}, d.dispatched});
  };
  auto place = [&](int64_t gi) {  // back rows → `out` at the rows they left; chained (one `out`)
    const Ids& d = ids[size_t(gi)];
    std::vector<multicore::Wait> waits{{d.combined, 1}};
    if (gi > 0) waits.push_back({ids[size_t(gi - 1)].placed, 1});
    plan.add_vector("place " + std::to_string(gi), {d.back}, {out}, L.n, 1,
                    [lp, gi, out, d, H](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      const Group& g = lp->groups[size_t(gi)];
                      for (int64_t r = b; r < e; ++r)
                        copy_rows(ctx.data<float>(d.back), g.send_at[size_t(r)],
                                  ctx.data<float>(out), g.home[size_t(r)], g.send[size_t(r)], H);
                    },
                    {waits, d.placed});
  };
  if (G > 0) dispatch(0);
  for (int64_t gi = 0; gi < G; ++gi) {
    const Ids& d = ids[size_t(gi)];
    const Group& g = L.groups[size_t(gi)];
    const std::string s = suffix(int64_t(gi));
    if (gi + 1 < G) dispatch(gi + 1);
    const int64_t R = std::max<int64_t>(g.R, 1);
    plan.add_vector("regroup" + s, {d.recv}, {d.x}, R, 64,
                    [lp, gi, d, H](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      const Group& gg = lp->groups[size_t(gi)];
                      for (int64_t i = b; i < std::min(e, gg.R); ++i)
                        copy_rows(ctx.data<float>(d.recv), gg.perm[size_t(i)], ctx.data<float>(d.x),
                                  i, 1, H);
                    },
                    {{{d.dispatched, 1}}, d.regrouped});
    const EventId computed = compute(plan, size_t(gi), d.x, d.y, d.regrouped);
    plan.add_vector("unregroup" + s, {d.y}, {d.ysend}, R, 64,
                    [lp, gi, d, H](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                      const Group& gg = lp->groups[size_t(gi)];
                      for (int64_t i = b; i < std::min(e, gg.R); ++i)
                        copy_rows(ctx.data<float>(d.y), i, ctx.data<float>(d.ysend),
                                  gg.perm[size_t(i)], 1, H);
                    },
                    {{{computed, 1}}, d.unregrouped});
    const BufferId ysend = d.ysend;
    auto post = [comm, ysend, lp, gi](const TaskContext& ctx) {
      const Group& gg = lp->groups[size_t(gi)];
      return comm->iall_to_all_v(narrow(ctx.buffer(ysend), 0, 0, gg.R), gg.recv, gg.send);
    };
    plan.add_comm(
        "combine" + s, {d.ysend}, {},
        {.post = post, .result_into = d.back, .bytes = (g.R - g.recv[size_t(L.rank)]) * H * 4},
        {{{d.unregrouped, 1}}, d.combined});
    if (after) after(plan, size_t(gi));
    if (gi > 0) place(gi - 1);
  }
  if (G > 0) place(G - 1);
}

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
}

// What the backward needs from the forward: the layout, the weights and, per group, the
// regrouped input and the gate / up projections ([R, H], [R, I], [R, I]).
struct Saved {
  MegaMoEOptions options;
  Layout layout;
  dist::CommPtr ep;
  LocalExpertWeights w;
  std::vector<Tensor> x, gate, up;
};

// Rows [expert_at[j], expert_at[j + 1]) of group g's local expert e_lo + j as grouped_gemm's one
// group: its end offset, relative to the expert's first row.
int32_t rows_of_expert(const Group& g, int64_t j) {
  return int32_t(g.expert_at[size_t(j) + 1] - g.expert_at[size_t(j)]);
}

// Elementwise blocks over a group's [R, I] activations.
constexpr int64_t kVectorBlock = 16384;

// Expert j of a group: its local expert index e, its first row r0 in the group's buffers and its
// row count as grouped_gemm's one group end offset.
struct ExpertRows {
  size_t e;
  int64_t r0;
  int32_t end;
};

// A cube task with one slot per expert of group gi (at least one, so that an empty group still
// fires its event); fn(ctx, rows) runs each expert's GEMMs.
template <class Fn>
void add_expert_cube(Plan& p, const std::string& name, std::vector<BufferId> reads,
                     std::vector<BufferId> writes, const Saved* s, size_t gi, Deps deps, Fn fn) {
  const int64_t slots = std::max<int64_t>(s->layout.groups[gi].experts(), 1);
  p.add_cube(
      name, std::move(reads), std::move(writes), slots, 1,
      [s, gi, fn](const TaskContext& ctx, int64_t j, int64_t, int64_t) {
        const Group& g = s->layout.groups[gi];
        if (j >= g.experts()) return;
        fn(ctx, ExpertRows{size_t(g.e_lo + j), g.expert_at[size_t(j)], rows_of_expert(g, j)});
      },
      std::move(deps));
}

Tensor forward_plan(const std::shared_ptr<Saved>& sv, const Tensor& xs) {
  const Layout& L = sv->layout;
  const int64_t H = L.hidden, I = L.inter;
  Plan plan;
  const BufferId in = plan.add_buffer("xs", L.rows > 0 ? xs : rows_of(1, H));
  Tensor y = rows_of(L.rows, H);
  const BufferId out = plan.add_buffer("ys", y);
  for (const Group& g : L.groups) {
    sv->x.push_back(Tensor());
    sv->gate.push_back(rows_of(g.R, I));
    sv->up.push_back(rows_of(g.R, I));
  }
  const Saved* s = sv.get();
  std::vector<BufferId> xids(L.groups.size());
  auto compute = [s, &xids, H, I](Plan& p, size_t gi, BufferId x, BufferId yb, EventId ready) {
    const Group& g = s->layout.groups[gi];
    xids[gi] = x;
    const std::string n = suffix(int64_t(gi));
    const BufferId gt = p.add_buffer("gate" + n, s->gate[gi]),
                   up = p.add_buffer("up" + n, s->up[gi]);
    const BufferId act = p.add_buffer("act" + n, rows_of(g.R, I));
    const EventId e_up = p.add_event("up" + n), e_act = p.add_event("act" + n),
                  e_down = p.add_event("down" + n);
    add_expert_cube(p, "up" + n, {x}, {gt, up}, s, gi, {{{ready, 1}}, e_up},
                    [s, x, gt, up, H, I](const TaskContext& ctx, ExpertRows r) {
                      const float* gw = s->w.gate[r.e].data<float>();
                      const float* uw = s->w.up[r.e].data<float>();
                      const float* a = ctx.data<float>(x) + r.r0 * H;
                      kernels::grouped_gemm_f32(true, 1, &r.end, I, H, a, H, &gw, H, 0.0f,
                                                ctx.data<float>(gt) + r.r0 * I, I);
                      kernels::grouped_gemm_f32(true, 1, &r.end, I, H, a, H, &uw, H, 0.0f,
                                                ctx.data<float>(up) + r.r0 * I, I);
                    });
    p.add_vector("swiglu" + n, {gt, up}, {act}, std::max<int64_t>(g.R * I, 1), kVectorBlock,
                 [s, gi, gt, up, act, I](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
                   e = std::min(e, s->layout.groups[gi].R * I);
                   if (e > b)
                     kernels::swiglu_f32(ctx.data<float>(gt) + b, ctx.data<float>(up) + b,
                                         ctx.data<float>(act) + b, e - b);
                 },
                 {{{e_up, 1}}, e_act});
    add_expert_cube(p, "down" + n, {act}, {yb}, s, gi, {{{e_act, 1}}, e_down},
                    [s, act, yb, H, I](const TaskContext& ctx, ExpertRows r) {
                      const float* dw = s->w.down[r.e].data<float>();
                      kernels::grouped_gemm_f32(true, 1, &r.end, H, I,
                                                ctx.data<float>(act) + r.r0 * I, I, &dw, I, 0.0f,
                                                ctx.data<float>(yb) + r.r0 * H, H);
                    });
    return e_down;
  };
  add_pipeline(plan, L, sv->ep, in, out, compute, nullptr);
  run_plan(plan, sv->options, int(L.rank), &g_last_forward);
  // The regrouped inputs, kept for the weight gradients.
  for (size_t gi = 0; gi < L.groups.size(); ++gi) sv->x[gi] = plan.buffer(xids[gi]);
  return narrow(y, 0, 0, L.rows);
}

// dy [A, H] → dxs [A, H] and the weight gradients (zero for experts that got no rows).
std::vector<Tensor> backward_plan(const std::shared_ptr<Saved>& sv, const Tensor& dy) {
  const Layout& L = sv->layout;
  const int64_t H = L.hidden, I = L.inter, local = int64_t(sv->w.gate.size());
  Plan plan;
  const BufferId in = plan.add_buffer("dys", L.rows > 0 ? dy : rows_of(1, H));
  Tensor dx = rows_of(L.rows, H);
  const BufferId out = plan.add_buffer("dxs", dx);
  std::vector<Tensor> dgate, dup, ddown;
  for (int64_t e = 0; e < local; ++e) {
    dgate.push_back(empty({I, H}));
    dup.push_back(empty({I, H}));
    ddown.push_back(empty({H, I}));
  }
  struct GroupIds {
    BufferId dy, act, dg, du;
    EventId ready;
  };
  auto ids = std::make_shared<std::vector<GroupIds>>(L.groups.size());
  const Saved* s = sv.get();
  auto compute = [s, ids, H, I](Plan& p, size_t gi, BufferId dyg, BufferId dxg, EventId ready) {
    const Group& g = s->layout.groups[gi];
    const std::string n = suffix(int64_t(gi));
    const BufferId gt = p.add_buffer("gate" + n, s->gate[gi]),
                   up = p.add_buffer("up" + n, s->up[gi]);
    const BufferId dact = p.add_buffer("dact" + n, rows_of(g.R, I)),
                   act = p.add_buffer("act" + n, rows_of(g.R, I)),
                   dg = p.add_buffer("dgate" + n, rows_of(g.R, I)),
                   du = p.add_buffer("dup" + n, rows_of(g.R, I));
    const EventId e_dact = p.add_event("dact" + n), e_sw = p.add_event("dswiglu" + n),
                  e_dx = p.add_event("dx" + n);
    add_expert_cube(p, "dact" + n, {dyg}, {dact}, s, gi, {{{ready, 1}}, e_dact},
                    [s, dyg, dact, H, I](const TaskContext& ctx, ExpertRows r) {
                      const float* dw = s->w.down[r.e].data<float>();
                      kernels::grouped_gemm_f32(false, 1, &r.end, I, H,
                                                ctx.data<float>(dyg) + r.r0 * H, H, &dw, I, 0.0f,
                                                ctx.data<float>(dact) + r.r0 * I, I);
                    });
    p.add_vector(
        "dswiglu" + n, {gt, up, dact}, {act, dg, du}, std::max<int64_t>(g.R * I, 1), kVectorBlock,
        [s, gi, gt, up, dact, act, dg, du, I](const TaskContext& ctx, int64_t, int64_t b,
                                              int64_t e) {
          e = std::min(e, s->layout.groups[gi].R * I);
          if (e <= b) return;
          const float *g0 = ctx.data<float>(gt) + b, *u0 = ctx.data<float>(up) + b;
          kernels::swiglu_f32(g0, u0, ctx.data<float>(act) + b, e - b);
          kernels::swiglu_backward_f32(g0, u0, ctx.data<float>(dact) + b, ctx.data<float>(dg) + b,
                                       ctx.data<float>(du) + b, e - b);
        },
        {{{e_dact, 1}}, e_sw});
    add_expert_cube(
        p, "dx" + n, {dg, du}, {dxg}, s, gi, {{{e_sw, 1}}, e_dx},
        [s, dg, du, dxg, H, I](const TaskContext& ctx, ExpertRows r) {
          const float* gw = s->w.gate[r.e].data<float>();
          const float* uw = s->w.up[r.e].data<float>();
          float* o = ctx.data<float>(dxg) + r.r0 * H;
          kernels::grouped_gemm_f32(false, 1, &r.end, H, I, ctx.data<float>(dg) + r.r0 * I, I, &gw,
                                    H, 0.0f, o, H);
          kernels::grouped_gemm_f32(false, 1, &r.end, H, I, ctx.data<float>(du) + r.r0 * I, I, &uw,
                                    H, 1.0f, o, H);
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
                    [d, x, gd, ud, dd, H, I](const TaskContext& ctx, ExpertRows r) {
                      const float* xr = ctx.data<float>(x) + r.r0 * H;
                      float* c = (*gd)[r.e].data<float>();
                      kernels::grouped_gemm_wgrad_f32(
                          1, &r.end, I, H, ctx.data<float>(d.dg) + r.r0 * I, I, xr, H, 0.0f, &c, H);
                      c = (*ud)[r.e].data<float>();
                      kernels::grouped_gemm_wgrad_f32(
                          1, &r.end, I, H, ctx.data<float>(d.du) + r.r0 * I, I, xr, H, 0.0f, &c, H);
                      c = (*dd)[r.e].data<float>();
                      kernels::grouped_gemm_wgrad_f32(
                          1, &r.end, H, I, ctx.data<float>(d.dy) + r.r0 * H, H,
                          ctx.data<float>(d.act) + r.r0 * I, I, 0.0f, &c, I);
                    });
  };
  add_pipeline(plan, L, sv->ep, in, out, compute, after);
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
  if (xs.dim() != 2 || xs.dtype() != DType::f32)
    HP_THROW(ValueError, "megamoe", "needs xs [rows, hidden] f32, got ", xs.desc());
  const int64_t H = xs.size(1);
  const int64_t I = local > 0 ? w.gate[0].size(0) : 1;
  for (int64_t e = 0; e < local; ++e)
    for (const Tensor* t : {&w.gate[size_t(e)], &w.up[size_t(e)], &w.down[size_t(e)]}) {
      const Shape want = t == &w.down[size_t(e)] ? Shape{H, I} : Shape{I, H};
      if (t->shape() != want || t->dtype() != DType::f32 || !t->is_contiguous())
        HP_THROW(ValueError, "megamoe", "local expert ", e, " weight ", t->desc(),
                 " must be contiguous f32 ", shape_str(want));
    }
  auto sv = std::make_shared<Saved>();
  sv->layout = make_layout(count, num_experts, ep, groups, H, I);
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
    y = forward_plan(sv, contiguous(xs.detach()));
  }
  if (autograd::needs_grad(inputs)) {
    std::vector<bool> need;
    for (const Tensor& t : inputs) need.push_back(t.requires_grad());
    autograd::record("MegaMoE", inputs, {y}, [sv, need](const std::vector<Tensor>& g) {
      autograd::NoGradGuard ng;
      std::vector<Tensor> grads = backward_plan(sv, contiguous(g[0]));
      for (size_t i = 0; i < grads.size(); ++i)
        if (!need[i]) grads[i] = Tensor();
      return grads;
    });
  }
  return y;
}

}  // namespace hp::shard
