#include <gtest/gtest.h>

#include <cmath>

#include "hp/autograd/checkpoint.h"
#include "hp/autograd/engine.h"
#include "hp/autograd/function.h"
#include "hp/autograd/grad_mode.h"
#include "hp/ops/ops.h"

namespace hp {
namespace {

Tensor param(std::vector<double> v, Shape s) {
  Tensor t = from_vector(v, s, DType::f64);
  t.requires_grad_();
  return t;
}

TEST(Autograd, ChainRuleAndAccumulation) {
  Tensor x = param({1, 2, 3}, {3});
  Tensor y = sum(mul(x, x));  // dy/dx = 2x
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 4, 6}));
  sum(x * 3.0).backward();  // accumulates
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{5, 7, 9}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = param({2}, {1});
  Tensor a = x * 3.0, b = exp(x);
  Tensor y = sum(a * b);  // d/dx (3x e^x) = 3 e^x (1 + x)
  y.backward();
  EXPECT_NEAR(x.grad().item(), 3 * std::exp(2.0) * 3, 1e-12);
}

TEST(Autograd, RetainGraphAndSecondBackwardError) {
  Tensor x = param({1, 2}, {2});
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().at({0}), 2 * std::exp(1.0), 1e-12);
  try {
    y.backward();
    FAIL() << "second backward without retain_graph did not throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos);
  }
}

TEST(Autograd, NoGradAndExplicitGradient) {
  Tensor x = param({1, 2, 3}, {3});
  {
    autograd::NoGradGuard ng;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
  }
  Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), ValueError);  // non-scalar needs a gradient
  y.backward(from_vector({1, 0, -1}, {3}, DType::f64));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 0, -2}));
  EXPECT_THROW(from_vector({1}, {1}).backward(), ValueError);  // no grad_fn
}

// y = x^3 with a hand-written backward: the custom Function API.
struct Cube {
  static constexpr const char* kName = "Cube";
  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    ctx.state = 3.0;
    return {mul(mul(in[0], in[0]), in[0])};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& g) {
    Tensor x = ctx.saved_tensors()[0];
    double k = std::any_cast<double>(ctx.state);
    return {mul(mul(g[0], mul(x, x)), k)};
  }
};

TEST(Autograd, CustomFunction) {
  Tensor x = param({1, -2}, {2});
  Tensor y = autograd::apply_function<Cube>({x})[0];
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.grad_fn()->name(), "Cube");
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, 12}));
}

TEST(Autograd, SavedTensorHooksPackAndUnpack) {
  int packs = 0, unpacks = 0;
  Tensor x = param({1, 2, 3}, {3});
  Tensor y;
  {
    autograd::SavedTensorHooksGuard guard(
        {[&](const Tensor& t) -> std::any {
           ++packs;
           return t.clone();  // e.g. a copy moved to another tier
         },
         [&](const std::any& a) {
           ++unpacks;
           return std::any_cast<Tensor>(a);
         }});
    y = sum(exp(x));
  }
  EXPECT_GT(packs, 0);
  y.backward();
  EXPECT_EQ(unpacks, packs);
  EXPECT_NEAR(x.grad().at({2}), std::exp(3.0), 1e-12);
}

// Nested guards compose: the inner hooks take what they want and decline the rest (an empty
// std::any), which the outer hooks get; what nobody takes is saved as is.
TEST(Autograd, SavedTensorHooksDeclineToTheEnclosingGuard) {
  Tensor x = param({1, 2, 3}, {3}), w = param({0.5, -1.0, 2.0}, {3});
  int inner_packs = 0, outer_packs = 0, inner_unpacks = 0, outer_unpacks = 0;
  const auto tag = [](int* count, double mark, const Tensor& t) -> std::any {
    ++*count;
    return std::make_pair(mark, t.clone());
  };
  const auto untag = [](int* count, double mark, const std::any& a) {
    ++*count;
    const auto& p = std::any_cast<const std::pair<double, Tensor>&>(a);
    EXPECT_EQ(p.first, mark) << "unpacked by the hooks that did not pack it";
    return p.second;
  };
  Tensor y;
  {
    // Outer: whatever reaches it.
    autograd::SavedTensorHooksGuard outer(
        {[&](const Tensor& t) { return tag(&outer_packs, 2.0, t); },
         [&](const std::any& a) { return untag(&outer_unpacks, 2.0, a); }});
    // Inner: only tensors sharing w's storage.
    autograd::SavedTensorHooksGuard inner(
        {[&](const Tensor& t) -> std::any {
           if (t.storage() != w.storage()) return {};
           return tag(&inner_packs, 1.0, t);
         },
         [&](const std::any& a) { return untag(&inner_unpacks, 1.0, a); }});
    y = sum(mul(exp(x), w));  // saves exp(x) (outer) and w (inner), and x's exp output
  }
  EXPECT_EQ(inner_packs, 1);
  EXPECT_GT(outer_packs, 0);
  y.backward();
  EXPECT_EQ(inner_unpacks, inner_packs);
  EXPECT_EQ(outer_unpacks, outer_packs);
  EXPECT_NEAR(x.grad().at({2}), std::exp(3.0) * 2.0, 1e-12);
  EXPECT_NEAR(w.grad().at({1}), std::exp(2.0), 1e-12);
}

TEST(Autograd, CheckpointRecomputesWithSameRngAndReachesParameters) {
  Tensor w = param({0.5, -1.0, 2.0, 0.25}, {4});
  auto region = [&](const std::vector<Tensor>& in) {
    // Random noise inside the region must be replayed exactly on recompute.
    Tensor noise = randn({4}, DType::f64);
    return std::vector<Tensor>{tanh(mul(add(in[0], noise), w))};
  };
  Tensor x1 = param({1, 2, 3, 4}, {4}), x2 = param({1, 2, 3, 4}, {4});
  manual_seed(7);
  Tensor plain = region({x1})[0];
  sum(plain).backward();
  Tensor gw_plain = w.grad().clone();
  w.zero_grad();
  manual_seed(7);
  Tensor ck = autograd::checkpoint(region, {x2})[0];
  EXPECT_EQ(ck.to_vector(), plain.to_vector());
  randn({3});  // the generator moves on before backward
  sum(ck).backward();
  EXPECT_EQ(x2.grad().to_vector(), x1.grad().to_vector());
  EXPECT_EQ(w.grad().to_vector(), gw_plain.to_vector());
}

}  // namespace
}  // namespace hp
