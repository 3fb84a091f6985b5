// Backward of fused regions (vjp.h): the vjp graph checked against f64 finite differences (f64
// regions run eagerly, through the same graph), the fused f32 backward against the same graph run
// eagerly (bitwise) and against hp autograd through the eager ops (within tolerance).
#include "../ops/gradcheck.h"
#include "expect_close.h"
#include "fusion_helpers.h"
#include "isa_test.h"

namespace hp::fusion {
namespace {

using namespace testing;
using V = std::vector<Var>;

V rms_norm_fn(const V& v) {
  Var x = v[0];
  return {x * rsqrt(mean(x * x) + 1e-6) * v[1]};
}

V softmax_fn(const V& v) {
  Var e = exp(v[0] - amax(v[0]));
  return {e / sum(e)};
}

// Everything with a rule: unary ops, binaries with row/col/scalar broadcasts, select, casts, max.
V mixed_fn(const V& v) {
  Var x = v[0], w = v[1], c = v[2];
  Var y = sigmoid(x) * w + tanh(x * c) - exp(x * 0.3) / (abs(x) + 1.0);
  y = maximum(y, x * 0.5) + minimum(sqrt(x * x + 1.0), c) + where(gt(x, c), silu(x), gelu_tanh(x));
  y = y + pow(square(x) + 1.0, 1.5) + log(reciprocal(x * x + 2.0)) + clamp(x, -0.5, 0.7) +
      relu(w - x);
  return {y * rsqrt(sum(y * y) + 1.0), mean(gelu(x) * w)};
}

hp::testing::Fn through(const Fused& f) {
  return [f](const std::vector<Tensor>& xs) {
    const std::vector<Tensor> outs = f(xs);
    Tensor total = outs[0];
    for (size_t k = 1; k < outs.size(); ++k) total = hp::add(hp::sum(total), hp::sum(outs[k]));
    return total;
  };
}

TEST(FusedBackward, GradcheckF64) {
  LogCapture log;  // f64 regions log their (expected) eager fallback
  // f64 is not fused: the forward and the vjp graph run node by node, exactly.
  const Fused rn = fuse(rms_norm_fn), sm = fuse(softmax_fn), mx = fuse(mixed_fn);
  hp::testing::expect_gradcheck(through(rn),
                                {hp::testing::leaf({3, 7}, 1), hp::testing::leaf({7}, 2)});
  hp::testing::expect_gradcheck(through(sm), {hp::testing::leaf({4, 6}, 3)});
  hp::testing::expect_gradcheck(
      through(mx),
      {hp::testing::leaf({3, 5}, 4), hp::testing::leaf({5}, 5), hp::testing::leaf({3, 1}, 6)}, 1e-6,
      1e-5, 1e-4);
}

// Gradients of sum(f(xs) · r) via fused backward, for f32 inputs.
std::vector<Tensor> grads_of(const Fused& f, std::vector<Tensor> xs) {
  for (Tensor& x : xs) x = x.detach().clone(), x.requires_grad_();
  std::vector<Tensor> outs = f(xs);
  Tensor loss = hp::sum(hp::mul(outs[0], randn_t(outs[0].shape(), outs[0].dtype(), 99)));
  for (size_t k = 1; k < outs.size(); ++k) loss = hp::add(loss, hp::sum(outs[k]));
  loss.backward();
  std::vector<Tensor> g;
  for (Tensor& x : xs) g.push_back(x.grad());
  return g;
}

// Each test runs once per ISA, with that ISA active (isa_test.h).
class FusedBackwardIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(FusedBackwardIsa);

TEST_P(FusedBackwardIsa, FusedEqualsEagerVjpBitwise) {
  Tensor x = randn_t({37, 301}, DType::f32, 7), w = randn_t({301}, DType::f32, 8);
  Tensor c = randn_t({37, 1}, DType::f32, 9);
  for (auto [fn, xs, name] : std::vector<std::tuple<TraceFn, std::vector<Tensor>, std::string>>{
           {rms_norm_fn, {x, w}, "rms_norm"},
           {softmax_fn, {x}, "softmax"},
           {mixed_fn, {x, w, c}, "mixed"}}) {
    const Fused f = fuse(fn, name, /*patterns=*/false);  // the engine's own vjp program
    // The reference: the same vjp graph, every node through its eager kernel.
    std::vector<uint8_t> need(xs.size(), 1);
    Graph g, b;
    trace(fn, xs, &g);
    std::vector<int> grad_of;
    std::string why;
    ASSERT_TRUE(build_vjp(g, need, &b, &grad_of, &why)) << why;
    ASSERT_NE(compile(b, &why), nullptr) << name << ": the backward should fuse: " << why;
    const std::vector<Tensor> fused = grads_of(f, xs);
    std::vector<Tensor> args = xs;
    manual_seed(0);
    const std::vector<Tensor> outs = f(xs);
    args.push_back(randn_t(outs[0].shape(), outs[0].dtype(), 99));
    for (size_t k = 1; k < outs.size(); ++k) args.push_back(ones(outs[k].shape(), outs[k].dtype()));
    const std::vector<Tensor> eager = run_eager(b, args);
    for (size_t i = 0; i < xs.size(); ++i) {
      Tensor e = eager[static_cast<size_t>(grad_of[i])];
      const Shape full = kernels::broadcast_shapes(e.shape(), xs[i].shape(), "test");
      e = hp::sum_to(hp::expand(e, full), xs[i].shape());
      expect_bitwise(fused[i], e, name + " grad " + std::to_string(i));
    }
  }
}

TEST(FusedBackward, MatchesHpAutograd) {
  Tensor x = randn_t({64, 257}, DType::f32, 10), w = randn_t({257}, DType::f32, 11);
  // The engine's vjp programs (stencils off: with them these are the hand kernels themselves).
  auto rn = grads_of(fuse(rms_norm_fn, "rms_norm", false), {x, w});
  auto sm = grads_of(fuse(softmax_fn, "softmax", false), {x});
  auto si = grads_of(fuse([](const V& v) { return V{v[0] * sigmoid(v[0])}; }), {x});
  auto ref = [](const std::function<Tensor(const std::vector<Tensor>&)>& f,
                std::vector<Tensor> xs) {
    for (Tensor& t : xs) t = t.detach().clone(), t.requires_grad_();
    Tensor y = f(xs);
    hp::sum(hp::mul(y, randn_t(y.shape(), y.dtype(), 99))).backward();
    std::vector<Tensor> g;
    for (Tensor& t : xs) g.push_back(t.grad());
    return g;
  };
  auto rn_ref =
      ref([](const std::vector<Tensor>& t) { return hp::rms_norm(t[0], t[1], 1e-6); }, {x, w});
  auto sm_ref = ref([](const std::vector<Tensor>& t) { return hp::softmax(t[0], -1); }, {x});
  auto si_ref = ref([](const std::vector<Tensor>& t) { return hp::silu(t[0]); }, {x});
  hp::testing::expect_close(rn[0], rn_ref[0], 1e-5, "rms_norm dx");
  hp::testing::expect_close(rn[1], rn_ref[1], 1e-5, "rms_norm dw");
  hp::testing::expect_close(sm[0], sm_ref[0], 1e-5, "softmax dx");
  hp::testing::expect_close(si[0], si_ref[0], 1e-6, "x·sigmoid(x) dx vs silu");
}

TEST(FusedBackward, SavesOnlyInputsAndThreadIndependent) {
  const int saved = num_threads();
  Tensor x = randn_t({129, 3001}, DType::f32, 12), w = randn_t({3001}, DType::f32, 13);
  const Fused f = fuse(rms_norm_fn, "rms_norm", /*patterns=*/false);
  set_num_threads(1);
  auto a = grads_of(f, {x, w});
  set_num_threads(2);
  auto b = grads_of(f, {x, w});
  set_num_threads(saved);
  expect_bitwise(b[0], a[0], "dx 1 vs 2 threads");
  expect_bitwise(b[1], a[1], "dw 1 vs 2 threads");
}

}  // namespace
}  // namespace hp::fusion

namespace hp::fusion {
namespace {

TEST(FusedBackward, RmsNormVjpProgram) {
  Tensor x = testing::randn_t({64, 1024}, DType::f32, 1),
         w = testing::randn_t({1024}, DType::f32, 2);
  Graph g, b;
  trace(rms_norm_fn, {x, w}, &g);
  std::vector<int> grad_of;
  std::string why;
  ASSERT_TRUE(build_vjp(g, {1, 1}, &b, &grad_of, &why)) << why;
  auto p = compile(b, &why);
  ASSERT_NE(p, nullptr) << why;
  std::printf("%s", describe(*p).c_str());
  // Σx² | x·r (recomputed) and the adjoints: the backward reads x, w, g and writes dx, dw rows.
  EXPECT_LE(p->stages.size(), 3u);
}

}  // namespace
}  // namespace hp::fusion

namespace hp::fusion {
namespace {

TEST_P(FusedBackwardIsa, SumRows) {
  using V = std::vector<Var>;
  const int saved = num_threads();
  for (DType dt : {DType::f32, DType::bf16}) {
    // Many blocks of rows: partial sums per block, added in block order.
    Tensor x = testing::randn_t({2, 1500, 300}, dt, 31), w = testing::randn_t({300}, dt, 32);
    Fused f = fuse([](const V& v) { return V{sum_rows(v[0] * v[1]), v[0] + 1.0}; });
    auto p = f.plan({x, w});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->num_row_sums, 1);
    std::vector<Tensor> got = f({x, w});
    ASSERT_EQ(got[0].shape(), (Shape{1, 1, 300}));
    Graph g;
    trace([](const V& v) { return V{sum_rows(v[0] * v[1]), v[0] + 1.0}; }, {x, w}, &g);
    std::vector<Tensor> want = run_eager(g, {x, w});
    // Another association of the same sum: within rounding (f32 accumulation; bf16 rounds once).
    hp::testing::expect_close(got[0], want[0], dt == DType::f32 ? 1e-5 : 1e-2, "sum_rows");
    testing::expect_bitwise(got[1], want[1], "beside sum_rows");
    set_num_threads(1);
    Tensor one = f({x, w})[0];
    set_num_threads(2);
    testing::expect_bitwise(f({x, w})[0], one, "sum_rows 1 vs 2 threads");
  }
  set_num_threads(saved);
  // Read by another op: not fused, runs eagerly.
  testing::LogCapture log;
  Fused h = fuse([](const V& v) { return V{exp(sum_rows(v[0]))}; }, "reads_row_sum");
  Tensor x = testing::randn_t({4, 8}, DType::f32, 33);
  testing::expect_bitwise(h({x})[0], hp::exp(hp::sum(x, {0}, true)), "eager");
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("sum_rows feeds exp"), std::string::npos) << log.lines[0];
}

}  // namespace
}  // namespace hp::fusion
