// Canonicalization (fusion/simplify.h): each rewrite fires on its pattern (in any association and
// inside longer chains), runs the functor's code, and stays within the ULP bound of the composed
// form over a sweep of every binade of f32 (specials, subnormals, the exp thresholds); near misses
// are not rewritten and stay bitwise the eager ops.
#include "hp/fusion/simplify.h"

#include <cstdint>

#include "expect_close.h"
#include "fusion_helpers.h"
#include "isa_test.h"

namespace hp::fusion {
namespace {

using namespace testing;
using kernels::EwOp;
using V = std::vector<Var>;

constexpr double kK = 0.7978845608028654, kC = 0.044715;

// Every f32 bit pattern 12345 + i·stride (NaNs included), in chunks of 2^24 values, the first
// with the thresholds of the vector math. HP_TEST_ULP_STRIDE=1 makes it exhaustive (the maxima in
// docs/FUSION.md are the every-16th sweep's).
constexpr uint64_t kChunk = uint64_t{1} << 24;
uint64_t sweep_stride() {
  const char* env = std::getenv("HP_TEST_ULP_STRIDE");
  return env ? std::max<uint64_t>(1, std::strtoull(env, nullptr, 10)) : 4099;
}
int64_t sweep_chunks() {
  return static_cast<int64_t>(((uint64_t{1} << 32) / sweep_stride() + kChunk - 1) / kChunk);
}
Tensor sweep(int64_t chunk = 0) {
  const uint64_t stride = sweep_stride();
  std::vector<float> v;
  for (uint64_t j = 0; j < kChunk; ++j) {
    const uint64_t b = 12345 + stride * (static_cast<uint64_t>(chunk) * kChunk + j);
    if (b >= (uint64_t{1} << 32)) break;
    const uint32_t u = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  if (chunk == 0)
    for (float f : {0.0f, -0.0f, 88.72f, 88.73f, -87.3f, -88.5f, -88.72f, -88.73f, -103.9f, -104.5f,
                    9.0f, -9.0f, 1e-7f, -1e-7f, 1e-45f, -1e-45f})
      v.push_back(f);
  return from_data(v, {static_cast<int64_t>(v.size())});
}

// How far got is from want: the largest error in ulps of want, and the largest error beyond
// `ulps` ulps per |x| (the absolute part of the GELU bound). NaN and Inf must match exactly.
struct Err {
  double ulps = 0, per_x = 0;
};
Err error_of(const Tensor& got, const Tensor& want, const Tensor& x, double ulps) {
  const auto g = got.to_vector(), w = want.to_vector(), xv = x.to_vector();
  Err e;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) || std::isnan(g[i]) || std::isinf(w[i]) || std::isinf(g[i])) {
      if (!(std::isnan(w[i]) && std::isnan(g[i])) && g[i] != w[i]) {
        ADD_FAILURE() << "at x = " << xv[i] << ": got " << g[i] << ", want " << w[i];
        return {HUGE_VAL, HUGE_VAL};
      }
      continue;
    }
    const double err = std::fabs(g[i] - w[i]), u = ulp_of(w[i]);
    e.ulps = std::max(e.ulps, err / u);
    if (err > ulps * u)
      e.per_x = std::max(e.per_x, xv[i] != 0 ? (err - ulps * u) / std::fabs(xv[i]) : HUGE_VAL);
  }
  return e;
}

// The composed graph run node by node through the eager kernels (the unfused reference).
Tensor composed_eager(const TraceFn& fn, const Tensor& x) {
  Graph g;
  trace(fn, {x}, &g);
  return run_eager(g, {x})[0];
}

// Rewrites simplify() makes on fn's graph, and the ops left live in the canonical form.
int rewrites_of(const TraceFn& fn, const std::vector<Tensor>& xs,
                std::vector<EwOp>* ops = nullptr) {
  Graph g, s;
  trace(fn, xs, &g);
  const int r = simplify(g, &s);
  const Graph& c = r ? s : g;
  if (ops)
    for (const Node& n : c.nodes)
      if (n.kind == NodeKind::ew) ops->push_back(static_cast<EwOp>(n.op));
  return r;
}

V sigmoid_div(const V& v) {
  return {1.0 / (1.0 + exp(-v[0]))};
}
V sigmoid_recip(const V& v) {
  return {reciprocal(exp(-v[0]) + 1.0)};
}
V silu_div(const V& v) {
  return {v[0] / (1.0 + exp(-v[0]))};
}
V silu_mul(const V& v) {
  return {v[0] * sigmoid(v[0])};
}
V silu_from_primitives(const V& v) {  // y · 1/(1 + exp(-y)): sigmoid, then silu
  return {(1.0 / (1.0 + exp(-v[0]))) * v[0]};
}
V gelu_bench(const V& v) {
  Var a = v[0];
  return {0.5 * a * (1.0 + tanh(kK * (a + kC * a * a * a)))};
}
V gelu_pow(const V& v) {  // HF's NewGELUActivation: torch.pow(x, 3.0)
  Var a = v[0];
  return {0.5 * a * (1.0 + tanh(kK * (a + kC * pow(a, 3.0))))};
}
V gelu_other_assoc(const V& v) {
  Var a = v[0];
  return {a * ((tanh((a + square(a) * a * kC) * kK) + 1.0) * 0.5)};
}

// Each test runs once per ISA, with that ISA active (isa_test.h).
class FusionSimplifyIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(FusionSimplifyIsa);

TEST_P(FusionSimplifyIsa, BitwiseRewritesRunTheFunctor) {
  const Tensor x = sweep();
  for (auto [fn, op, name] : {std::tuple{&sigmoid_div, EwOp::sigmoid, "1/(1+exp(-x))"},
                              std::tuple{&sigmoid_recip, EwOp::sigmoid, "reciprocal(exp(-x)+1)"},
                              std::tuple{&silu_div, EwOp::silu, "x/(1+exp(-x))"}}) {
    SCOPED_TRACE(name);
    std::vector<EwOp> ops;
    EXPECT_EQ(rewrites_of(fn, {x}, &ops), 1);
    EXPECT_EQ(ops, std::vector<EwOp>{op});
    const Tensor y = fuse(fn)({x})[0];
    // The functor is the composed expression itself: bitwise the eager composed ops, too.
    expect_bitwise(y, kernels::elementwise(op, x), "vs the functor");
    expect_bitwise(y, composed_eager(fn, x), "vs the composed ops");
  }
}

TEST_P(FusionSimplifyIsa, SiluAndGeluWithinTheComposedBounds) {
  const Isa isa = GetParam();
  Err worst[5];
  const TraceFn fns[5] = {&silu_mul, &silu_from_primitives, &gelu_bench, &gelu_other_assoc,
                          &gelu_pow};
  for (int64_t chunk = 0; chunk < sweep_chunks(); ++chunk) {
    const Tensor x = sweep(chunk);
    for (int k = 0; k < 5; ++k) {
      SCOPED_TRACE(k);
      const bool silu = k < 2;
      const Tensor y = fuse(fns[k])({x})[0];
      if (chunk == 0) {
        std::vector<EwOp> ops;
        EXPECT_GE(rewrites_of(fns[k], {x}, &ops), 1);
        EXPECT_EQ(ops, std::vector<EwOp>{silu ? EwOp::silu : EwOp::gelu_tanh});
        expect_bitwise(y, silu ? hp::silu(x) : hp::gelu(x, "tanh"), "runs the functor");
      }
      // The bounds tests/fusion holds the composed forms to against the hand kernels: 5 ulp;
      // 8 ulp + 5e-7·|x| (1 + tanh(u) cancels for u << 0, tanh's error times 0.5|x|).
      const Err e = error_of(y, composed_eager(fns[k], x), x, silu ? 5 : 8);
      worst[k].ulps = std::max(worst[k].ulps, e.ulps);
      worst[k].per_x = std::max(worst[k].per_x, e.per_x);
      if (silu)
        EXPECT_LE(e.ulps, 5);
      else
        EXPECT_LE(e.per_x, 5e-7);
    }
  }
  std::printf(
      "[ %s ] %llu values: silu vs x*sigmoid(x) %.2f / %.2f ulp; gelu_tanh vs composed "
      "%.3g / %.3g / %.3g (pow) ulp, beyond 8 ulp %.3g / %.3g / %.3g per |x|\n",
      kernels::isa_name(isa), static_cast<unsigned long long>((uint64_t{1} << 32) / sweep_stride()),
      worst[0].ulps, worst[1].ulps, worst[2].ulps, worst[3].ulps, worst[4].ulps, worst[2].per_x,
      worst[3].per_x, worst[4].per_x);
}

TEST(FusionSimplify, FiresInsideLongerChainsAndVariants) {
  const Tensor x = randn_t({4097}, DType::f32, 3, 4.0), u = randn_t({4097}, DType::f32, 4);
  // quick-GELU from primitives: the sigmoid rewrite fires (x·sigmoid(1.702x) is no silu).
  auto quick = [](const V& v) { return V{v[0] * (1.0 / (1.0 + exp(-(1.702 * v[0]))))}; };
  std::vector<EwOp> ops;
  EXPECT_EQ(rewrites_of(quick, {x}, &ops), 1);
  EXPECT_EQ(ops, (std::vector<EwOp>{EwOp::mul, EwOp::sigmoid, EwOp::mul}));
  expect_bitwise(fuse(quick)({x})[0], hp::mul(x, hp::sigmoid(hp::mul(x, hp::full({}, 1.702)))),
                 "quick-GELU");
  // SwiGLU written out, and an activation inside a longer chain.
  auto swiglu = [](const V& v) { return V{v[0] * sigmoid(v[0]) * v[1]}; };
  Graph g, s;
  trace(swiglu, {x, u}, &g);
  ASSERT_EQ(simplify(g, &s), 1);
  ASSERT_EQ(s.nodes.size(), 4u);  // x, u, silu(x), · u
  EXPECT_EQ(static_cast<EwOp>(s.nodes[2].op), EwOp::silu);
  expect_bitwise(fuse(swiglu)({x, u})[0], hp::mul(hp::silu(x), u), "swiglu");
  auto longer = [](const V& v) {
    Var g = gelu_bench({v[0] * 2.0})[0];
    return V{exp(-(g * sigmoid(g))) + v[1]};
  };
  ops.clear();
  EXPECT_EQ(rewrites_of(longer, {x, u}, &ops), 2);
  EXPECT_EQ(ops, (std::vector<EwOp>{EwOp::mul, EwOp::gelu_tanh, EwOp::silu, EwOp::neg, EwOp::exp,
                                    EwOp::add}));
  // Outputs keep their order and the inputs their numbers, whatever was dropped.
  auto two = [](const V& v) { return V{v[1] + 1.0, v[0] / (1.0 + exp(-v[0]))}; };
  const auto ys = fuse(two)({x, u});
  expect_bitwise(ys[0], hp::add(u, hp::full({}, 1.0)), "first output");
  expect_bitwise(ys[1], hp::silu(x), "second output");
}

TEST(FusionSimplify, NearMissesAreNotRewritten) {
  const Tensor x = randn_t({8, 129}, DType::f32, 5, 3.0), z = randn_t({8, 129}, DType::f32, 6);
  const std::vector<std::pair<const char*, TraceFn>> misses = {
      {"x·sigmoid(z)", [](const V& v) { return V{v[0] * sigmoid(v[1])}; }},
      {"1/(2+exp(-x))", [](const V& v) { return V{1.0 / (2.0 + exp(-v[0]))}; }},
      {"1/(1+exp(x))", [](const V& v) { return V{1.0 / (1.0 + exp(v[0]))}; }},
      {"z/(1+exp(-x))", [](const V& v) { return V{v[1] / (1.0 + exp(-v[0]))}; }},
      {"x·sigmoid(x) with sigmoid also an output",
       [](const V& v) {
         Var s = sigmoid(v[0]);
         return V{v[0] * s, s};
       }},
      {"sigmoid whose exp(-x) is read elsewhere",
       [](const V& v) {
         Var e = exp(-v[0]);
         return V{1.0 / (1.0 + e) + e};
       }},
      {"gelu with c = 0.0447",
       [](const V& v) {
         Var a = v[0];
         return V{0.5 * a * (1.0 + tanh(kK * (a + 0.0447 * a * a * a)))};
       }},
      {"gelu with scale 0.25",
       [](const V& v) {
         Var a = v[0];
         return V{0.25 * a * (1.0 + tanh(kK * (a + kC * a * a * a)))};
       }},
      {"gelu whose polynomial is of z",
       [](const V& v) {
         Var a = v[0], b = v[1];
         return V{0.5 * a * (1.0 + tanh(kK * (b + kC * b * b * b)))};
       }},
      {"gelu with x^2 only",
       [](const V& v) {
         Var a = v[0];
         return V{0.5 * a * (1.0 + tanh(kK * (a + kC * a * a)))};
       }},
      {"gelu with pow(x, 2.5)",
       [](const V& v) {
         Var a = v[0];
         return V{0.5 * a * (1.0 + tanh(kK * (a + kC * pow(a, 2.5))))};
       }},
      // Not rewritten by design (simplify.h): beyond any ULP bound of the composed form.
      {"tanh from exps",
       [](const V& v) {
         Var a = v[0];
         return V{(exp(a) - exp(-a)) / (exp(a) + exp(-a))};
       }},
      {"exp(x)/(1+exp(x))",
       [](const V& v) {
         Var e = exp(v[0]);
         return V{e / (1.0 + e)};
       }},
  };
  for (const auto& [name, fn] : misses) {
    SCOPED_TRACE(name);
    EXPECT_EQ(rewrites_of(fn, {x, z}), 0) << name;
    Graph g;
    trace(fn, {x, z}, &g);
    Graph s;
    EXPECT_EQ(simplify(g, &s), 0);
    expect_all_bitwise(fuse(fn)({x, z}), run_eager(g, {x, z}), name);
  }
  // bf16 graphs: each composed node rounds to bf16, the functor once.
  const Tensor xb = x.to(DType::bf16);
  EXPECT_EQ(rewrites_of(silu_mul, {xb}), 0);
  EXPECT_EQ(rewrites_of(sigmoid_div, {xb}), 0);
  EXPECT_EQ(rewrites_of(gelu_bench, {xb}), 0);
  expect_bitwise(fuse(silu_mul)({xb})[0], composed_eager(silu_mul, xb), "bf16 x·sigmoid(x)");
}

TEST(FusionSimplify, BackwardThroughTheFunctorAndThreadIndependent) {
  const int saved = num_threads();
  const Tensor x0 = randn_t({129, 301}, DType::f32, 7, 3.0);
  for (auto [fn, ref] : {std::pair<TraceFn, std::function<Tensor(const Tensor&)>>{
                             &silu_mul, [](const Tensor& t) { return hp::mul(t, hp::sigmoid(t)); }},
                         std::pair<TraceFn, std::function<Tensor(const Tensor&)>>{
                             &gelu_bench, [](const Tensor& t) { return hp::gelu(t, "tanh"); }}}) {
    std::vector<Tensor> gs, ys;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor x = x0.detach().clone();
      x.requires_grad_();
      Tensor y = fuse(fn)({x})[0];
      ys.push_back(y.detach());
      hp::sum(hp::mul(y, randn_t(y.shape(), y.dtype(), 99))).backward();
      gs.push_back(x.grad());
    }
    expect_bitwise(ys[0], ys[1], "forward, 1 vs 2 threads");
    expect_bitwise(gs[0], gs[1], "backward, 1 vs 2 threads");
    Tensor x = x0.detach().clone();
    x.requires_grad_();
    Tensor y = ref(x);
    hp::sum(hp::mul(y, randn_t(y.shape(), y.dtype(), 99))).backward();
    hp::testing::expect_close(gs[0], x.grad(), 1e-5, "dx vs eager autograd");
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace hp::fusion
