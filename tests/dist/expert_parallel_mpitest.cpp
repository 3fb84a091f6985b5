// Expert parallelism at ep = the world size (1-4 ranks): a MoE block whose experts are split over
// the ranks, each rank routing its own tokens, equals the one-rank block run over every rank's
// tokens — output rows, each owner's expert gradients, and the router / shared-expert gradients
// summed over the ranks (f32, 1e-5 relative) — for Qwen3-MoE, Mixtral and DeepSeek-V3 routing,
// with the fused f32 experts and the MXFP8 grouped kernel, for a few tokens (ranks that receive
// nothing) and skewed routing; experts that do not divide over the ranks are refused.
// The f32 blocks exchange by MegaMoE (the default; megamoe_mpitest.cpp checks it bitwise against
// the sequential exchange), the MXFP8 ones by the sequential exchange.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "error_of.h"
#include "expect_close.h"
#include "hp/core/random.h"
#include "hp/dist/communicator.h"
#include "hp/models/moe.h"
#include "hp/mx/linear.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"

namespace hp::moe {
namespace {

using hp::testing::error_of;
using hp::testing::expect_close;

TEST(ExpertParallel, LocalExpertsFollowTheChunkRule) {
  EXPECT_EQ(local_experts(8, 4, 3).first, 6);
  EXPECT_EQ(local_experts(8, 4, 3).count, 2);
  EXPECT_EQ(local_experts(5, 1, 0).count, 5);
  // 8 experts over 3 ranks: 3, 3, 2.
  for (int64_t r : {0, 1, 2}) {
    EXPECT_EQ(local_experts(8, 3, r).first, 3 * r);
    EXPECT_EQ(local_experts(8, 3, r).count, r < 2 ? 3 : 2);
  }
  EXPECT_EQ(local_experts(4, 3, 2).count, 0);  // chunks of 2: the last rank has none
  EXPECT_NE(error_of([] { local_experts(2, 4, 0); }).find("needs at least as many experts, got 2"),
            std::string::npos);
}

// tokens: per rank. skew: the router weight favours expert 0 strongly (most rows to one owner).
void check_block(const models::MoEOptions& opt, int64_t tokens, bool skew, bool mx,
                 const std::string& name) {
  auto world = dist::world();
  const int64_t n = world->size(), r = world->rank(), h = opt.hidden_size;
  const std::string what = name + " tokens " + std::to_string(tokens) + (skew ? " skewed" : "") +
                           (mx ? " mx" : "") + " at ep " + std::to_string(n);
  manual_seed(21);
  models::MoEBlock ref(opt);
  manual_seed(21);
  models::MoEBlock ep(opt);
  if (skew) {
    for (models::MoEBlock* b : {&ref, &ep}) {
      Tensor w = b->gate->weight;  // [E, hidden]: expert 0's row large
      float* p = w.data<float>();
      for (int64_t j = 0; j < h; ++j) p[j] = 1.0f;
    }
  }
  if (mx)
    for (models::MoEBlock* b : {&ref, &ep})
      b->set_grouped_kernel([](const Tensor& x, const Tensor& ends, const Tensor& w) {
        return mx::mx_grouped_experts(x, ends, w);
      });
  ep.set_expert_parallel(world);
  // Every rank's tokens, made on every rank (rank s's are rows [s·tokens, (s+1)·tokens)).
  manual_seed(7);
  const Tensor x_all = add(randn({n * tokens, h}), 0.5), w_all = randn({n * tokens, h});
  auto mine = [&](const Tensor& t) { return contiguous(narrow(t, 0, r * tokens, tokens)); };
  const Tensor out_ref = ref.forward(x_all);
  sum(mul(out_ref, w_all)).backward();
  const Tensor out_ep = ep.forward(mine(x_all));
  sum(mul(out_ep, mine(w_all))).backward();
  expect_close(out_ep.detach(), mine(out_ref.detach()), 1e-5, what + " output");
  const ExpertRange own = local_experts(opt.num_experts, n, r);
  const auto rp = ref.named_parameters(), pp = ep.named_parameters();
  ASSERT_EQ(rp.size(), pp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    const std::string& fqn = rp[i].first;
    const Tensor gr = rp[i].second.grad(), ge = pp[i].second.grad();
    if (fqn.rfind("experts.", 0) == 0) {
      const int64_t e = std::stoll(fqn.substr(8));
      if (e < own.first || e >= own.first + own.count) {
        double most = 0;
        if (ge.defined())
          for (double v : contiguous(ge).to_vector()) most = std::max(most, std::abs(v));
        EXPECT_EQ(most, 0.0) << what << " " << fqn << " is not this rank's expert";
        continue;
      }
      ASSERT_EQ(ge.defined(), gr.defined()) << what << " " << fqn;
      if (gr.defined()) expect_close(ge, gr, 1e-5, what + " " + fqn);
      continue;
    }
    ASSERT_EQ(ge.defined(), gr.defined()) << what << " " << fqn;
    if (!gr.defined()) continue;  // DeepSeek's e_score_correction_bias
    // Router and shared experts: each rank's gradient is over its own tokens.
    expect_close(world->all_reduce(contiguous(ge), dist::ReduceOp::sum), gr, 1e-5,
                 what + " " + fqn);
  }
}

TEST(ExpertParallel, BlockEqualsOneRankOverAllTokens) {
  const int64_t e = 8;  // 3 ranks hold 3, 3 and 2 experts
  const auto qwen = models::MoEOptions::qwen3_moe(16, 12, e, 2, true);
  const auto mixtral = models::MoEOptions::mixtral(16, 12, e, 2);
  const auto deepseek = models::MoEOptions::deepseek_v3(16, 12, e, 2, 2, 1, true, 2.5, 1);
  for (int64_t tokens : {1, 13}) {
    check_block(qwen, tokens, false, false, "qwen3_moe");
    check_block(mixtral, tokens, false, false, "mixtral");
    check_block(deepseek, tokens, false, false, "deepseek_v3");
  }
  check_block(qwen, 13, true, false, "qwen3_moe");
  check_block(qwen, 13, false, true, "qwen3_moe");
}

}  // namespace
}  // namespace hp::moe
