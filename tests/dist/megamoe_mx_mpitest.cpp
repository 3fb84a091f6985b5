// MegaMoE with MX experts (moe/megamoe.h MegaMoEOptions::mx) at ep = the world size (2-4 ranks;
// 3 holds 8 experts as 3, 3, 2): a MoE block whose experts run as mx_grouped_experts
// (mx::MxGroupedKernel, what mx/convert.h installs) equals the same block on the sequential
// exchange bitwise — outputs, token gradients, router gradients and every local expert's weight
// gradients — for G = 1 and 2, random and skewed routing, E4M3 and E5M2, 1 and 2 GEMM workers, in
// f32 and in bf16 (bf16 activations and parameters: MegaMoE's buffers are bf16 where the
// sequential path's tensors are, and round at the same points), and with bf16 rows and f32
// parameters or the other way round.
// Also: the forward plan exchanges the counts inside itself ("counts", then "layout g" per group,
// visible in the run's Chrome trace), and bf16 rows (of MX or f32 experts) travel as 2 bytes an
// element both ways.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/models/moe.h"
#include "hp/mx/linear.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"
#include "hp/moe/megamoe.h"

namespace hp::moe {
namespace {

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  EXPECT_EQ(std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())), 0)
      << what << ": not bitwise equal";
}

// Sequential and MegaMoE blocks with the same weights, MX experts with `spec`; forward and
// backward of a weighted sum compared bitwise. Returns the max |output| difference between the
// MX block and the same block in f32 experts (so the MX path is seen to quantize).
// dtype: the rows' (x's); params: the block's parameters' (default: dtype).
double check(int64_t tokens, bool skewed, int64_t groups, mx::QuantSpec spec, DType dtype,
             std::optional<DType> params = std::nullopt) {
  auto world = dist::world();
  const int64_t n = world->size(), r = world->rank(), e = 8, h = 64;
  const std::string what = "tokens " + std::to_string(tokens) + (skewed ? " skewed" : "") + " G " +
                           std::to_string(groups) + " elem " + std::to_string(int(spec.elem)) +
                           " " + std::string(dtype_name(dtype)) + " params " +
                           std::string(dtype_name(params.value_or(dtype))) + " at ep " +
                           std::to_string(n);
  auto opt = models::MoEOptions::qwen3_moe(h, 40, e, 2, true);
  opt.dtype = params.value_or(dtype);
  manual_seed(5);
  models::MoEBlock seq(opt);
  manual_seed(5);
  models::MoEBlock mega(opt);
  manual_seed(5);
  models::MoEBlock plain(opt);  // f32 experts: the MX blocks must differ from it
  for (models::MoEBlock* b : {&seq, &mega, &plain}) {
    if (skewed) {  // expert 0 wins every token
      Tensor w = b->gate->weight;
      const Tensor row = narrow(w, 0, 0, 1);
      row.fill_(0.5);
    }
    if (b != &plain) b->set_grouped_kernel(mx::MxGroupedKernel{spec});
  }
  seq.set_expert_parallel(world, {.megamoe = false});
  mega.set_expert_parallel(world, {.megamoe = true, .groups = groups});
  plain.set_expert_parallel(world, {.megamoe = true, .groups = groups});
  manual_seed(17 + r);
  const Tensor x = add(abs(randn({tokens, h})), 0.1).to(dtype), wsum = randn({tokens, h}).to(dtype);
  Tensor xs = x.clone().requires_grad_(true), xm = x.clone().requires_grad_(true);
  const Tensor ys = seq.forward(xs);
  const double before = megamoe_last_forward().wall_s;
  const Tensor ym = mega.forward(xm);
  // The block ran a MegaMoE plan (its stats moved), in f32 and in bf16.
  EXPECT_NE(megamoe_last_forward().wall_s, before) << what;
  const Tensor yp = plain.forward(x);
  sum(mul(ys, wsum)).backward();
  sum(mul(ym, wsum)).backward();
  expect_bitwise(ym.detach(), ys.detach(), what + " output");
  expect_bitwise(xm.grad(), xs.grad(), what + " token gradient");
  const auto ps = seq.named_parameters(), pm = mega.named_parameters();
  EXPECT_EQ(ps.size(), pm.size());
  const ExpertRange own = local_experts(e, n, r);
  int64_t compared = 0;
  for (size_t i = 0; i < ps.size() && i < pm.size(); ++i) {
    const std::string& fqn = ps[i].first;
    const Tensor gs = ps[i].second.grad(), gm = pm[i].second.grad();
    if (fqn.rfind("experts.", 0) == 0) {
      const int64_t x_id = std::stoll(fqn.substr(8));
      if (x_id < own.first || x_id >= own.first + own.count) continue;
    }
    EXPECT_EQ(gm.defined(), gs.defined()) << what << " " << fqn;
    if (!gs.defined() || !gm.defined()) continue;
    expect_bitwise(gm, gs, what + " " + fqn);
    ++compared;
  }
  EXPECT_EQ(compared, 1 + 3 * own.count) << what;  // the router and every local expert
  return amax(abs(sub(cast(ym.detach(), DType::f32), cast(yp.detach(), DType::f32))), {0, 1})
      .item();
}

TEST(MegaMoEMx, EqualsTheSequentialExchangeBitwise) {
  if (dist::world()->size() == 1) GTEST_SKIP() << "expert parallelism needs 2+ ranks";
  const mx::QuantSpec e4m3{}, e5m2{.elem = mx::ElemFormat::e5m2};
  EXPECT_GT(check(37, false, 2, e4m3, DType::f32), 1e-4);
  check(37, false, 1, e4m3, DType::f32);
  check(37, true, 2, e4m3, DType::f32);
  check(1, false, 2, e5m2, DType::f32);
  // bf16: projections, SwiGLU, token gradients and weight gradients round to bf16 where the
  // sequential path's tensors do.
  EXPECT_GT(check(37, false, 2, e4m3, DType::bf16), 1e-4);
  check(37, false, 1, e4m3, DType::bf16);
  check(37, true, 2, e4m3, DType::bf16);
  check(1, false, 2, e5m2, DType::bf16);
  check(64, false, 4, e5m2, DType::bf16);
  // Mixed: bf16 rows with f32 parameters and the other way round (mx_grouped_experts keeps each
  // operand's dtype: outputs in the rows', weight gradients in the parameters').
  check(37, false, 2, e4m3, DType::bf16, DType::f32);
  check(37, false, 2, e4m3, DType::f32, DType::bf16);
  // Two pool threads: two GEMM workers share a group's experts, the sequential layer's MX GEMMs
  // run on two threads; still bitwise equal.
  const int threads = num_threads();
  set_num_threads(2);
  check(37, false, 2, e4m3, DType::f32);
  check(37, false, 2, e4m3, DType::bf16);
  set_num_threads(threads);
}

TEST(MegaMoEMx, CountsTravelInsideThePlan) {
  auto world = dist::world();
  if (world->size() == 1) GTEST_SKIP() << "expert parallelism needs 2+ ranks";
  const int64_t n = world->size(), e = 8, h = 8, inter = 6;
  const ExpertRange own = local_experts(e, n, world->rank());
  manual_seed(3);
  LocalExpertWeights lw;
  for (int64_t q = 0; q < own.count; ++q) {
    lw.gate.push_back(randn({inter, h}));
    lw.up.push_back(randn({inter, h}));
    lw.down.push_back(randn({h, inter}));
  }
  // Rank r sends r + 1 rows to every expert, so each rank receives a different row count.
  std::vector<int64_t> count(size_t(e), world->rank() + 1);
  const Tensor x = randn({e * (world->rank() + 1), h});
  // f32 rows, bf16 rows of MX experts (here with f32 weights: the dtypes are independent, as in
  // mx_grouped_experts) and bf16 rows of the f32 experts; bf16 rows travel as 2 bytes an element,
  // forward and backward.
  const std::optional<mx::QuantSpec> none, e4m3 = mx::QuantSpec{};
  for (const auto& [dt, spec] : {std::pair{DType::f32, none}, std::pair{DType::bf16, e4m3},
                                 std::pair{DType::bf16, none}}) {
    const Tensor xs = x.to(dt).requires_grad_(true);
    const Tensor y =
        megamoe_experts(xs, count, e, lw, world, {.groups = 2, .mx = spec, .trace = true});
    EXPECT_EQ(y.shape(), xs.shape());
    EXPECT_EQ(y.dtype(), dt);
    sum(y).backward();
    EXPECT_EQ(xs.grad().dtype(), dt);
    const std::string t = megamoe_last_forward().chrome_trace;
    for (const char* task : {"\"counts\"", "\"layout 0\"", "\"layout 1\"", "\"dispatch 1\""})
      EXPECT_NE(t.find(task), std::string::npos) << task << " missing from the trace";
    // The combine's bytes come from the received counts: Σ_s≠me (s + 1) rows of the experts here.
    int64_t received_from_others = 0;
    for (int64_t s = 0; s < n; ++s)
      if (s != world->rank()) received_from_others += (s + 1) * own.count;
    const int64_t sent_to_others = (world->rank() + 1) * (e - own.count);
    const int64_t row_bytes = (received_from_others + sent_to_others) * h * int64_t(dtype_size(dt));
    EXPECT_EQ(megamoe_last_forward().bytes,
              row_bytes + (e - own.count) * int64_t(sizeof(int64_t)))
        << dtype_name(dt) << (spec ? " MX" : "");
    // The backward sends the same rows the other way; its counts are known already.
    EXPECT_EQ(megamoe_last_backward().bytes, row_bytes) << dtype_name(dt) << (spec ? " MX" : "");
  }
  // bf16 weights need MX experts (the f32 experts' kernels are f32), and rows are f32 or bf16.
  if (own.count > 0) {
    LocalExpertWeights half;
    for (size_t q = 0; q < size_t(own.count); ++q) {
      half.gate.push_back(lw.gate[q].to(DType::bf16));
      half.up.push_back(lw.up[q].to(DType::bf16));
      half.down.push_back(lw.down[q].to(DType::bf16));
    }
    EXPECT_THROW(megamoe_experts(x, count, e, half, world, {.groups = 2}), ValueError);
  }
  EXPECT_THROW(megamoe_experts(x.to(DType::f16), count, e, lw, world, {.groups = 2}), ValueError);
}

}  // namespace
}  // namespace hp::moe
