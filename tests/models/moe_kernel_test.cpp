// MoEBlock with a grouped kernel (nn::GroupedExperts): the unfused path (stack, kernel GEMMs,
// weighted combine) against the fused grouped_experts, with an exact f32 kernel.
#include <gtest/gtest.h>

#include "hp/models/moe.h"
#include "hp/ops/ops.h"
#include "models/compare.h"

namespace hp::models {
namespace {

using testing::rel_diff;

// y rows [ends[g-1], ends[g]) = x rows · w[g]ᵀ, by per-expert ops::linear.
Tensor exact_grouped(const Tensor& x, const Tensor& ends, const Tensor& w) {
  std::vector<Tensor> parts;
  int64_t start = 0;
  const auto e = ends.to_vector_as<int64_t>();
  for (size_t g = 0; g < e.size(); ++g) {
    if (e[g] > start)
      parts.push_back(linear(narrow(x, 0, start, e[g] - start), select(w, 0, int64_t(g))));
    start = e[g];
  }
  return cat(parts, 0);
}

struct BlockRun {
  Tensor y, dx;
  std::vector<Tensor> grads;  // every parameter's
};

BlockRun run(MoEBlock& block, const Tensor& x0, const Tensor& dy) {
  for (Tensor& p : block.parameters()) p.zero_grad();
  Tensor x = x0.clone();
  x.requires_grad_();
  BlockRun r;
  r.y = block.forward(x);
  r.y.backward(dy);
  r.dx = x.grad();
  for (const Tensor& p : block.parameters()) r.grads.push_back(p.grad());
  return r;
}

TEST(MoEKernel, UnfusedPathMatchesFusedGroupedExperts) {
  manual_seed(5);
  for (bool shared : {false, true}) {
    MoEOptions o = shared ? MoEOptions::deepseek_v3(32, 16, 8, 2, 4, 2, true, 2.5, 1)
                          : MoEOptions::qwen3_moe(32, 16, 6, 2, true);
    MoEBlock block(o);
    const Tensor x = randn({2, 7, 32}), dy = randn({2, 7, 32});
    const BlockRun fused = run(block, x, dy);
    block.set_grouped_kernel(exact_grouped);
    ASSERT_TRUE(block.has_grouped_kernel());
    const BlockRun kern = run(block, x, dy);
    EXPECT_LT(rel_diff(kern.y, fused.y), 1e-5);
    EXPECT_LT(rel_diff(kern.dx, fused.dx), 1e-5);
    ASSERT_EQ(kern.grads.size(), fused.grads.size());
    for (size_t i = 0; i < kern.grads.size(); ++i) {
      if (!fused.grads[i].defined()) {  // DeepSeek's correction bias gets none either way
        EXPECT_FALSE(kern.grads[i].defined());
        continue;
      }
      ASSERT_TRUE(kern.grads[i].defined()) << i;
      EXPECT_LT(rel_diff(kern.grads[i], fused.grads[i]), 1e-5) << i;
    }
    block.set_grouped_kernel(nullptr);
    EXPECT_FALSE(block.has_grouped_kernel());
  }
}

}  // namespace
}  // namespace hp::models
