// MegaMHC as Multicore tasks (multicore/mhc_tasks.h): a plan of the mix, its backward, the fold and
// its backward gives the autograd ops' outputs and gradients bitwise, run task by task and on a
// runtime with several vector workers (parts run in any order); buffers that do not fit are named.
#include "hp/multicore/mhc_tasks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "hp/autograd/engine.h"
#include "hp/core/random.h"
#include "hp/multicore/runtime.h"
#include "hp/ops/ops.h"

namespace hp::multicore {
namespace {

using multicore::BufferId;
using multicore::Deps;
using multicore::Plan;

void expect_bitwise(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_EQ(want.numel(), got.numel()) << what;
  const Tensor a = want.contiguous(), b = got.contiguous();
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * 4), 0) << what;
}

void check(int64_t n, int64_t d, bool norm) {
  const std::string at =
      "N " + std::to_string(n) + ", D " + std::to_string(d) + (norm ? ", norm" : ", no norm");
  manual_seed(uint64_t(7 + n * 100 + d));
  const int64_t b = 2, t = 13, rows = b * t, k = n * d,
                m = (2 + n) * n;  // 26 rows: a partial block
  MhcSpec spec;
  spec.hc_mult = n;
  spec.sinkhorn_iters = 6;
  Tensor streams = randn({b, t, n, d}).requires_grad_();
  Tensor fn = mul(randn({m, k}), 0.3).requires_grad_();
  Tensor base = mul(randn({m}), 0.5).requires_grad_();
  Tensor scale = from_vector({0.7, 1.3, 2.0}, {3}).requires_grad_();
  Tensor w = norm ? add(mul(randn({d}), 0.3), 1.0).requires_grad_() : Tensor();
  Tensor out = randn({b, t, d}).requires_grad_();
  const Tensor gpost = randn({b, t, n}), gcomb = randn({b, t, n, n}), ginput = randn({b, t, d});
  const Tensor gy = randn({b, t, n, d});

  // The autograd ops: the mix with upstream gradients for its three outputs, the fold on its own.
  const FusedMix mix = fused_mhc_mix(streams, fn, base, scale, w, spec);
  autograd::backward({mix.post, mix.comb, mix.input}, {gpost, gcomb, ginput});
  const Tensor mix_dx = streams.grad().clone();
  Tensor post = mix.post.detach().requires_grad_(), comb = mix.comb.detach().requires_grad_();
  Tensor xs = streams.detach().requires_grad_();
  const Tensor y = fused_mhc_fold(post, comb, out, xs);
  autograd::backward({y}, {gy});

  // The same as one plan.
  Plan plan;
  auto buf = [&](const std::string& name, const Tensor& v, const Shape& shape) {
    return plan.add_buffer(name, reshape(v.detach(), shape).contiguous().clone());
  };
  auto out_buf = [&](const std::string& name, const Shape& shape) {
    return plan.add_buffer(name, full(shape, -1.0));  // poisoned: every element must be written
  };
  MhcMixBuffers mb;
  mb.streams = buf("streams", streams, {rows, k});
  mb.fn = buf("fn", fn, {m, k});
  mb.base = buf("base", base, {m});
  mb.scale = buf("scale", scale, {3});
  if (norm) mb.norm_weight = buf("norm weight", w, {d});
  mb.post = out_buf("post", {rows, n});
  mb.comb = out_buf("comb", {rows, n * n});
  mb.input = out_buf("input", {rows, d});
  const multicore::Wait mixed = add_mhc_mix(plan, "mix", mb, spec, {});
  MhcMixGradBuffers gb;
  gb.dpost = buf("d post", gpost, {rows, n});
  gb.dcomb = buf("d comb", gcomb, {rows, n * n});
  gb.dinput = buf("d input", ginput, {rows, d});
  gb.dstreams = out_buf("mix d streams", {rows, k});
  gb.dfn = out_buf("d fn", {m, k});
  gb.dbase = out_buf("d base", {m});
  gb.dscale = out_buf("d scale", {3});
  if (norm) gb.dnorm_weight = out_buf("d norm weight", {d});
  add_mhc_mix_backward(plan, "mix backward", mb, gb, spec, Deps{{mixed}, multicore::kNoEvent});
  const BufferId o = buf("out", out, {rows, d}), yb = out_buf("y", {rows, k});
  const multicore::Wait folded =
      add_mhc_fold(plan, "fold", mb.post, mb.comb, o, mb.streams, yb, Deps{{mixed}, -1});
  const BufferId dy = buf("d y", gy, {rows, k}), dpost = out_buf("fold d post", {rows, n}),
                 dcomb = out_buf("fold d comb", {rows, n * n}), dout = out_buf("d out", {rows, d}),
                 dxs = out_buf("fold d streams", {rows, k});
  add_mhc_fold_backward(plan, "fold backward", mb.post, mb.comb, o, mb.streams, dy, dpost, dcomb,
                        dout, dxs, Deps{{folded}, -1});

  auto compare = [&](const std::string& how) {
    const std::string w_ = at + ", " + how + ": ";
    expect_bitwise(mix.post, plan.buffer(mb.post), w_ + "post");
    expect_bitwise(mix.comb, plan.buffer(mb.comb), w_ + "comb");
    expect_bitwise(mix.input, plan.buffer(mb.input), w_ + "input");
    expect_bitwise(mix_dx, plan.buffer(gb.dstreams), w_ + "mix d streams");
    expect_bitwise(fn.grad(), plan.buffer(gb.dfn), w_ + "d fn");
    expect_bitwise(base.grad(), plan.buffer(gb.dbase), w_ + "d base");
    expect_bitwise(scale.grad(), plan.buffer(gb.dscale), w_ + "d scale");
    if (norm) expect_bitwise(w.grad(), plan.buffer(gb.dnorm_weight), w_ + "d norm weight");
    expect_bitwise(y, plan.buffer(yb), w_ + "y");
    expect_bitwise(post.grad(), plan.buffer(dpost), w_ + "fold d post");
    expect_bitwise(comb.grad(), plan.buffer(dcomb), w_ + "fold d comb");
    expect_bitwise(out.grad(), plan.buffer(dout), w_ + "d out");
    expect_bitwise(xs.grad(), plan.buffer(dxs), w_ + "fold d streams");
  };
  multicore::run_sequential(plan);
  compare("task by task");
  multicore::RuntimeOptions opt;
  opt.cube_threads = 2;
  opt.vector_threads = 3;
  multicore::Runtime runtime(opt);
  for (int rep = 0; rep < 2; ++rep) {  // a rerun starts from the same buffers' state
    runtime.run(plan);
    compare("runtime run " + std::to_string(rep));
  }
}

TEST(MegaMHCTasks, PlanEqualsTheAutogradOpsBitwise) {
  for (bool norm : {true, false}) {
    check(4, 24, norm);
    check(2, 40, norm);
  }
}

TEST(MegaMHCTasks, BuffersThatDoNotFitAreNamed) {
  Plan plan;
  MhcSpec spec;
  spec.hc_mult = 4;
  MhcMixBuffers mb;
  mb.streams = plan.add_buffer("streams", zeros({6, 32}));
  mb.fn = plan.add_buffer("fn", zeros({24, 32}));
  mb.base = plan.add_buffer("base", zeros({24}));
  mb.scale = plan.add_buffer("scale", zeros({3}));
  mb.post = plan.add_buffer("post", zeros({6, 4}));
  mb.comb = plan.add_buffer("comb", zeros({6, 16}));
  mb.input = plan.add_buffer("input", zeros({6, 7}));  // D is 8
  try {
    add_mhc_mix(plan, "layer 3 mix", mb, spec, {});
    FAIL() << "a misshapen input buffer was accepted";
  } catch (const multicore::PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3 mix: buffer 'input' must be [6, 8] f32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hp::multicore
