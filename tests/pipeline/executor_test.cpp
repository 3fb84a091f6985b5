// The pipeline executor on one rank (pipeline/executor.h): chunks of a model handed over in memory
// (interleaved virtual stages; zero bubble's I / W with deferred linears, zb_h1 and zb_h2) give
// the gradients of running the microbatches through the whole model one after another.
#include "hp/pipeline/executor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "hp/autograd/engine.h"
#include "hp/core/random.h"
#include "hp/ops/ops.h"
#include "hp/pipeline/weight_grad.h"

namespace hp::pipeline {
namespace {

constexpr int64_t kStages = 4, kMicro = 3;

// Chunk k: h = tanh(h · w_kᵀ) through `gemm` (linear or deferred_linear); the last chunk returns
// the microbatch's scaled sum (the loss).
Tensor chunk(int64_t k, const Tensor& h, const std::vector<Tensor>& w,
             Tensor (*gemm)(const Tensor&, const Tensor&, const Tensor&)) {
  Tensor y = tanh(gemm(h, w[size_t(k)], Tensor()));
  return k + 1 == kStages ? mul(sum(y), 1.0 / kMicro) : y;
}

Tensor plain_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear(x, w, b);
}

std::vector<Tensor> make_weights() {
  std::vector<Tensor> w;
  for (int64_t k = 0; k < kStages; ++k) w.push_back(mul(randn({5, 5}), 0.5).requires_grad_());
  return w;
}

void run_schedule(ScheduleKind kind, int64_t virtual_stages) {
  manual_seed(3);
  std::vector<Tensor> inputs;
  for (int64_t m = 0; m < kMicro; ++m) inputs.push_back(randn({2, 5}));
  const std::vector<Tensor> w = make_weights();
  // Reference: each microbatch through the whole model, backward after each.
  for (int64_t m = 0; m < kMicro; ++m) {
    Tensor h = inputs[size_t(m)];
    for (int64_t k = 0; k < kStages; ++k) h = chunk(k, h, w, plain_linear);
    autograd::backward({h});
  }
  std::vector<Tensor> ref;
  for (const Tensor& t : w) ref.push_back(t.grad().clone());
  // The executor: one rank holding every stage (kStages / virtual_stages ranks' worth of chunks
  // is kStages chunks on this rank).
  std::vector<Tensor> w2;
  for (const Tensor& t : w) w2.push_back(t.detach().clone().requires_grad_());
  const bool split = splits_backward(kind);
  Schedule s = build_schedule({kind, 1, kMicro, virtual_stages});
  ASSERT_EQ(s.num_stages, split ? 1 : kStages);
  std::vector<StageFn> fns;
  if (split) {
    // One stage running the 4 chunks with deferred linears.
    fns.push_back({0, [&](int64_t, const Tensor& x) {
                     Tensor h = x;
                     for (int64_t k = 0; k < kStages; ++k) h = chunk(k, h, w2, deferred_linear);
                     return h;
                   }});
  } else {
    for (int64_t k = 0; k < kStages; ++k)
      fns.push_back(
          {k, [&, k](int64_t, const Tensor& x) { return chunk(k, x, w2, plain_linear); }});
  }
  Executor ex(std::move(s), nullptr, std::move(fns));
  const ExecutorStats st = ex.run([&](int64_t mb) { return inputs[size_t(mb)]; });
  EXPECT_GT(st.compute_s, 0.0);
  EXPECT_GE(st.total_s, st.compute_s);
  // Every stage's F and its B (or I and W) timed, and the stages' times sum to the compute time.
  ASSERT_EQ(st.stage_s.size(), size_t(split ? 1 : kStages));
  double sum = 0;
  for (const Costs& c : st.stage_s) {
    EXPECT_GT(c.forward, 0.0);
    EXPECT_EQ(c.backward > 0, !split);
    EXPECT_EQ(c.backward_input > 0, split);
    EXPECT_EQ(c.backward_weight > 0, split);
    sum += c.forward + c.backward + c.backward_input + c.backward_weight;
  }
  EXPECT_NEAR(sum, st.compute_s, 1e-9);
  for (int64_t k = 0; k < kStages; ++k) {
    ASSERT_TRUE(w2[size_t(k)].grad().defined()) << "chunk " << k;
    const auto a = w2[size_t(k)].grad().to_vector(), b = ref[size_t(k)].to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << "chunk " << k;
  }
}

TEST(Executor, InterleavedChunksOnOneRankHandOverInMemory) {
  run_schedule(ScheduleKind::interleaved_1f1b, kStages);
}

TEST(Executor, ZeroBubbleRunsDeferredWeightGradientsInW) {
  run_schedule(ScheduleKind::zb_h1, 1);
  run_schedule(ScheduleKind::zb_h2, 1);
}

// HP_PP_RECV_AHEAD (bench_pipeline's switch between receives posted ahead and when needed)
// takes 0 or 1; anything else names the variable and the value.
TEST(Executor, RecvAheadSwitchRejectsOtherValues) {
  Schedule s = build_schedule({ScheduleKind::gpipe, 1, 1, 1});
  std::vector<StageFn> fns{{0, [](int64_t, const Tensor& x) { return x; }}};
  setenv("HP_PP_RECV_AHEAD", "yes", 1);
  try {
    Executor ex(s, nullptr, fns);
    ADD_FAILURE() << "no error for HP_PP_RECV_AHEAD=yes";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("HP_PP_RECV_AHEAD must be 0 or 1, got 'yes'"),
              std::string::npos)
        << e.what();
  }
  setenv("HP_PP_RECV_AHEAD", "0", 1);
  EXPECT_NO_THROW({ Executor ex(s, nullptr, fns); });
  unsetenv("HP_PP_RECV_AHEAD");
}

}  // namespace
}  // namespace hp::pipeline
