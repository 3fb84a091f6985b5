#include "hp/multicore/pipeline.h"

#include <algorithm>
#include <string>

namespace hp::multicore {

double AllToAllGemm::gemm_flops() const {
  double f = 0;
  for (TaskId t = 0; t < plan.num_tasks(); ++t)
    if (plan.task(t).role == Role::cube) {
      const Gemm& g = plan.task(t).gemm;
      f += 2.0 * double(g.M) * double(g.N) * double(g.K);
    }
  return f;
}

AllToAllGemm all_to_all_gemm(const dist::CommPtr& comm, const Tensor& x, const Tensor& w,
                             int64_t chunks, int64_t lookahead) {
  if (x.dim() != 2 || w.dim() != 2 || x.size(1) != w.size(0) || x.dtype() != DType::f32 ||
      w.dtype() != DType::f32 || chunks < 1 || x.size(0) % chunks != 0 ||
      (x.size(0) / chunks) % comm->size() != 0)
    HP_THROW(ValueError, "multicore", "all_to_all_gemm needs f32 x [chunks·rows, K] and w [K, N] ",
             "with rows divisible by ", comm->size(), " ranks; got x ", x.desc(), ", w ", w.desc(),
             ", chunks ", chunks);
  const int64_t K = w.size(0), N = w.size(1), rows = x.size(0) / chunks;
  // Bytes an all-to-all of [rows, cols] f32 sends to other ranks (the link model's input).
  const int64_t size = comm->size();
  auto leaving = [&](int64_t cols) { return rows / size * (size - 1) * cols * 4; };
  AllToAllGemm p;
  p.chunks = chunks;
  p.rows = rows;
  Plan& plan = p.plan;
  p.x = plan.add_buffer("x", x.contiguous());
  p.w = plan.add_buffer("w", w.contiguous());
  p.out = plan.add_buffer("out", empty({chunks * rows, N}));
  p.combined = plan.add_event("combined");
  // Per chunk: views x_c [rows, K] of x and out_c [rows, N] of out, recv_c [rows, K], y_c [rows,
  // N], and its two events.
  std::vector<BufferId> xs, recv, y, outs;
  std::vector<EventId> dispatched, computed;
  for (int64_t c = 0; c < chunks; ++c) {
    const std::string s = std::to_string(c);
    xs.push_back(plan.add_view("x " + s, p.x, {rows, K}, c * rows * K));
    recv.push_back(plan.add_buffer("recv " + s, empty({rows, K})));
    y.push_back(plan.add_buffer("y " + s, empty({rows, N})));
    outs.push_back(plan.add_view("out " + s, p.out, {rows, N}, c * rows * N));
    dispatched.push_back(plan.add_event("dispatched " + s));
    computed.push_back(plan.add_event("computed " + s));
  }
  auto dispatch = [&](int64_t c) {
    const BufferId xc = xs[size_t(c)];
    auto post = [comm, xc](const TaskContext& ctx) { return comm->iall_to_all(ctx.buffer(xc)); };
    plan.add_comm("dispatch " + std::to_string(c), {xc}, {},
                  {.post = post, .result_into = recv[size_t(c)], .bytes = leaving(K)},
                  {{}, dispatched[size_t(c)]});
  };
  // The comm worker posts in plan order: chunks [c+1, c+lookahead] are dispatched before chunk c's
  // combine (which waits for its GEMM), so the next chunks' inputs travel while c computes.
  const int64_t ahead = std::clamp<int64_t>(lookahead, 0, chunks - 1);
  for (int64_t c = 0; c <= ahead; ++c) dispatch(c);
  for (int64_t c = 0; c < chunks; ++c) {
    const std::string s = std::to_string(c);
    if (c > 0 && c + ahead < chunks) dispatch(c + ahead);
    const size_t i = size_t(c);
    plan.add_gemm("gemm " + s, {.a = recv[i], .b = p.w, .c = y[i], .M = rows, .N = N, .K = K},
                  {{{dispatched[i], 1}}, computed[i]});
    const BufferId yb = y[i];
    auto post = [comm, yb](const TaskContext& ctx) { return comm->iall_to_all(ctx.buffer(yb)); };
    plan.add_comm("combine " + s, {yb}, {},
                  {.post = post, .result_into = outs[i], .bytes = leaving(N)},
                  {{{computed[i], 1}}, p.combined});
  }
  return p;
}

}  // namespace hp::multicore
