// Deferred weight gradients (pipeline/weight_grad.h): under a capture a linear's backward gives the
// input gradient only and queues the weight and bias gradients, which equal the plain backward's
// once the queue runs; outside a capture it is ops linear.
#include "hp/pipeline/weight_grad.h"

#include <gtest/gtest.h>

#include "error_of.h"
#include "hp/autograd/engine.h"
#include "hp/core/random.h"
#include "hp/nn/module.h"
#include "hp/ops/ops.h"

namespace hp::pipeline {
namespace {

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined() && b.defined());
  ASSERT_EQ(a.shape(), b.shape());
  const auto va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-6 * (1 + std::abs(vb[i])));
}

TEST(WeightGrad, CaptureDefersWeightAndBiasGradientsUntilTheirTaskRuns) {
  manual_seed(7);
  const Tensor x0 = randn({2, 3, 5});
  const Tensor w = randn({4, 5}).requires_grad_(), b = randn({4}).requires_grad_();
  const Tensor dy = randn({2, 3, 4});
  // Reference: ops linear, one backward.
  Tensor x = x0.detach().requires_grad_();
  autograd::backward({linear(x, w, b)}, {dy});
  const Tensor gx = x.grad(), gw = w.grad().clone(), gb = b.grad().clone();
  // Deferred: the same value; under a capture, I gives dx only and W the rest.
  const Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  Tensor x2 = x0.detach().requires_grad_();
  const Tensor y = deferred_linear(x2, w2, b2);
  expect_equal(y, linear(x0, w, b));
  WeightGradTasks tasks;
  {
    WeightGradCapture capture(&tasks);
    autograd::backward({y}, {dy});
  }
  expect_equal(x2.grad(), gx);
  EXPECT_FALSE(w2.grad().defined());
  EXPECT_FALSE(b2.grad().defined());
  ASSERT_EQ(tasks.size(), 1u);
  tasks[0]();
  expect_equal(w2.grad(), gw);
  expect_equal(b2.grad(), gb);
  // Outside a capture the weight gradient comes with the backward (and accumulates).
  autograd::backward({deferred_linear(x0, w2, b2)}, {dy});
  expect_equal(w2.grad(), mul(gw, 2.0));
}

TEST(WeightGrad, InstallRefusesALinearWithAnotherKernel) {
  nn::Linear lin(3, 2, false);
  install_deferred_linears(lin);
  EXPECT_TRUE(lin.has_kernel());
  EXPECT_NE(hp::testing::error_of([&] { install_deferred_linears(lin); }).find("already runs"),
            std::string::npos);
}

}  // namespace
}  // namespace hp::pipeline
