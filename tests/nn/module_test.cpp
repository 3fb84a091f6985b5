#include <gtest/gtest.h>

#include "hp/nn/module.h"
#include "hp/ops/ops.h"

namespace hp::nn {
namespace {

struct Block : Module {
  Block() {
    norm = register_module("norm", std::make_shared<RMSNorm>(8));
    proj = register_module("proj", std::make_shared<Linear>(8, 4, true));
  }
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> proj;
};

struct Net : Module {
  Net() {
    emb = register_module("embed", std::make_shared<Embedding>(10, 8));
    for (int i = 0; i < 2; ++i) blocks.push_back(register_module("layers." + std::to_string(i), std::make_shared<Block>()));
  }
  std::shared_ptr<Embedding> emb;
  std::vector<std::shared_ptr<Block>> blocks;
};

TEST(Module, FullyQualifiedNamesInRegistrationOrder) {
  manual_seed(0);
  Net net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  std::vector<std::string> want = {"embed.weight",          "layers.0.norm.weight", "layers.0.proj.weight",
                                   "layers.0.proj.bias",    "layers.1.norm.weight", "layers.1.proj.weight",
                                   "layers.1.proj.bias"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(net.num_parameters(), 10 * 8 + 2 * (8 + 32 + 4));
  EXPECT_TRUE(net.parameter("layers.1.proj.bias").requires_grad());
  EXPECT_THROW(net.parameter("layers.2.proj.bias"), ValueError);
  EXPECT_THROW(net.replace_child("nope", nullptr), ValueError);
}

TEST(Module, LinearForwardAndBackwardReachParameters) {
  manual_seed(1);
  Linear lin(3, 2, true);
  Tensor x = randn({4, 3});
  sum(lin.forward(x)).backward();
  EXPECT_EQ(lin.weight.grad().shape(), (Shape{2, 3}));
  EXPECT_EQ(lin.bias.grad().to_vector(), (std::vector<double>{4, 4}));
}

TEST(Module, ForwardWrappersComposeOutermostLast) {
  Linear lin(3, 2, false);
  std::string order;
  lin.add_forward_wrapper([&order](const Tensor& x, const Module::ForwardFn& inner) {
    order += "a(";
    Tensor y = inner(x);
    order += ")";
    return y;
  });
  lin.add_forward_wrapper([&order](const Tensor& x, const Module::ForwardFn& inner) {
    order += "b(";
    Tensor y = mul(inner(x), 2.0);
    order += ")";
    return y;
  });
  Tensor x = ones({1, 3});
  Tensor y = lin.forward(x);
  EXPECT_EQ(order, "b(a())");
  Tensor ref = mul(linear(x, lin.weight), 2.0);
  EXPECT_EQ(sum(y).item(), sum(ref).item());
}

}  // namespace
}  // namespace hp::nn
