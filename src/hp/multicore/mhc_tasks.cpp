// MegaMHC's Multicore tasks (mhc_tasks.h): the row passes of mhc_rows.h as vector tasks, the GEMMs
// as cube tasks, in the blocks and order of the autograd ops in mhc_fused.cpp.
#include "hp/multicore/mhc_tasks.h"

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/norm.h"
#include "hp/ops/mhc_rows.h"

namespace hp::multicore {

namespace {

using multicore::BufferId;
using multicore::Deps;
using multicore::EventId;
using multicore::kNoBuffer;
using multicore::Plan;
using multicore::TaskContext;
using multicore::Wait;

constexpr int64_t kRowBlock = 8;  // rows per vector part (the autograd ops' parallel_for grain)

const float* f32_or_null(const TaskContext& c, BufferId b) {
  return b == kNoBuffer ? nullptr : c.data<float>(b);
}

// Checks a buffer is f32 with `shape`; PlanError naming the task and the buffer otherwise.
void need(const Plan& plan, const std::string& task, BufferId b, const Shape& shape) {
  const Tensor& t = plan.buffer(b);
  if (t.dtype() != DType::f32 || t.shape() != shape || !t.is_contiguous())
    HP_THROW(multicore::PlanError, "multicore", task, ": buffer '", plan.buffer_name(b),
             "' must be ", shape_str(shape), " f32 contiguous, got ", t.desc());
}

// The fold's inputs: streams [R, N·D], post [R, N], comb [R, N·N], out [R, D]. Returns R.
int64_t check_fold(const Plan& plan, const std::string& name, BufferId post, BufferId comb,
                   BufferId out, BufferId streams) {
  const Tensor& s = plan.buffer(streams);
  const int64_t rows = s.size(0), k = s.size(-1), d = plan.buffer(out).size(-1), n = k / d;
  need(plan, name, streams, {rows, n * d});
  need(plan, name, post, {rows, n});
  need(plan, name, comb, {rows, n * n});
  need(plan, name, out, {rows, d});
  return rows;
}

Deps then(const Deps& deps, EventId trigger) {
  Deps d = deps;
  d.trigger = trigger;
  return d;
}

}  // namespace

Wait add_mhc_mix(Plan& plan, const std::string& name, MhcMixBuffers& b, const MhcSpec& spec,
                 const Deps& deps) {
  const Tensor& s = plan.buffer(b.streams);
  const int64_t rows = s.size(0), k = s.size(-1), n = spec.hc_mult, d = k / n, m = (2 + n) * n;
  need(plan, name, b.streams, {rows, n * d});
  need(plan, name, b.fn, {m, k});
  need(plan, name, b.base, {m});
  need(plan, name, b.scale, {3});
  if (b.norm_weight != kNoBuffer) need(plan, name, b.norm_weight, {d});
  need(plan, name, b.post, {rows, n});
  need(plan, name, b.comb, {rows, n * n});
  need(plan, name, b.input, {rows, d});
  b.mixes = plan.add_buffer(name + " mixes", empty({rows, m}));
  b.rstd = plan.add_buffer(name + " rstd", empty({rows, 2}));
  const EventId mixed = plan.add_event(name + " mixed"), done = plan.add_event(name + " done");
  multicore::Gemm g;
  g.a = b.streams, g.b = b.fn, g.c = b.mixes, g.M = rows, g.N = m, g.K = k, g.trans_b = true;
  plan.add_gemm(name + " gemm", g, then(deps, mixed));
  std::vector<BufferId> reads = {b.streams, b.base, b.scale, b.mixes};
  if (b.norm_weight != kNoBuffer) reads.push_back(b.norm_weight);
  const MhcMixBuffers bb = b;
  plan.add_vector(
      name + " rows", reads, {b.mixes, b.rstd, b.post, b.comb, b.input}, rows, kRowBlock,
      [bb, spec](const TaskContext& c, int64_t, int64_t lo, int64_t hi) {
        const mhc_detail::MixRows pass{c.buffer(bb.streams),    c.data<float>(bb.mixes),
                                       c.data<float>(bb.rstd),  c.data<float>(bb.base),
                                       c.data<float>(bb.scale), f32_or_null(c, bb.norm_weight),
                                       c.data<float>(bb.post),  c.data<float>(bb.comb),
                                       c.buffer(bb.input),      spec};
        pass(lo, hi);
      },
      Deps{{{mixed, 1}}, done});
  return {done, 1};
}

Wait add_mhc_mix_backward(Plan& plan, const std::string& name, const MhcMixBuffers& f,
                          const MhcMixGradBuffers& g, const MhcSpec& spec, const Deps& deps) {
  const Tensor& s = plan.buffer(f.streams);
  const int64_t rows = s.size(0), k = s.size(-1), n = spec.hc_mult, d = k / n, m = (2 + n) * n;
  HP_CHECK(f.mixes != kNoBuffer && f.rstd != kNoBuffer, name, ": the mix's forward first");
  need(plan, name, g.dpost, {rows, n});
  need(plan, name, g.dcomb, {rows, n * n});
  need(plan, name, g.dinput, {rows, d});
  need(plan, name, g.dstreams, {rows, k});
  need(plan, name, g.dfn, {m, k});
  need(plan, name, g.dbase, {m});
  need(plan, name, g.dscale, {3});
  const bool has_w = f.norm_weight != kNoBuffer;
  if (has_w != (g.dnorm_weight != kNoBuffer))
    HP_THROW(multicore::PlanError, "multicore", name,
             ": dnorm_weight must be given exactly when the forward has a norm weight");
  if (has_w) need(plan, name, g.dnorm_weight, {d});
  // d mixes times the rms [R, M], d collapse [R, D], and per fixed block of rows the partials of
  // d norm_weight [D], d base [M], d scale [3] (blocks as the autograd op's).
  const int64_t block = kernels::norm_grad_block_rows(rows), nb = num_blocks(rows, block);
  const BufferId dm = plan.add_buffer(name + " dm", empty({rows, m}));
  const BufferId dy = plan.add_buffer(name + " dy", empty({rows, d}));
  const BufferId dw_part = plan.add_buffer(name + " dw partials", empty({nb, d}));
  const BufferId db_part = plan.add_buffer(name + " dbase partials", empty({nb, m}));
  const BufferId ds_part = plan.add_buffer(name + " dscale partials", empty({nb, 3}));
  const EventId passed = plan.add_event(name + " passed"), gx = plan.add_event(name + " dx gemm"),
                done = plan.add_event(name + " done");
  std::vector<BufferId> reads = {f.streams, f.mixes, f.rstd,  f.base,
                                 f.scale,   g.dpost, g.dcomb, g.dinput};
  if (has_w) reads.push_back(f.norm_weight);
  plan.add_vector(
      name + " rows", reads, {dm, dy, dw_part, db_part, ds_part}, rows, block,
      [f, g, spec, dm, dy, dw_part, db_part, ds_part, has_w](const TaskContext& c, int64_t bi,
                                                             int64_t lo, int64_t hi) {
        const mhc_detail::MixGradRows pass{c.buffer(f.streams),
                                           c.data<float>(f.mixes),
                                           c.data<float>(f.rstd),
                                           c.data<float>(f.base),
                                           c.data<float>(f.scale),
                                           f32_or_null(c, f.norm_weight),
                                           c.data<float>(g.dpost),
                                           c.data<float>(g.dcomb),
                                           c.buffer(g.dinput),
                                           c.data<float>(dm),
                                           c.data<float>(dy),
                                           has_w ? c.data<float>(dw_part) : nullptr,
                                           c.data<float>(db_part),
                                           c.data<float>(ds_part),
                                           spec};
        pass(bi, lo, hi);
      },
      then(deps, passed));
  // G [R, K] = dm · fn into dstreams, completed in place by the last row pass; d fn = dmᵀ · x.
  multicore::Gemm gdx;
  gdx.a = dm, gdx.b = f.fn, gdx.c = g.dstreams, gdx.M = rows, gdx.N = k, gdx.K = m;
  plan.add_gemm(name + " dx gemm", gdx, Deps{{{passed, 1}}, gx});
  multicore::Gemm gfn;
  gfn.a = dm, gfn.b = f.streams, gfn.c = g.dfn, gfn.M = m, gfn.N = k, gfn.K = rows;
  gfn.trans_a = true;
  plan.add_gemm(name + " dfn gemm", gfn, Deps{{{passed, 1}}, done});
  plan.add_vector(
      name + " dx rows", {f.streams, f.mixes, f.rstd, f.base, f.scale, dy, g.dstreams},
      {g.dstreams}, rows, kRowBlock,
      [f, g, spec, dy](const TaskContext& c, int64_t, int64_t lo, int64_t hi) {
        const mhc_detail::MixDxRows pass{
            c.buffer(f.streams),       c.data<float>(f.mixes), c.data<float>(f.rstd),
            c.data<float>(f.base),     c.data<float>(f.scale), c.data<float>(dy),
            c.data<float>(g.dstreams), c.buffer(g.dstreams),   spec};
        pass(lo, hi);
      },
      Deps{{{gx, 1}}, done});
  std::vector<BufferId> outs = {g.dbase, g.dscale};
  if (has_w) outs.push_back(g.dnorm_weight);
  plan.add_vector(
      name + " params", {dw_part, db_part, ds_part}, outs,
      [g, nb, d, m, has_w, dw_part, db_part, ds_part](const TaskContext& c) {
        mhc_detail::sum_partials(c.data<float>(db_part), nb, m, c.data<float>(g.dbase));
        mhc_detail::sum_partials(c.data<float>(ds_part), nb, 3, c.data<float>(g.dscale));
        if (has_w)
          mhc_detail::sum_partials(c.data<float>(dw_part), nb, d, c.data<float>(g.dnorm_weight));
      },
      Deps{{{passed, 1}}, done});
  return {done, 3};
}

Wait add_mhc_fold(Plan& plan, const std::string& name, BufferId post, BufferId comb, BufferId out,
                  BufferId streams, BufferId y, const Deps& deps) {
  const int64_t rows = check_fold(plan, name, post, comb, out, streams);
  const int64_t k = plan.buffer(streams).size(-1);
  need(plan, name, y, {rows, k});
  const EventId done = plan.add_event(name + " done");
  plan.add_vector(
      name + " rows", {post, comb, out, streams}, {y}, rows, kRowBlock,
      [=](const TaskContext& c, int64_t, int64_t lo, int64_t hi) {
        const mhc_detail::FoldRows pass{c.data<float>(post), c.data<float>(comb), c.buffer(out),
                                        c.buffer(streams), c.buffer(y)};
        pass(lo, hi);
      },
      then(deps, done));
  return {done, 1};
}

Wait add_mhc_fold_backward(Plan& plan, const std::string& name, BufferId post, BufferId comb,
                           BufferId out, BufferId streams, BufferId dy, BufferId dpost,
                           BufferId dcomb, BufferId dout, BufferId dstreams, const Deps& deps) {
  const int64_t rows = check_fold(plan, name, post, comb, out, streams);
  const int64_t k = plan.buffer(streams).size(-1), d = plan.buffer(out).size(-1), n = k / d;
  need(plan, name, dy, {rows, k});
  need(plan, name, dpost, {rows, n});
  need(plan, name, dcomb, {rows, n * n});
  need(plan, name, dout, {rows, d});
  need(plan, name, dstreams, {rows, k});
  const EventId done = plan.add_event(name + " done");
  plan.add_vector(
      name + " rows", {post, comb, out, streams, dy}, {dpost, dcomb, dout, dstreams}, rows,
      kRowBlock,
      [=](const TaskContext& c, int64_t, int64_t lo, int64_t hi) {
        const mhc_detail::FoldGradRows pass{
            c.data<float>(post),  c.data<float>(comb), c.buffer(out),
            c.buffer(streams),    c.buffer(dy),        c.data<float>(dpost),
            c.data<float>(dcomb), c.buffer(dout),      c.buffer(dstreams)};
        pass(lo, hi);
      },
      then(deps, done));
  return {done, 1};
}

}  // namespace hp::multicore
