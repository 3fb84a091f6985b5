// MegaMoE (moe/megamoe.h) at ep = the world size (2-4 ranks; 3 holds 8 experts as 3, 3, 2):
// a MoE block running its expert-parallel exchange as MegaMoE equals the same block on the
// sequential exchange bitwise — outputs, token gradients, router gradients and every local
// expert's weight gradients — for G = 1, 2 and 4 expert groups, 1 and 2 GEMM workers, with routing
// that leaves whole expert groups without a token, one token per rank (most groups empty) and
// skewed routing; in f32, and in bf16 (rows and parameters: the rows travel as bf16, the f32
// experts widen them and round each output row and token gradient row where the sequential path
// casts). Also a direct call: the exchange alone equals moe::routed_experts' sequential one,
// forward and backward, and bad arguments are refused naming the values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "error_of.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/models/moe.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"
#include "hp/moe/megamoe.h"

namespace hp::moe {
namespace {

using hp::testing::error_of;

// Bitwise equality of two tensors (shape, dtype, then every bit).
void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  EXPECT_EQ(std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())), 0)
      << what << ": not bitwise equal";
}

enum class Routing { random, skewed, half_groups };

// One MoE block on the sequential exchange and one on MegaMoE with `groups`, same weights and
// tokens; forward, backward of a weighted sum, everything compared bitwise. dtype: the rows' and
// the parameters' (training.mixed_precision).
void check(int64_t tokens, Routing routing, int64_t groups, DType dtype = DType::f32) {
  auto world = dist::world();
  const int64_t n = world->size(), r = world->rank(), e = 8, h = 16;
  const std::string what = "tokens " + std::to_string(tokens) + " routing " +
                           std::to_string(int(routing)) + " G " + std::to_string(groups) + " " +
                           std::string(dtype_name(dtype)) + " at ep " + std::to_string(n);
  auto opt = models::MoEOptions::qwen3_moe(h, 12, e, 2, true);
  opt.dtype = dtype;
  manual_seed(21);
  models::MoEBlock seq(opt);
  manual_seed(21);
  models::MoEBlock mega(opt);
  const int64_t chunk = (e + n - 1) / n;
  for (models::MoEBlock* b : {&seq, &mega}) {
    const Tensor w = b->gate->weight;  // [E, hidden]
    for (int64_t x = 0; x < e; ++x) {
      // skewed: expert 0 wins every token. half_groups: only experts in the first half of
      // every rank's slots can win (x ≥ 0.1), so the groups of the other half get no token.
      if (routing == Routing::skewed && x == 0) narrow(w, 0, x, 1).fill_(1.0);
      if (routing == Routing::half_groups && x % chunk >= (chunk + 1) / 2)
        narrow(w, 0, x, 1).fill_(-1.0);
    }
  }
  seq.set_expert_parallel(world, {.megamoe = false});
  mega.set_expert_parallel(world, {.megamoe = true, .groups = groups});
  manual_seed(7 + r);
  const Tensor x = add(abs(randn({tokens, h})), 0.1).to(dtype), wsum = randn({tokens, h}).to(dtype);
  Tensor xs = x.clone().requires_grad_(true), xm = x.clone().requires_grad_(true);
  const Tensor ys = seq.forward(xs);
  const double before = megamoe_last_forward().wall_s;
  const Tensor ym = mega.forward(xm);
  EXPECT_NE(megamoe_last_forward().wall_s, before) << what << ": MegaMoE did not run";
  sum(mul(ys, wsum)).backward();
  sum(mul(ym, wsum)).backward();
  expect_bitwise(ym.detach(), ys.detach(), what + " output");
  expect_bitwise(xm.grad(), xs.grad(), what + " token gradient");
  const auto ps = seq.named_parameters(), pm = mega.named_parameters();
  ASSERT_EQ(ps.size(), pm.size());
  const ExpertRange own = local_experts(e, n, r);
  int64_t compared = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string& fqn = ps[i].first;
    const Tensor gs = ps[i].second.grad(), gm = pm[i].second.grad();
    if (fqn.rfind("experts.", 0) == 0) {
      const int64_t x_id = std::stoll(fqn.substr(8));
      if (x_id < own.first || x_id >= own.first + own.count) {
        EXPECT_FALSE(gm.defined()) << what << " " << fqn << " is not this rank's expert";
        continue;
      }
    }
    ASSERT_EQ(gm.defined(), gs.defined()) << what << " " << fqn;
    if (!gs.defined()) continue;
    expect_bitwise(gm, gs, what + " " + fqn);
    ++compared;
  }
  EXPECT_EQ(compared, 1 + 3 * own.count) << what;  // the router and every local expert
}

TEST(MegaMoE, EqualsTheSequentialExchangeBitwise) {
  if (dist::world()->size() == 1) GTEST_SKIP() << "expert parallelism needs 2+ ranks";
  for (int64_t groups : {1, 2, 4}) {
    check(13, Routing::random, groups);
    check(13, Routing::half_groups, groups);
  }
  check(1, Routing::random, 2);
  check(13, Routing::skewed, 2);
  // bf16 rows and parameters: the sequential path exchanges bf16 rows and casts around its f32
  // experts; MegaMoE exchanges bf16 rows and converts in regroup / unregroup.
  for (int64_t groups : {1, 2, 4}) check(13, Routing::random, groups, DType::bf16);
  check(13, Routing::half_groups, 2, DType::bf16);
  check(1, Routing::random, 2, DType::bf16);
  check(13, Routing::skewed, 2, DType::bf16);
  // Two pool threads: two GEMM workers share a group's experts, the sequential layer runs its
  // GEMMs on two threads; still bitwise equal.
  const int threads = num_threads();
  set_num_threads(2);
  check(13, Routing::random, 1);
  check(13, Routing::random, 2, DType::bf16);
  set_num_threads(threads);
}

TEST(MegaMoE, ExchangeAloneEqualsRoutedExpertsAndRefusesBadInput) {
  auto world = dist::world();
  if (world->size() == 1) GTEST_SKIP() << "expert parallelism needs 2+ ranks";
  const int64_t n = world->size(), e = 8, h = 8, inter = 6;
  const ExpertRange own = local_experts(e, n, world->rank());
  manual_seed(3);
  std::vector<Tensor> all_g, all_u, all_d;
  for (int64_t x = 0; x < e; ++x) {
    all_g.push_back(randn({inter, h}));
    all_u.push_back(randn({inter, h}));
    all_d.push_back(randn({h, inter}));
  }
  manual_seed(11 + world->rank());
  const Tensor x = randn({9, h}), w = softmax(randn({9, 3}), -1), wsum = randn({9, h});
  const Tensor ids = from_data<int64_t>(
      {0, 3, 7, 1, 2, 6, 5, 4, 0, 7, 6, 5, 3, 1, 2, 0, 4, 6, 1, 5, 7, 2, 3, 4, 6, 0, 1}, {9, 3});
  auto run = [&](bool megamoe, bool overlap, Tensor* dx, std::vector<Tensor>* dw) {
    LocalExpertWeights lw;
    for (int64_t q = own.first; q < own.first + own.count; ++q) {
      lw.gate.push_back(all_g[size_t(q)].clone().requires_grad_(true));
      lw.up.push_back(all_u[size_t(q)].clone().requires_grad_(true));
      lw.down.push_back(all_d[size_t(q)].clone().requires_grad_(true));
    }
    LocalExperts local = [&](const Tensor& xs, const std::vector<int64_t>& counts) {
      std::vector<int64_t> id;
      for (size_t q = 0; q < counts.size(); ++q) id.insert(id.end(), size_t(counts[q]), int64_t(q));
      const int64_t rows = xs.size(0);
      if (rows == 0 || lw.gate.empty()) return xs;
      return models::grouped_experts(xs, ones({rows, 1}), from_data<int64_t>(id, {rows, 1}),
                                     lw.gate, lw.up, lw.down);
    };
    ExpertExchange exchange;
    if (megamoe)
      exchange = [&, overlap](const Tensor& xs, const std::vector<int64_t>& count) {
        return megamoe_experts(xs, count, e, lw, world, {.groups = 2, .overlap = overlap});
      };
    Tensor xi = x.clone().requires_grad_(true);
    const Tensor y = routed_experts(xi, w, ids, e, local, world, exchange);
    sum(mul(y, wsum)).backward();
    *dx = xi.grad();
    for (const auto* v : {&lw.gate, &lw.up, &lw.down})
      for (const Tensor& t : *v) dw->push_back(t.grad());
    return y.detach();
  };
  Tensor dx_s;
  std::vector<Tensor> dw_s;
  const Tensor y_s = run(false, false, &dx_s, &dw_s);
  // The plans run by the runtime and task by task on the caller (the benchmark's baseline).
  for (bool overlap : {true, false}) {
    const std::string what = overlap ? "overlapped " : "run_sequential ";
    Tensor dx_m;
    std::vector<Tensor> dw_m;
    const Tensor y_m = run(true, overlap, &dx_m, &dw_m);
    expect_bitwise(y_m, y_s, what + "routed output");
    expect_bitwise(dx_m, dx_s, what + "token gradient");
    ASSERT_EQ(dw_m.size(), dw_s.size());
    for (size_t q = 0; q < dw_s.size(); ++q)
      expect_bitwise(dw_m[q], dw_s[q], what + "expert weight grad");
    EXPECT_GT(megamoe_last_forward().wall_s, 0.0);
    EXPECT_GE(megamoe_last_backward().compute_s, 0.0);
  }
  // Bad input: no groups, weights for the wrong number of experts.
  const std::vector<int64_t> count(size_t(e), 0);
  EXPECT_NE(error_of([&] {
              megamoe_experts(empty({0, h}), count, e, {}, world, {.groups = 0});
            }).find("[megamoe] groups must be >= 1, got 0"),
            std::string::npos);
  if (own.count > 0) {
    EXPECT_NE(error_of([&] {
                megamoe_experts(empty({0, h}), count, e, {}, world);
              }).find("experts but got 0/0/0 gate/up/down weights"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace hp::moe
