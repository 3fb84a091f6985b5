// Stencils (fusion/stencils.h): the RMSNorm·w and residual add + RMSNorm·w patterns are matched
// in any operand order and run the hand kernels — bitwise hp::rms_norm (and hp::add) forward and
// backward, in f32 and in the models' bf16 form (cast in, f32 inside, cast out) — while near misses
// stay on the generic passes; a stencil region is within the generic program's ULP bound.
#include "fusion_helpers.h"

namespace hp::fusion {
namespace {

using namespace testing;
using V = std::vector<Var>;

// The models' form (fusion/patterns.cpp): x cast to f32, (x · r) · w, cast back.
Var rms(Var x_in, Var w, double eps) {
  const Var x = cast(x_in, DType::f32);
  return cast((x * rsqrt(mean(x * x) + eps)) * w, x_in.dtype());
}

// Gradients of sum(outputs[k] · r_k) for the inputs, by autograd through f.
std::vector<Tensor> grads(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                          std::vector<Tensor> xs) {
  for (Tensor& x : xs) x = x.detach().clone(), x.requires_grad_();
  const std::vector<Tensor> ys = f(xs);
  Tensor loss = hp::sum(hp::mul(ys[0], randn_t(ys[0].shape(), ys[0].dtype(), 90)));
  for (size_t k = 1; k < ys.size(); ++k)
    loss = hp::add(loss, hp::sum(hp::mul(ys[k], randn_t(ys[k].shape(), ys[k].dtype(), 91 + k))));
  loss.backward();
  std::vector<Tensor> out = ys;
  for (Tensor& x : xs) out.push_back(x.grad());
  return out;
}

TEST(FusionStencils, MatchedInAnyOperandOrder) {
  Graph g;
  Tensor x = randn_t({4, 96}, DType::f32, 1), w = randn_t({96}, DType::f32, 2);
  const std::vector<std::pair<TraceFn, std::string>> forms = {
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + 1e-6) * v[1]}; }, "x r w"},
      {[](const V& v) { return V{v[1] * (rsqrt(1e-6 + mean(square(v[0]))) * v[0])}; }, "w (r x)"},
      {[](const V& v) { return V{rms(v[0], v[1], 1e-5)}; }, "cast form"}};
  for (const auto& [fn, what] : forms) {
    trace(fn, {x, w}, &g);
    const Stencil s = match_stencil(g);
    EXPECT_EQ(s.kind, StencilKind::rms_norm) << what;
    EXPECT_EQ(s.in[0], 0) << what;
    EXPECT_EQ(s.in[1], 1) << what;
  }
  trace([](const V& v) { return V{rms(v[0], v[1], 1e-5)}; }, {x, w}, &g);
  EXPECT_EQ(match_stencil(g).eps, 1e-5f);
  trace([](const V& v) { return V{rms(v[0], v[2], 1e-5)}; }, {x, w, w}, &g);
  EXPECT_EQ(match_stencil(g).in[1], 2);
  trace([](const V& v) { return V{v[0] + v[1], rms(v[0] + v[1], v[2], 1e-5)}; }, {x, x, w}, &g);
  EXPECT_EQ(match_stencil(g).kind, StencilKind::none) << "h traced twice: two add nodes";
  trace(
      [](const V& v) {
        const Var h = v[0] + v[1];
        return V{h, rms(h, v[2], 1e-5)};
      },
      {x, x, w}, &g);
  EXPECT_EQ(match_stencil(g).kind, StencilKind::add_rms_norm);
}

TEST(FusionStencils, NearMissesStayGeneric) {
  Graph g;
  Tensor x = randn_t({4, 96}, DType::f32, 1), w = randn_t({96}, DType::f32, 2);
  Tensor xb = x.to(DType::bf16), wb = w.to(DType::bf16), x3 = randn_t({2, 4, 96}, DType::f32, 3);
  const std::vector<std::tuple<TraceFn, std::vector<Tensor>, std::string>> misses = {
      // sum instead of mean; x·x·r; a negative eps; (x · w) · r; every node in bf16 (rounded
      // after each op, which the hand kernel does not); a [1, 96] weight; a second output.
      {[](const V& v) { return V{v[0] * rsqrt(sum(v[0] * v[0]) + 1e-6) * v[1]}; }, {x, w}, "sum"},
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) - 1e-6) * v[1]}; }, {x, w}, "sub"},
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + -1e-6) * v[1]}; }, {x, w},
       "negative eps"},
      {[](const V& v) { return V{v[0] * v[1] * rsqrt(mean(v[0] * v[0]) + 1e-6)}; }, {x, w},
       "(x w) r"},
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + 1e-6) * v[1]}; }, {xb, wb},
       "all bf16"},
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + 1e-6) * v[1]}; },
       {x, randn_t({1, 96}, DType::f32, 2)}, "[1, n] weight"},
      {[](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + 1e-6) * v[1]}; }, {x, x3},
       "w broadcasts x up"},
      {[](const V& v) {
         const Var r = rsqrt(mean(v[0] * v[0]) + 1e-6);
         return V{r, v[0] * r * v[1]};
       },
       {x, w}, "r is an output"}};
  for (const auto& [fn, xs, what] : misses) {
    trace(fn, xs, &g);
    EXPECT_EQ(match_stencil(g).kind, StencilKind::none) << what;
  }
}

TEST(FusionStencils, RmsNormIsTheHandKernelForwardAndBackward) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = randn_t({37, 301}, dt, 4, 2.0), w = randn_t({301}, dt, 5);
    const Fused f = fuse([](const V& v) { return V{rms(v[0], v[1], 1e-6)}; }, "rms_norm");
    const std::vector<Tensor> got =
        grads([&f](const std::vector<Tensor>& t) { return f(t); }, {x, w});
    const std::vector<Tensor> want = grads(
        [](const std::vector<Tensor>& t) { return std::vector<Tensor>{hp::rms_norm(t[0], t[1])}; },
        {x, w});
    expect_all_bitwise(got, want, "rms_norm stencil " + dname(dt) + " (y, dx, dw)");
    EXPECT_EQ(f.stats().compiles, 1);
    ASSERT_NE(f.plan({x, w}), nullptr);
    EXPECT_EQ(f.plan({x, w})->stencil.kind, StencilKind::rms_norm);
    EXPECT_NE(describe(*f.plan({x, w})).find("stencil rms_norm"), std::string::npos);
  }
}

TEST(FusionStencils, AddRmsNormIsAddThenTheHandKernel) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor a = randn_t({9, 130}, dt, 6), b = randn_t({9, 130}, dt, 7), w = randn_t({130}, dt, 8);
    const Fused f = fuse(
        [](const V& v) {
          const Var h = v[0] + v[1];
          return V{h, rms(h, v[2], 1e-5)};
        },
        "add_rms_norm");
    const std::vector<Tensor> got =
        grads([&f](const std::vector<Tensor>& t) { return f(t); }, {a, b, w});
    const std::vector<Tensor> want = grads(
        [](const std::vector<Tensor>& t) {
          Tensor h = hp::add(t[0], t[1]);
          return std::vector<Tensor>{h, hp::rms_norm(h, t[2], 1e-5)};
        },
        {a, b, w});
    expect_all_bitwise(got, want, "add_rms_norm stencil " + dname(dt) + " (h, y, da, db, dw)");
  }
}

TEST(FusionStencils, WithinTheGenericProgramsBoundAndThreadIndependent) {
  Tensor x = randn_t({64, 1000}, DType::f32, 9, 3.0), w = randn_t({1000}, DType::f32, 10);
  const TraceFn fn = [](const V& v) { return V{v[0] * rsqrt(mean(v[0] * v[0]) + 1e-6) * v[1]}; };
  const Fused stencil = fuse(fn), generic = fuse(fn, "rms_norm", /*patterns=*/false);
  expect_ulp(stencil({x, w})[0], generic({x, w})[0], 6, "stencil vs generic program");
  const int saved = num_threads();
  set_num_threads(1);
  const Tensor one = stencil({x, w})[0];
  set_num_threads(2);
  const Tensor two = stencil({x, w})[0];
  set_num_threads(saved);
  expect_bitwise(one, two, "1 vs 2 threads");
}

}  // namespace
}  // namespace hp::fusion

namespace hp::fusion {
namespace {

using namespace testing;
using V = std::vector<Var>;

TEST(FusionStencils, SoftmaxIsTheHandKernelInBothForms) {
  Graph g;
  Tensor x = randn_t({37, 301}, DType::f32, 11, 3.0);
  const std::vector<std::pair<TraceFn, std::string>> forms = {
      {[](const V& v) {
         const Var e = exp(v[0] - amax(v[0]));
         return V{e / sum(e)};
       },
       "e / sum(e)"},
      {[](const V& v) {
         const Var e = exp(v[0] - amax(v[0]));
         return V{reciprocal(sum(e)) * e};
       },
       "reciprocal(sum(e)) * e"},
      {[](const V& v) {
         const Var x = cast(v[0], DType::f32);
         const Var e = exp(x - amax(x));
         return V{cast(e / sum(e), v[0].dtype())};
       },
       "cast form"}};
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor xd = x.to(dt);
    for (const auto& [fn, what] : forms) {
      trace(fn, {xd}, &g);
      // every node in bf16 (no casts) rounds after each op: not the kernel's arithmetic
      const bool expect = dt == DType::f32 || what == "cast form";
      EXPECT_EQ(match_stencil(g).kind, expect ? StencilKind::softmax : StencilKind::none)
          << what << " " << dname(dt);
      if (!expect) continue;
      const Fused f = fuse(fn, "softmax");
      Tensor a = xd.detach().clone(), b = xd.detach().clone();
      a.requires_grad_(), b.requires_grad_();
      const Tensor ya = f({a})[0], yb = hp::softmax(b, -1);
      expect_bitwise(ya, yb, what + " " + dname(dt) + " y");
      const Tensor r = randn_t(ya.shape(), ya.dtype(), 12);
      hp::sum(hp::mul(ya, r)).backward();
      hp::sum(hp::mul(yb, r)).backward();
      expect_bitwise(a.grad(), b.grad(), what + " " + dname(dt) + " dx");
    }
  }
  // Near misses: the max of another tensor, exp without the shift, a sum over another value.
  Tensor z = randn_t({37, 301}, DType::f32, 13);
  for (const auto& [fn, what] : std::vector<std::pair<TraceFn, std::string>>{
           {[](const V& v) {
              const Var e = exp(v[0] - amax(v[1]));
              return V{e / sum(e)};
            },
            "amax of another input"},
           {[](const V& v) {
              const Var e = exp(v[0]);
              return V{e / sum(e)};
            },
            "no shift"},
           {[](const V& v) {
              const Var e = exp(v[0] - amax(v[0]));
              return V{e / sum(exp(v[1]))};
            },
            "another sum"}}) {
    trace(fn, {x, z}, &g);
    EXPECT_EQ(match_stencil(g).kind, StencilKind::none) << what;
  }
}

}  // namespace
}  // namespace hp::fusion
