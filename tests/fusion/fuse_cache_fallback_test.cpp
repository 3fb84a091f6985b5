// fuse(): caching by signature and structure, eager fallback with one log line, input errors, and
// the shape of compiled programs (steps, slots, passes).
#include "error_of.h"
#include "fusion_helpers.h"
#include "isa_test.h"

namespace hp::fusion {
namespace {

using namespace testing;
using V = std::vector<Var>;

TEST(FuseCache, SecondCallHitsTheCache) {
  LogCapture log;
  Fused f = fuse([](const V& v) { return V{v[0] * sigmoid(v[0])}; }, "swish");
  Tensor x = randn_t({8, 100}, DType::f32, 1);
  Tensor y1 = f({x})[0];
  auto p1 = f.plan({x});
  Tensor y2 = f({x})[0];
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().hits, 2);  // plan() and the second call
  EXPECT_EQ(f.plan({x}), p1);    // the same program object
  expect_bitwise(y2, y1, "second call");
  // A new shape is a new signature: compiled once more.
  f({randn_t({3, 5}, DType::f32, 2)});
  EXPECT_EQ(f.stats().compiles, 2);
  f({randn_t({8, 100}, DType::bf16, 2)});
  EXPECT_EQ(f.stats().compiles, 3);
  EXPECT_TRUE(log.lines.empty());
}

// The cache keeps kFusedCacheEntries signatures and drops the least recently used one: a run
// whose shapes keep changing does not grow it without bound, and a dropped shape compiles again.
TEST(FuseCache, BoundedLeastRecentlyUsed) {
  Fused f = fuse([](const V& v) { return V{v[0] * sigmoid(v[0])}; }, "swish");
  const auto shape_of = [](int64_t i) { return Shape{i + 1, 3}; };
  const int64_t cap = static_cast<int64_t>(kFusedCacheEntries);
  const Tensor x = randn_t(shape_of(1), DType::f32, 4);
  Tensor y_before;
  for (int64_t i = 0; i < cap; ++i) {
    if (i == 1)
      y_before = f({x})[0];
    else
      f({randn_t(shape_of(i), DType::f32, 1)});
  }
  EXPECT_EQ(f.stats().entries, cap);
  EXPECT_EQ(f.stats().evictions, 0);
  f({randn_t(shape_of(0), DType::f32, 1)});    // touch shape 0: shape 1 is now the oldest
  f({randn_t(shape_of(cap), DType::f32, 1)});  // a new one: evicts shape 1
  EXPECT_EQ(f.stats().entries, cap);
  EXPECT_EQ(f.stats().evictions, 1);
  EXPECT_EQ(f.stats().compiles, cap + 1);
  f({randn_t(shape_of(0), DType::f32, 1)});  // still cached
  EXPECT_EQ(f.stats().compiles, cap + 1);
  const Tensor y = f({x})[0];  // evicted: compiled again, and still right
  EXPECT_EQ(f.stats().compiles, cap + 2);
  expect_bitwise(y, y_before, "recompiled after eviction");
}

TEST(FuseCache, ProgramShape) {
  Tensor x = randn_t({8, 100}, DType::f32, 3);
  // x · sigmoid(x): one chain (sigmoid, then · x in registers) written straight to the output.
  auto p = fuse([](const V& v) { return V{v[0] * sigmoid(v[0])}; }).plan({x});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->num_steps, 1);
  EXPECT_EQ(p->num_slots, 0);
  EXPECT_EQ(p->num_keeps, 0);
  EXPECT_EQ(p->M, 1);  // no broadcasts or reductions: flattened
  EXPECT_EQ(p->N, 800);
  // Literals fold: exp(1) * 2 is one scalar operand.
  auto q = fuse([](const V& v) { return V{v[0] * (exp(v[0] * 0.0 + 1.0) * 0.0 + 2.0)}; }).plan({x});
  ASSERT_NE(q, nullptr);
  EXPECT_GE(q->num_steps, 1);
}

TEST(FuseFallback, StructureChangeRunsEagerWithOneLogLine) {
  LogCapture log;
  bool use_tanh = false;
  Fused f =
      fuse([&use_tanh](const V& v) { return V{use_tanh ? tanh(v[0]) : sigmoid(v[0])}; }, "flip");
  Tensor x = randn_t({4, 64}, DType::f32, 4);
  expect_bitwise(f({x})[0], hp::sigmoid(x), "first structure");
  use_tanh = true;
  expect_bitwise(f({x})[0], hp::tanh(x), "changed structure, same shapes");
  expect_bitwise(f({x})[0], hp::tanh(x), "changed structure again");
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("[fusion] flip: graph structure changed"), std::string::npos)
      << log.lines[0];
  EXPECT_EQ(f.stats().eager, 2);
  use_tanh = false;
  expect_bitwise(f({x})[0], hp::sigmoid(x), "back to the compiled structure");
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(FuseFallback, UnknownOpRunsEagerWithOneLogLine) {
  LogCapture log;
  Fused f = fuse(
      [](const V& v) {
        Var m = opaque(
            "softplus_eager",
            [](const std::vector<Tensor>& t) { return hp::log(hp::add(hp::exp(t[0]), 1.0)); },
            {v[0]});
        return V{m * 2.0 + v[1]};
      },
      "with_opaque");
  Tensor x = randn_t({5, 9}, DType::f32, 5), y = randn_t({9}, DType::f32, 6);
  Tensor want = hp::kernels::elementwise(
      kernels::EwOp::add,
      hp::kernels::elementwise(kernels::EwOp::mul, hp::log(hp::add(hp::exp(x), 1.0)), full({}, 2.0),
                               DType::f32),
      y, DType::f32);
  for (int k = 0; k < 3; ++k) expect_bitwise(f({x, y})[0], want, "opaque region");
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("op 'softplus_eager' is not fusable"), std::string::npos)
      << log.lines[0];
  EXPECT_EQ(f.stats().eager, 3);
}

TEST(FuseFallback, UnsupportedInputsRunEager) {
  LogCapture log;
  Fused f = fuse([](const V& v) { return V{exp(v[0]) * v[1]}; }, "bcast");
  // A broadcast along a middle dim ([4, 1, 8] against [4, 3, 8]) is not fused: eager, correct.
  Tensor a = randn_t({4, 1, 8}, DType::f32, 7), b = randn_t({4, 3, 8}, DType::f32, 8);
  expect_bitwise(f({a, b})[0], hp::mul(hp::exp(a), b), "middle-dim broadcast");
  // f64 is not a fused dtype.
  Tensor c = randn_t({4, 8}, DType::f64, 9), d = randn_t({4, 8}, DType::f64, 10);
  expect_bitwise(f({c, d})[0], hp::mul(hp::exp(c), d), "f64");
  // Non-contiguous inputs are made contiguous and fused.
  Tensor t = hp::transpose(randn_t({8, 6}, DType::f32, 11), 0, 1);
  Tensor u = randn_t({6, 8}, DType::f32, 12);
  expect_bitwise(f({t, u})[0], hp::mul(hp::exp(t), u), "transposed input");
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_NE(log.lines[0].find("along a middle dim"), std::string::npos) << log.lines[0];
  EXPECT_NE(log.lines[1].find("dtype f64"), std::string::npos) << log.lines[1];
}

TEST(FuseErrors, ShapeMismatchNamesShapes) {
  Fused f = fuse([](const V& v) { return V{v[0] + v[1]}; }, "add");
  const std::string e = hp::testing::error_of([&] {
    f({randn_t({2, 3}, DType::f32, 1), randn_t({4}, DType::f32, 2)});
  });
  EXPECT_NE(e.find("[fusion] add: shapes [2, 3] and [4] cannot be broadcast"), std::string::npos)
      << e;
  const std::string r = hp::testing::error_of(
      [&] { fuse([](const V& v) { return V{sum(v[0])}; })({full({}, 1.0)}); });
  EXPECT_NE(r.find("[fusion] sum: needs at least 1 dim"), std::string::npos) << r;
  const std::string g = hp::testing::error_of([&] {
    Tensor x = randn_t({3}, DType::f32, 3);
    x.requires_grad_();
    fuse(
        [](const V& v) {
          return V{opaque("eager_exp", [](const std::vector<Tensor>& t) { return hp::exp(t[0]); },
                          {v[0]})};
        },
        "train")({x});
  });
  EXPECT_NE(g.find("[fusion] train: no backward for op 'eager_exp' (an input requires grad)"),
            std::string::npos)
      << g;
}

}  // namespace
}  // namespace hp::fusion

namespace hp::fusion {
namespace {

TEST(FuseCache, DescribeGeluAndSoftmax) {
  using V = std::vector<Var>;
  Tensor x = testing::randn_t({8, 100}, DType::f32, 3);
  auto g = fuse(
               [](const V& v) {
                 Var a = v[0];
                 return V{0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))};
               },
               "gelu", /*patterns=*/false)
               .plan({x});  // the chains, not the gelu_tanh rewrite
  auto s = fuse(
               [](const V& v) {
                 Var e = exp(v[0] - amax(v[0]));
                 return V{e / sum(e)};
               },
               "softmax", /*patterns=*/false)  // the generic program, not the softmax stencil
               .plan({x});
  const std::string dg = describe(*g), ds = describe(*s);
  std::printf("%s%s", dg.c_str(), ds.c_str());
  EXPECT_NE(dg.find("chain"), std::string::npos);
  EXPECT_NE(ds.find("reduce"), std::string::npos);
}

}  // namespace
}  // namespace hp::fusion

namespace hp::fusion {
namespace {

// Each test runs once per ISA, with that ISA active (isa_test.h).
class FuseEdgesIsa : public ::hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(FuseEdgesIsa);

TEST_P(FuseEdgesIsa, OutputsThatAreInputsRepeatedOrZeroDim) {
  using V = std::vector<Var>;
  testing::LogCapture log;
  Tensor x = testing::randn_t({5, 33}, DType::f32, 1),
         b = testing::randn_t({5, 33}, DType::bf16, 2);
  auto fn = [](const V& v) {
    Var y = exp(v[0]);
    return V{v[0], y, y, cast(v[1], DType::f32), v[1] + 1.0};
  };
  Fused f = fuse(fn);
  ASSERT_NE(f.plan({x, b}), nullptr);
  Graph g;
  trace(fn, {x, b}, &g);
  testing::expect_all_bitwise(f({x, b}), run_eager(g, {x, b}),
                              "identity, repeated, widened outputs");
  // 0-d tensors: a one-element domain.
  Tensor s = testing::randn_t({}, DType::f32, 3);
  Fused h = fuse([](const V& v) { return V{tanh(v[0]) * 3.0}; });
  ASSERT_NE(h.plan({s}), nullptr);
  testing::expect_bitwise(
      h({s})[0],
      hp::kernels::elementwise(kernels::EwOp::mul, hp::tanh(s), full({}, 3.0), DType::f32), "0-d");
  EXPECT_TRUE(log.lines.empty());
}

// An empty tensor and a literal-only output run eagerly.
TEST(FuseEdges, EmptyAndLiteralOnlyOutputsRunEagerly) {
  using V = std::vector<Var>;
  testing::LogCapture log;
  Tensor e = zeros({0, 4});
  Fused f = fuse([](const V& v) { return V{exp(v[0])}; }, "empty");
  EXPECT_EQ(f({e})[0].shape(), (Shape{0, 4}));
  Fused c = fuse([](const V& v) { return V{exp(literal(v[0], 1.0)), v[0]}; }, "literal");
  Tensor x = testing::randn_t({2, 3}, DType::f32, 4);
  auto r = c({x});
  EXPECT_FLOAT_EQ(static_cast<float>(r[0].item()), std::exp(1.0f));
  ASSERT_EQ(log.lines.size(), 2u);
}

}  // namespace
}  // namespace hp::fusion
