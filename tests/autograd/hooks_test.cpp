// Post-accumulate-grad hooks and end-of-backward callbacks (autograd/engine.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hp/autograd/checkpoint.h"
#include "hp/autograd/engine.h"
#include "hp/ops/ops.h"

namespace hp::autograd {
namespace {

TEST(AutogradHooks, PostAccumulateRunsOncePerBackwardAfterTheSum) {
  Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  std::vector<std::vector<double>> seen;
  const uint64_t id = register_post_accumulate_grad_hook(
      w, [&seen](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector()); });
  // w used twice: one hook call, with both contributions summed.
  sum(add(mul(w, 2.0), mul(w, 3.0))).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{5, 5}));
  sum(w).backward();  // accumulates into .grad, hook sees the total
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{6, 6}));
  remove_post_accumulate_grad_hook(id);
  sum(w).backward();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_THROW(register_post_accumulate_grad_hook(mul(w, 2.0), [](const Tensor&) {}), ValueError);
}

// Callbacks run after the outermost backward, nested (recompute) backwards included, in order.
TEST(AutogradHooks, CallbacksRunAfterTheOutermostBackward) {
  Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  std::vector<std::string> log;
  const uint64_t id = register_post_accumulate_grad_hook(w, [&log](const Tensor&) {
    log.push_back("grad");
    queue_callback([&log] {
      log.push_back("end");
      queue_callback([&log] { log.push_back("end2"); });
    });
  });
  Tensor x = from_vector({1, 1, 1}, {3}).requires_grad_();
  // The hook fires inside the checkpoint's nested backward; the callback waits for the outer one.
  Tensor y = checkpoint(
      [&w](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], w)}; }, {x})[0];
  sum(mul(y, y)).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"grad", "end", "end2"}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 8, 18}));
  remove_post_accumulate_grad_hook(id);
  EXPECT_THROW(queue_callback([] {}), ValueError);
}

}  // namespace
}  // namespace hp::autograd
