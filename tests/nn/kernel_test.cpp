// Module walks and swappable GEMM kernels (what low precision and recompute build on).
#include <gtest/gtest.h>

#include "hp/nn/module.h"
#include "hp/ops/ops.h"

namespace hp::nn {
namespace {

struct Pair : Module {
  Pair() {
    a = register_module("a", std::make_shared<Linear>(4, 4, false));
    b = register_module("b", std::make_shared<RMSNorm>(4));
  }
  std::shared_ptr<Linear> a;
  std::shared_ptr<RMSNorm> b;
};

struct Tree : Module {
  Tree() {
    first = register_module("first", std::make_shared<Pair>());
    second = register_module("second", std::make_shared<Pair>());
  }
  std::shared_ptr<Pair> first, second;
};

TEST(Module, NamedModulesDepthFirstWithRelativeFqns) {
  Tree t;
  std::vector<std::string> names;
  for (auto& [fqn, m] : t.named_modules()) names.push_back(fqn);
  EXPECT_EQ(names, (std::vector<std::string>{"", "first", "first.a", "first.b", "second",
                                             "second.a", "second.b"}));
  EXPECT_EQ(t.named_modules()[6].second, t.second->b.get());
  std::vector<std::string> sub;
  for (auto& [fqn, m] : t.second->named_modules()) sub.push_back(fqn);
  EXPECT_EQ(sub, (std::vector<std::string>{"", "a", "b"}));
}

TEST(Module, LinearKernelReplacesTheGemmInsideWrappers) {
  manual_seed(3);
  Linear lin(3, 2, true);
  const Tensor x = randn({5, 3});
  const Tensor plain = lin.forward(x);
  int calls = 0;
  // A kernel that doubles the plain GEMM: easy to tell apart, differentiable.
  lin.set_kernel([&calls](const Tensor& in, const Tensor& w, const Tensor& b) {
    ++calls;
    return linear(in, w, b) * 2.0;
  });
  ASSERT_TRUE(lin.has_kernel());
  // A wrapper around the module's computation reaches the kernel through inner ...
  lin.add_forward_wrapper(
      [](const Tensor& in, const Module::ForwardFn& inner) { return inner(in) + 1.0; });
  const Tensor y = lin.forward(x);
  EXPECT_EQ(calls, 1);
  const auto got = y.to_vector(), want = plain.to_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(float(got[i]), float(2 * want[i] + 1));
  // ... and a wrapper computing the GEMM itself (RowwiseParallel) through gemm().
  EXPECT_EQ(lin.gemm(x, lin.weight, Tensor()).to_vector(),
            (linear(x, lin.weight) * 2.0).to_vector());
  EXPECT_EQ(calls, 2);
  // Gradients reach the module's own parameters through the kernel.
  sum(y).backward();
  EXPECT_EQ(lin.bias.grad().to_vector(), (std::vector<double>{10, 10}));
  lin.set_kernel(nullptr);
  lin.set_forward_wrapper(nullptr);
  EXPECT_FALSE(lin.has_kernel());
  EXPECT_EQ(lin.forward(x).to_vector(), plain.to_vector());
}

}  // namespace
}  // namespace hp::nn
