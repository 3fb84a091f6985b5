// MoEBlock with a grouped kernel (nn::GroupedExperts): the unfused path (stack, kernel GEMMs,
// weighted combine) against the fused grouped_experts, with an exact f32 kernel.
#include <gtest/gtest.h>

#include "hp/models/deepseek_v4.h"
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

template <class Block>
BlockRun run(Block& block, const Tensor& x0, const Tensor& dy) {
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

// block's fused grouped experts, then its kernel path (exact_grouped set as its grouped kernel):
// output, input gradient and every parameter's gradient within 1e-5 relative; a parameter without
// a gradient on one path (DeepSeek's correction bias) has none on the other. Returns the fused run.
template <class Block>
BlockRun expect_kernel_path_matches_fused(Block& block, const Tensor& x, const Tensor& dy) {
  const BlockRun fused = run(block, x, dy);
  block.set_grouped_kernel(exact_grouped);
  EXPECT_TRUE(block.has_grouped_kernel());
  const BlockRun kern = run(block, x, dy);
  EXPECT_LT(rel_diff(kern.y, fused.y), 1e-5);
  EXPECT_LT(rel_diff(kern.dx, fused.dx), 1e-5);
  EXPECT_EQ(kern.grads.size(), fused.grads.size());
  for (size_t i = 0; i < std::min(kern.grads.size(), fused.grads.size()); ++i) {
    EXPECT_EQ(kern.grads[i].defined(), fused.grads[i].defined()) << i;
    if (fused.grads[i].defined() && kern.grads[i].defined()) {
      EXPECT_LT(rel_diff(kern.grads[i], fused.grads[i]), 1e-5) << i;
    }
  }
  return fused;
}

TEST(MoEKernel, UnfusedPathMatchesFusedGroupedExperts) {
  manual_seed(5);
  for (bool shared : {false, true}) {
    MoEOptions o = shared ? MoEOptions::deepseek_v3(32, 16, 8, 2, 4, 2, true, 2.5, 1)
                          : MoEOptions::qwen3_moe(32, 16, 6, 2, true);
    MoEBlock block(o);
    const Tensor x = randn({2, 7, 32}), dy = randn({2, 7, 32});
    expect_kernel_path_matches_fused(block, x, dy);
    block.set_grouped_kernel(nullptr);
    EXPECT_FALSE(block.has_grouped_kernel());
  }
}

// DeepSeek-V4's experts (learned routing, SwiGLU clamp active at limit 1 with these weights):
// the kernel path (clamp and SwiGLU as ops) equals the fused grouped_experts with the clamp fused.
TEST(MoEKernel, DeepseekV4UnfusedPathMatchesFusedClampedExperts) {
  manual_seed(6);
  ModelConfig c;
  c.hidden_size = 32;
  c.moe_intermediate_size = 16;
  c.num_experts = 6;
  c.num_experts_per_tok = 2;
  c.vocab_size = 50;
  c.scoring_func = "sqrtsoftplus";
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 1.0;
  c.initializer_range = 0.3;
  DeepseekV4MoE block(c, false);
  const Tensor x = randn({2, 7, 32}), dy = randn({2, 7, 32});
  const BlockRun fused = expect_kernel_path_matches_fused(block, x, dy);
  // The clamp was active: without it the output differs.
  ModelConfig unclamped = c;
  unclamped.swiglu_limit = 0;
  manual_seed(6);
  DeepseekV4MoE plain(unclamped, false);
  EXPECT_GT(rel_diff(plain.forward(x), fused.y), 1e-3);
}

}  // namespace
}  // namespace hp::models
