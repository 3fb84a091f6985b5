// MegaMoE forward and backward plans (megamoe.h).
#include "hp/shard/megamoe.h"

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
#include "hp/multicore/runtime.h"
#include "hp/multicore/trace.h"
#include "hp/mx/expert_gemm.h"
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
  int64_t e_lo = 0, e_hi = 0;  // this rank's local experts [e_lo, e_hi) in the group
  // Known when the plan is built (this rank's own counts):
  std::vector<int64_t> send;     // [n] rows to each rank
  std::vector<int64_t> send_at;  // [n] first row of owner r's block in the send buffer
  std::vector<int64_t> home;     // [n] first row in xs of the rows owner r gets
  int64_t S = 0;                 // Σ send
  // Known once the counts arrived ("layout g", receive_counts):
  std::vector<int64_t> recv;       // [n] rows from each rank
  int64_t R = 0;                   // Σ recv
  std::vector<int64_t> expert_at;  // [experts + 1] row offsets of each expert, regrouped
  // [n · experts]: source s's rows of expert e_lo + j, at s · experts + j: how many, where they
  // are in the receive buffer (source-major, then by expert) and where regrouped (by expert, stable
  // by source: the sequential path's order).
  std::vector<int64_t> block_rows, block_at, regroup_at;
  int64_t experts() const { return e_hi - e_lo; }
};

struct Layout {
  int64_t n = 0, rank = 0, hidden = 0, inter = 0, rows = 0, local = 0;
  std::vector<Group> groups;  // the groups with at least one expert slot
};

// The send side of every group, from this rank's counts alone (no communication).
Layout make_layout(const std::vector<int64_t>& count, int64_t num_experts, int64_t n, int64_t rank,
                   int64_t groups, int64_t hidden, int64_t inter) {
  Layout L;
  L.n = n;
  L.rank = rank;
  L.hidden = hidden;
  L.inter = inter;
  L.local = local_experts(num_experts, n, rank).count;
  const int64_t chunk = (num_experts + n - 1) / n;
  const int64_t slots = (chunk + groups - 1) / groups;
  std::vector<int64_t> offset(size_t(num_experts) + 1, 0);  // [E + 1] rows of xs before expert e
  for (int64_t e = 0; e < num_experts; ++e)
    offset[size_t(e) + 1] = offset[size_t(e)] + count[size_t(e)];
  L.rows = offset.back();
  for (int64_t lo = 0; lo < chunk; lo += slots) {
    const int64_t hi = std::min(chunk, lo + slots);
    Group g;
    g.e_lo = std::min(lo, L.local);
    g.e_hi = std::min(hi, L.local);
    g.send.assign(size_t(n), 0);
    g.send_at.assign(size_t(n), 0);
    g.home.assign(size_t(n), 0);
    for (int64_t r = 0; r < n; ++r) {  // owner r's experts in slots [lo, hi): contiguous in xs
      const ExpertRange own = local_experts(num_experts, n, r);
      const int64_t a = own.first + std::min(lo, own.count),
                    b = own.first + std::min(hi, own.count);
      g.home[size_t(r)] = offset[size_t(a)];
      g.send[size_t(r)] = offset[size_t(b)] - offset[size_t(a)];
      g.send_at[size_t(r)] = g.S;
      g.S += g.send[size_t(r)];
    }
    L.groups.push_back(std::move(g));
  }
  return L;
}

// The receive side of group g from the exchanged counts: by_expert [n · local], source s's rows of
// local expert e at s · local + e (exchange_counts' layout).
void receive_counts(const Layout& L, Group& g, const int64_t* by_expert) {
  const size_t n = size_t(L.n), ne = size_t(g.experts());
  g.recv.assign(n, 0);
  g.block_rows.assign(n * ne, 0);
  g.block_at.assign(n * ne, 0);
  g.regroup_at.assign(n * ne, 0);
  g.R = 0;
  for (size_t s = 0; s < n; ++s)
    for (size_t j = 0; j < ne; ++j) {
      const int64_t c = by_expert[s * size_t(L.local) + size_t(g.e_lo) + j];
      g.block_rows[s * ne + j] = c;
      g.block_at[s * ne + j] = g.R;
      g.recv[s] += c;
      g.R += c;
    }
  g.expert_at.assign(ne + 1, 0);
  for (size_t j = 0, at = 0; j < ne; ++j) {
    for (size_t s = 0; s < n; ++s) {
      g.regroup_at[s * ne + j] = int64_t(at);
      at += size_t(g.block_rows[s * ne + j]);
    }
    g.expert_at[j + 1] = int64_t(at);
  }
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
Shape rows_shape(int64_t rows, int64_t cols) {
  return {std::max<int64_t>(rows, 1), cols};
}

void copy_rows(const float* src, int64_t src_row, float* dst, int64_t dst_row, int64_t rows,
               int64_t cols) {
  std::copy_n(src + src_row * cols, rows * cols, dst + dst_row * cols);
}

// A group's buffers of [R, cols] rows beside the pipeline's own (sized when the counts are known).
struct RowBuffer {
  std::string name;
  int64_t cols = 0;
};

// Group g's buffers the compute sees: x (regrouped [R, H]) in, y ([R, H]) out, and the extra
// [R, cols] row buffers asked for, in that order.
struct GroupBuffers {
  BufferId x, y;
  std::vector<BufferId> rows;
};

// Group g's compute between regroup and unregroup: tasks reading x and writing y, the first
// waiting on `ready`; returns the event the last one triggers.
using Compute = std::function<EventId(Plan&, size_t g, const GroupBuffers& b, EventId ready)>;
// Tasks after group g's return all-to-all is in the comm order (the weight gradients).
using AfterCombine = std::function<void(Plan&, size_t g)>;

// The exchange pipeline over every group (megamoe.h): rows of `in` [A, H] to their owners, through
// `compute`, back into `out` [A, H] at the same rows. `count` (an i64 [E] buffer of this rank's
// rows per expert): the counts are exchanged first, inside the plan, and "layout g" fills group
// g's receive side (receive_counts) and sizes its buffers once they arrived; kNoBuffer: L's receive
// side is known already (the backward), "layout g" only sizes the buffers. Returns every group's
// buffers.
std::vector<GroupBuffers> add_pipeline(Plan& plan, Layout& L, const dist::CommPtr& comm,
                                       BufferId count, BufferId in, BufferId out,
                                       const std::vector<RowBuffer>& extra, const Compute& compute,
                                       const AfterCombine& after) {
  const int64_t H = L.hidden, G = int64_t(L.groups.size());
  struct Ids {
    BufferId send, recv, ysend, back;
    GroupBuffers b;
    EventId routed, laid_out, dispatched, regrouped, unregrouped, combined, placed;
  };
  std::vector<Ids> ids(L.groups.size());
  for (int64_t gi = 0; gi < G; ++gi) {
    const Group& g = L.groups[size_t(gi)];
    const std::string s = suffix(int64_t(gi));
    Ids& d = ids[size_t(gi)];
    d.send = plan.add_buffer("send" + s, rows_of(g.S, H));
    d.recv = plan.add_dynamic_buffer("recv" + s, DType::f32);
    d.b.x = plan.add_dynamic_buffer("x" + s, DType::f32);
    d.b.y = plan.add_dynamic_buffer("y" + s, DType::f32);
    for (const RowBuffer& r : extra)
      d.b.rows.push_back(plan.add_dynamic_buffer(r.name + s, DType::f32));
    d.ysend = plan.add_dynamic_buffer("y send" + s, DType::f32);
    d.back = plan.add_buffer("back" + s, rows_of(g.S, H));
    d.routed = plan.add_event("routed" + s);
    d.laid_out = plan.add_event("laid out" + s);
    d.dispatched = plan.add_event("dispatched" + s);
    d.regrouped = plan.add_event("regrouped" + s);
    d.unregrouped = plan.add_event("unregrouped" + s);
    d.combined = plan.add_event("combined" + s);
    d.placed = plan.add_event("placed" + s);
  }
  Layout* lp = &L;
  // The counts first: this rank's count of every expert to its owner, n · local arrive (block s:
  // source s's counts of this rank's experts). Posted at once; the routes run meanwhile.
  EventId counted = multicore::kNoEvent;
  BufferId received = multicore::kNoBuffer;
  if (count != multicore::kNoBuffer) {
    const int64_t E = plan.buffer(count).numel();
    received = plan.add_buffer("received counts",
                               empty({std::max<int64_t>(L.n * L.local, 1)}, DType::i64));
    counted = plan.add_event("counted");
    const std::vector<int64_t> split = experts_per_rank(E, L.n), mine(size_t(L.n), L.local);
    auto post = [comm, count, split, mine](const TaskContext& ctx) {
      return comm->iall_to_all_v(ctx.buffer(count), split, mine);
    };
    plan.add_comm("counts", {count}, {},
                  {.post = post,
                   .result_into = received,
                   .bytes = (E - L.local) * int64_t(sizeof(int64_t))},
                  {{}, counted});
  }
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
  // layout g: group g's receive side and its [R, ·] buffers (their shapes depend on the counts).
  for (int64_t gi = 0; gi < G; ++gi) {
    const Ids& d = ids[size_t(gi)];
    std::vector<BufferId> sized{d.recv, d.b.x, d.b.y, d.ysend};
    std::vector<int64_t> cols{H, H, H, H};
    for (size_t i = 0; i < extra.size(); ++i) {
      sized.push_back(d.b.rows[i]);
      cols.push_back(extra[i].cols);
    }
    std::vector<BufferId> reads;
    std::vector<multicore::Wait> waits;
    if (received != multicore::kNoBuffer) {
      reads.push_back(received);
      waits.push_back({counted, 1});
    }
    plan.add_vector("layout" + suffix(gi), reads, sized,
                    [lp, gi, received, sized, cols](const TaskContext& ctx) {
                      Group& g = lp->groups[size_t(gi)];
                      if (received != multicore::kNoBuffer)
                        receive_counts(*lp, g, ctx.data<int64_t>(received));
                      for (size_t i = 0; i < sized.size(); ++i)
                        ctx.allocate(sized[i], rows_shape(g.R, cols[i]));
                    },
                    {waits, d.laid_out});
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
        {{{d.routed, 1}, {d.laid_out, 1}}, d.dispatched});
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
  // Source s's rows of each expert between the received order and the regrouped one (one block
  // per source): to_regrouped copies recv → x, else y → y send.
  auto regroup = [lp, H](size_t gi, bool to_regrouped, BufferId from, BufferId to) {
    return [lp, H, gi, to_regrouped, from, to](const TaskContext& ctx, int64_t, int64_t b,
                                               int64_t e) {
      const Group& g = lp->groups[gi];
      const size_t ne = size_t(g.experts());
      for (size_t s = size_t(b); s < size_t(e); ++s)
        for (size_t j = 0; j < ne; ++j) {
          const size_t k = s * ne + j;
          const int64_t src = to_regrouped ? g.block_at[k] : g.regroup_at[k];
          const int64_t dst = to_regrouped ? g.regroup_at[k] : g.block_at[k];
          copy_rows(ctx.data<float>(from), src, ctx.data<float>(to), dst, g.block_rows[k], H);
        }
    };
  };
  if (G > 0) dispatch(0);
  for (int64_t gi = 0; gi < G; ++gi) {
    const Ids& d = ids[size_t(gi)];
    const std::string s = suffix(int64_t(gi));
    if (gi + 1 < G) dispatch(gi + 1);
    plan.add_vector("regroup" + s, {d.recv}, {d.b.x}, L.n, 1,
                    regroup(size_t(gi), true, d.recv, d.b.x), {{{d.dispatched, 1}}, d.regrouped});
    const EventId computed = compute(plan, size_t(gi), d.b, d.regrouped);
    plan.add_vector("unregroup" + s, {d.b.y}, {d.ysend}, L.n, 1,
                    regroup(size_t(gi), false, d.b.y, d.ysend),
                    {{{computed, 1}}, d.unregrouped});
    const BufferId ysend = d.ysend;
    const int64_t rank = L.rank;
    auto post = [comm, ysend, lp, gi](const TaskContext& ctx) {
      const Group& gg = lp->groups[size_t(gi)];
      return comm->iall_to_all_v(narrow(ctx.buffer(ysend), 0, 0, gg.R), gg.recv, gg.send);
    };
    auto bytes = [lp, gi, rank, H](const TaskContext&) {
      const Group& gg = lp->groups[size_t(gi)];
      return (gg.R - gg.recv[size_t(rank)]) * H * 4;
    };
    plan.add_comm("combine" + s, {d.ysend}, {},
                  {.post = post, .result_into = d.back, .bytes_fn = bytes},
                  {{{d.unregrouped, 1}}, d.combined});
    if (after) after(plan, size_t(gi));
    if (gi > 0) place(gi - 1);
  }
  if (G > 0) place(G - 1);
  std::vector<GroupBuffers> out_ids;
  for (const Ids& d : ids) out_ids.push_back(d.b);
  return out_ids;
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
  stats->chrome_trace = options.trace ? multicore::chrome_trace(plan, t, rank) : std::string();
}

// What the backward needs from the forward: the layout (its receive side filled by the forward
// run), the weights and, per group, the regrouped input and the gate / up projections ([R, H],
// [R, I], [R, I]).
struct Saved {
  MegaMoEOptions options;
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
// fusion::swiglu in the sequential path; either way bitwise its counterpart there.

// y [rows, N] = x [rows, K] · w [N, K]ᵀ.
void fprop(const Saved& s, const float* x, const Tensor& w, int32_t rows, int64_t N, int64_t K,
           float* y) {
  const float* wp = w.data<float>();
  if (s.options.mx)
    mx::expert_fprop(x, wp, rows, N, K, *s.options.mx, y);
  else
    kernels::grouped_gemm_f32(true, 1, &rows, N, K, x, K, &wp, K, 0.0f, y, N);
}

// dx [rows, K] (+)= dy [rows, N] · w [N, K]; accumulate: add to dx (the second projection's
// share of the same input's gradient, one rounding as autograd's sum).
void dgrad(const Saved& s, const float* dy, const Tensor& w, int32_t rows, int64_t N, int64_t K,
           float* dx, bool accumulate) {
  const float* wp = w.data<float>();
  if (!s.options.mx) {
    kernels::grouped_gemm_f32(false, 1, &rows, K, N, dy, N, &wp, K, accumulate ? 1.0f : 0.0f, dx,
                              K);
    return;
  }
  if (!accumulate) return mx::expert_dgrad(dy, wp, rows, N, K, *s.options.mx, dx);
  std::vector<float> part(size_t(rows) * size_t(K));
  mx::expert_dgrad(dy, wp, rows, N, K, *s.options.mx, part.data());
  for (size_t i = 0; i < part.size(); ++i) dx[i] += part[i];
}

// dw [N, K] = dyᵀ · x over the expert's rows (zeros when it has none).
void wgrad(const Saved& s, const float* dy, const float* x, int32_t rows, int64_t N, int64_t K,
           const Tensor& dw) {
  float* c = dw.data<float>();
  if (s.options.mx)
    mx::expert_wgrad(dy, x, rows, N, K, *s.options.mx, c);
  else
    kernels::grouped_gemm_wgrad_f32(1, &rows, N, K, dy, N, x, K, 0.0f, &c, K);
}

// Elements [at, at + len) of a group's [R, I] buffers as a flat f32 tensor.
Tensor flat(const TaskContext& ctx, BufferId b, int64_t at, int64_t len) {
  return narrow(reshape(ctx.buffer(b), {-1}), 0, at, len);
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
  const BufferId cnt =
      plan.add_buffer("count", from_data<int64_t>(count, {int64_t(count.size())}));
  const BufferId in = plan.add_buffer("xs", L.rows > 0 ? xs : rows_of(1, H));
  Tensor y = rows_of(L.rows, H);
  const BufferId out = plan.add_buffer("ys", y);
  const Saved* s = sv.get();
  auto compute = [s, H, I](Plan& p, size_t gi, const GroupBuffers& b, EventId ready) {
    const std::string n = suffix(int64_t(gi));
    const BufferId x = b.x, yb = b.y, gt = b.rows[0], up = b.rows[1], act = b.rows[2];
    const EventId e_up = p.add_event("up" + n), e_act = p.add_event("act" + n),
                  e_down = p.add_event("down" + n);
    add_expert_cube(p, "up" + n, {x}, {gt, up}, s, gi, {{{ready, 1}}, e_up},
                    [s, x, gt, up, H, I](const TaskContext& ctx, ExpertRows r) {
                      const float* a = ctx.data<float>(x) + r.r0 * H;
                      fprop(*s, a, s->w.gate[r.e], r.end, I, H, ctx.data<float>(gt) + r.r0 * I);
                      fprop(*s, a, s->w.up[r.e], r.end, I, H, ctx.data<float>(up) + r.r0 * I);
                    });
    add_per_expert(p, multicore::Role::vector, "swiglu" + n, {gt, up}, {act}, s, gi,
                   {{{e_up, 1}}, e_act},
                   [s, gt, up, act, I](const TaskContext& ctx, ExpertRows r) {
                     swiglu(*s, ctx, gt, up, act, r.r0 * I, r.end * I);
                   });
    add_expert_cube(p, "down" + n, {act}, {yb}, s, gi, {{{e_act, 1}}, e_down},
                    [s, act, yb, H, I](const TaskContext& ctx, ExpertRows r) {
                      fprop(*s, ctx.data<float>(act) + r.r0 * I, s->w.down[r.e], r.end, H, I,
                            ctx.data<float>(yb) + r.r0 * H);
                    });
    return e_down;
  };
  const std::vector<GroupBuffers> ids =
      add_pipeline(plan, L, sv->ep, cnt, in, out, {{"gate", I}, {"up", I}, {"act", I}}, compute,
                   nullptr);
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
                      dgrad(*s, ctx.data<float>(dyg) + r.r0 * H, s->w.down[r.e], r.end, H, I,
                            ctx.data<float>(dact) + r.r0 * I, false);
                    });
    add_per_expert(p, multicore::Role::vector, "dswiglu" + n, {gt, up, dact}, {act, dg, du}, s,
                   gi, {{{e_dact, 1}}, e_sw},
                   [s, gt, up, dact, act, dg, du, I](const TaskContext& ctx, ExpertRows r) {
                     swiglu_backward(*s, ctx, {gt, up, dact, act, dg, du}, r.r0 * I, r.end * I);
                   });
    add_expert_cube(
        p, "dx" + n, {dg, du}, {dxg}, s, gi, {{{e_sw, 1}}, e_dx},
        [s, dg, du, dxg, H, I](const TaskContext& ctx, ExpertRows r) {
          float* o = ctx.data<float>(dxg) + r.r0 * H;
          dgrad(*s, ctx.data<float>(dg) + r.r0 * I, s->w.gate[r.e], r.end, I, H, o, false);
          dgrad(*s, ctx.data<float>(du) + r.r0 * I, s->w.up[r.e], r.end, I, H, o, true);
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
                      const float* xr = ctx.data<float>(x) + r.r0 * H;
                      wgrad(*s, ctx.data<float>(d.dg) + r.r0 * I, xr, r.end, I, H, (*gd)[r.e]);
                      wgrad(*s, ctx.data<float>(d.du) + r.r0 * I, xr, r.end, I, H, (*ud)[r.e]);
                      wgrad(*s, ctx.data<float>(d.dy) + r.r0 * H,
                            ctx.data<float>(d.act) + r.r0 * I, r.end, H, I, (*dd)[r.e]);
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
  if (int64_t(count.size()) != num_experts)
    HP_THROW(ValueError, "megamoe", "count has ", count.size(), " entries for ", num_experts,
             " experts");
  sv->layout = make_layout(count, num_experts, ep->size(), ep->rank(), groups, H, I);
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
      std::vector<Tensor> grads = backward_plan(sv, contiguous(g[0]));
      for (size_t i = 0; i < grads.size(); ++i)
        if (!need[i]) grads[i] = Tensor();
      return grads;
    });
  }
  return y;
}

}  // namespace hp::shard
