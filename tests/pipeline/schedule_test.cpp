// Pipeline schedules as data (pipeline/schedule.h): every builder's lists pass the validator for
// pp 2..4 and 1..12 microbatches, the simulated bubble equals each schedule's closed form (at unit
// costs, and for the zero-bubble ones at a W lighter than F), and the validator names the rank and
// action of a broken list.
#include "hp/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "error_of.h"

namespace hp::pipeline {
namespace {

using hp::testing::error_of;

int64_t count(const Schedule& s, Op op) {
  int64_t n = 0;
  for (const auto& list : s.actions)
    n += std::count_if(list.begin(), list.end(), [op](const Action& a) { return a.op == op; });
  return n;
}

TEST(Schedule, EveryScheduleValidatesForPp2To4AndMicrobatches1To12) {
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t m = 1; m <= 12; ++m) {
      const std::string at = "pp " + std::to_string(p) + ", m " + std::to_string(m);
      std::vector<ScheduleSpec> specs = {{ScheduleKind::gpipe, p, m, 1}};
      if (m >= p) {
        specs.push_back({ScheduleKind::one_f_one_b, p, m, 1});
        specs.push_back({ScheduleKind::zb_h1, p, m, 1});
        specs.push_back({ScheduleKind::zb_h2, p, m, 1});
      }
      if (m >= p && m % p == 0)
        for (int64_t v = 2; v <= 3; ++v) specs.push_back({ScheduleKind::interleaved_1f1b, p, m, v});
      for (const ScheduleSpec& spec : specs) {
        const Schedule s = build_schedule(spec);
        SCOPED_TRACE(at + " " + schedule_kind_name(spec.kind) + "\n" + format_actions(s));
        ASSERT_NO_THROW(validate(s));
        const int64_t n = p * spec.virtual_stages;
        EXPECT_EQ(s.num_stages, n);
        EXPECT_EQ(count(s, Op::forward), n * m);
        const bool split = splits_backward(spec.kind);
        EXPECT_EQ(count(s, Op::backward), split ? 0 : n * m);
        EXPECT_EQ(count(s, Op::backward_input), split ? n * m : 0);
        EXPECT_EQ(count(s, Op::backward_weight), split ? n * m : 0);
        // One activation and one gradient transfer per stage boundary and microbatch.
        EXPECT_EQ(count(s, Op::send_act), (n - 1) * m);
        EXPECT_EQ(count(s, Op::recv_act), (n - 1) * m);
        EXPECT_EQ(count(s, Op::send_grad), (n - 1) * m);
        EXPECT_EQ(count(s, Op::recv_grad), (n - 1) * m);
      }
    }
}

TEST(Schedule, OneFOneBOrderOnEachRank) {
  // pp 2, 3 microbatches: rank 0 warms up with one forward, rank 1 alternates at once.
  const Schedule s = build_schedule({ScheduleKind::one_f_one_b, 2, 3, 1});
  EXPECT_EQ(format_actions(s),
            "rank 0: F0@s0 SEND_F0@s0 F1@s0 SEND_F1@s0 RECV_B0@s0 B0@s0 F2@s0 SEND_F2@s0 "
            "RECV_B1@s0 B1@s0 RECV_B2@s0 B2@s0\n"
            "rank 1: RECV_F0@s1 F0@s1 B0@s1 SEND_B0@s1 RECV_F1@s1 F1@s1 B1@s1 SEND_B1@s1 "
            "RECV_F2@s1 F2@s1 B2@s1 SEND_B2@s1\n");
}

TEST(Schedule, InterleavedPlacesChunksInLoopOrder) {
  const Schedule s = build_schedule({ScheduleKind::interleaved_1f1b, 2, 4, 2});
  EXPECT_EQ(s.stages_of_rank(0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(s.stages_of_rank(1), (std::vector<int64_t>{1, 3}));
  // Rank 0 starts with microbatches 0 and 1 on chunk 0, then on chunk 1 (stage 2).
  std::vector<Action> fwd;
  for (const Action& a : s.actions[0])
    if (a.op == Op::forward) fwd.push_back(a);
  ASSERT_GE(fwd.size(), 4u);
  EXPECT_EQ(fwd[0], (Action{Op::forward, 0, 0}));
  EXPECT_EQ(fwd[1], (Action{Op::forward, 1, 0}));
  EXPECT_EQ(fwd[2], (Action{Op::forward, 0, 2}));
  EXPECT_EQ(fwd[3], (Action{Op::forward, 1, 2}));
}

TEST(Schedule, BubbleMatchesClosedForms) {
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t m = p; m <= 8; ++m) {
      const double pm1 = double(p - 1);
      SCOPED_TRACE("pp " + std::to_string(p) + ", m " + std::to_string(m));
      EXPECT_NEAR(theoretical_bubble({ScheduleKind::gpipe, p, m, 1}), pm1 / (m + pm1), 1e-12);
      EXPECT_NEAR(theoretical_bubble({ScheduleKind::one_f_one_b, p, m, 1}), pm1 / (m + pm1), 1e-12);
      const double zb = theoretical_bubble({ScheduleKind::zb_h1, p, m, 1});
      EXPECT_NEAR(zb, pm1 / (3 * m + pm1), 1e-12);
      // The target: zero bubble at most half of 1F1B's.
      EXPECT_LE(zb, 0.5 * pm1 / (m + pm1));
      // ZB-H2 gains nothing at unit costs: the last rank's (p−1)·F wait is a floor in one step.
      EXPECT_NEAR(theoretical_bubble({ScheduleKind::zb_h2, p, m, 1}), pm1 / (3 * m + pm1), 1e-12);
      if (m % p == 0) {
        for (int64_t v = 2; v <= 3; ++v)
          EXPECT_NEAR(theoretical_bubble({ScheduleKind::interleaved_1f1b, p, m, v}),
                      pm1 / (v * m + pm1), 1e-12)
              << "v " << v;
      }
    }
  // One rank has no bubble.
  EXPECT_EQ(theoretical_bubble({ScheduleKind::gpipe, 1, 4, 1}), 0.0);
}

TEST(Schedule, PerStageCostsGiveEachRanksBubble) {
  const Schedule s = build_schedule({ScheduleKind::one_f_one_b, 2, 4, 1});
  // The same costs on every stage: the single-cost simulation.
  const Timeline same = simulate(s, std::vector<Costs>(2, Costs{}));
  EXPECT_DOUBLE_EQ(same.makespan, simulate(s).makespan);
  EXPECT_DOUBLE_EQ(same.bubble_fraction(), 0.2);
  // Stage 1 twice as costly (a heavy head): it runs its 4 F's and B's back to back from t = 1
  // (1 + 4 · 6 = 25), then rank 0's last B (2) ends the step at 27.
  const Timeline t = simulate(s, {Costs{}, Costs{2, 4, 2, 2, 0}});
  EXPECT_DOUBLE_EQ(t.makespan, 27.0);
  EXPECT_DOUBLE_EQ(t.busy[0], 12.0);
  EXPECT_DOUBLE_EQ(t.busy[1], 24.0);
  EXPECT_DOUBLE_EQ(t.bubble_fraction(), 1.0 - 36.0 / 54.0);
}

TEST(Schedule, ZeroBubbleRunsWAfterIAndDefersRWsOnRankR) {
  const Schedule s = build_schedule({ScheduleKind::zb_h1, 4, 8, 1});
  for (int64_t r = 0; r < 4; ++r) {
    int64_t outstanding = 0, most = 0;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      outstanding += a.op == Op::backward_input ? 1 : a.op == Op::backward_weight ? -1 : 0;
      if (a.op == Op::forward) most = std::max(most, outstanding);
    }
    EXPECT_EQ(most, r) << "rank " << r;
  }
}

// With W lighter than F and I (the deferred linears' weight gradients against whole forwards and
// input gradients, as measured), every rank idles (p−1)·x per step: x = F + I − W for ZB-H1, whose
// W's fill only the cool-down, x = max(F, F + I − 2W) for ZB-H2 (m ≥ 2p−1), whose held-back W's
// fill the tail, against F + B for 1F1B. At W = F / 2 = I / 2 only ZB-H2 meets the ½ of
// 1F1B's bubble (x = F against 1.5·F, out of 2.5·F per microbatch).
TEST(Schedule, ZeroBubbleH2HalvesOneFOneBsBubbleWhenWIsLight) {
  const Costs half_w{1, 1.5, 1, 0.5, 0};
  for (const Costs& c : {half_w, Costs{1, 1.6, 1.2, 0.4, 0}, Costs{1, 1.1, 0.8, 0.3, 0}}) {
    const double work = c.forward + c.backward_input + c.backward_weight;
    ASSERT_DOUBLE_EQ(c.backward, c.backward_input + c.backward_weight);
    auto bubble = [&](int64_t p, int64_t m, double x) {
      return double(p - 1) * x / (double(p - 1) * x + double(m) * work);
    };
    for (int64_t p = 2; p <= 4; ++p)
      for (int64_t m = 2 * p - 1; m <= 12; ++m) {
        SCOPED_TRACE("pp " + std::to_string(p) + ", m " + std::to_string(m) + ", W " +
                     std::to_string(c.backward_weight));
        const double one =
            simulate(build_schedule({ScheduleKind::one_f_one_b, p, m, 1}), c).bubble_fraction();
        const double h1 =
            simulate(build_schedule({ScheduleKind::zb_h1, p, m, 1}), c).bubble_fraction();
        const double h2 =
            simulate(build_schedule({ScheduleKind::zb_h2, p, m, 1}), c).bubble_fraction();
        EXPECT_NEAR(one, bubble(p, m, c.forward + c.backward), 1e-12);
        EXPECT_NEAR(h1, bubble(p, m, c.forward + c.backward_input - c.backward_weight), 1e-12);
        EXPECT_NEAR(
            h2,
            bubble(p, m, std::max(c.forward, c.forward + c.backward_input - 2 * c.backward_weight)),
            1e-12);
        EXPECT_LT(h2, h1);
        if (&c == &half_w) {
          EXPECT_GT(h1, 0.5 * one);
          EXPECT_LE(h2, 0.5 * one);
        }
      }
  }
}

TEST(Schedule, ZeroBubbleH2KeepsUpTo2PMinus1ForwardsAndHoldsBack2RWsOnRankR) {
  for (int64_t m : {7, 12}) {
    const Schedule s = build_schedule({ScheduleKind::zb_h2, 4, m, 1});
    for (int64_t r = 0; r < 4; ++r) {
      // F's without their I (activations kept), and I's without their W when a forward starts.
      int64_t live = 0, held = 0, most_live = 0, most_held = 0;
      for (const Action& a : s.actions[static_cast<size_t>(r)]) {
        if (a.op == Op::forward) most_held = std::max(most_held, held);
        live += a.op == Op::forward ? 1 : a.op == Op::backward_input ? -1 : 0;
        held += a.op == Op::backward_input ? 1 : a.op == Op::backward_weight ? -1 : 0;
        most_live = std::max(most_live, live);
      }
      EXPECT_EQ(most_live, 2 * (4 - 1 - r) + 1) << "rank " << r << ", m " << m;
      EXPECT_EQ(most_held, 2 * r) << "rank " << r << ", m " << m;
    }
  }
  // Fewer microbatches: rank 0 runs all its forwards first, and no rank holds back more W's
  // than it has I's to run meanwhile (p 2, m 3: group k is F_k, I_{k−2}, W_{k−2} on rank 0,
  // F_k, I_k, W_{k−2} on rank 1).
  EXPECT_EQ(format_actions(build_schedule({ScheduleKind::zb_h2, 2, 3, 1})),
            "rank 0: F0@s0 SEND_F0@s0 F1@s0 SEND_F1@s0 F2@s0 SEND_F2@s0 RECV_B0@s0 I0@s0 W0@s0 "
            "RECV_B1@s0 I1@s0 W1@s0 RECV_B2@s0 I2@s0 W2@s0\n"
            "rank 1: RECV_F0@s1 F0@s1 I0@s1 SEND_B0@s1 RECV_F1@s1 F1@s1 I1@s1 SEND_B1@s1 "
            "RECV_F2@s1 F2@s1 I2@s1 SEND_B2@s1 W0@s1 W1@s1 W2@s1\n");
}

TEST(Schedule, DrawShowsTheTimeline) {
  const std::string chart = draw(build_schedule({ScheduleKind::gpipe, 2, 2, 1}));
  EXPECT_NE(chart.find("gpipe, 2 ranks, 2 microbatches: bubble 0.333333"), std::string::npos)
      << chart;
  // rank 1 idles one unit, then runs F0 F1 and both backwards (2 units each).
  EXPECT_NE(chart.find("rank 1 | .  F0 F1 B0 B0 B1 B1"), std::string::npos) << chart;
  // ZB-H2's parallelogram: rank 0 idles at the end what rank 1 idles at the start.
  const std::string zb = draw(build_schedule({ScheduleKind::zb_h2, 2, 3, 1}));
  EXPECT_NE(zb.find("zb_h2, 2 ranks, 3 microbatches: bubble 0.1 "), std::string::npos) << zb;
  EXPECT_NE(zb.find("rank 0 | F0 F1 F2 i0 w0 i1 w1 i2 w2 . \n"), std::string::npos) << zb;
  EXPECT_NE(zb.find("rank 1 | .  F0 i0 F1 i1 F2 i2 w0 w1 w2\n"), std::string::npos) << zb;
}

TEST(Schedule, ValidatorCatchesBrokenLists) {
  const Schedule good = build_schedule({ScheduleKind::one_f_one_b, 2, 2, 1});
  auto erase = [](Schedule s, size_t r, Action a) {
    auto& l = s.actions[r];
    l.erase(std::find(l.begin(), l.end(), a));
    return s;
  };
  // A receive without its send waits forever.
  EXPECT_EQ(error_of([&] {
              validate(erase(good, 0, {Op::send_act, 1, 0}));
            }),
            "[pipeline] deadlock: rank 0 at action 5 (RECV_B1@s0) waits for SEND_B1@s1 on rank 1; "
            "rank 1 at action 4 (RECV_F1@s1) waits for SEND_F1@s0 on rank 0");
  // A send without its receive, and a forward whose input never arrived.
  EXPECT_EQ(error_of([&] {
              validate(erase(good, 1, {Op::recv_act, 1, 1}));
            }),
            "[pipeline] rank 1 action 4 (F1@s1): needs RECV_F1@s1, which rank 1 does not run "
            "before it");
  // Missing a backward.
  EXPECT_EQ(error_of([&] {
              validate(erase(good, 1, {Op::backward, 0, 1}));
            }),
            "[pipeline] microbatch 0 of stage 1 (rank 1) has no backward (B, or I and W)");
  // Two ranks each waiting for the other first: rank 0 waits for mb 0's gradient before it sends
  // mb 0's activation, which rank 1 needs to produce that gradient.
  Schedule cycle = good;
  cycle.actions[0] = {{Op::forward, 0, 0},   {Op::recv_grad, 0, 0}, {Op::backward, 0, 0},
                      {Op::send_act, 0, 0},  {Op::forward, 1, 0},   {Op::send_act, 1, 0},
                      {Op::recv_grad, 1, 0}, {Op::backward, 1, 0}};
  EXPECT_EQ(error_of([&] { validate(cycle); }),
            "[pipeline] deadlock: rank 0 at action 1 (RECV_B0@s0) waits for SEND_B0@s1 on rank 1; "
            "rank 1 at action 0 (RECV_F0@s1) waits for SEND_F0@s0 on rank 0");
  // A backward before the receive of its output gradient.
  Schedule early = good;
  auto& l0 = early.actions[0];
  std::iter_swap(std::find(l0.begin(), l0.end(), Action{Op::recv_grad, 0, 0}),
                 std::find(l0.begin(), l0.end(), Action{Op::backward, 0, 0}));
  EXPECT_EQ(error_of([&] { validate(early); }),
            "[pipeline] rank 0 action 4 (B0@s0): needs RECV_B0@s0, which rank 0 does not run "
            "before it");
  // W before its I, a stage on the wrong rank, a forward run twice.
  Schedule zb = build_schedule({ScheduleKind::zb_h1, 2, 2, 1});
  auto& l1 = zb.actions[1];
  const auto i0 = std::find(l1.begin(), l1.end(), Action{Op::backward_input, 0, 1});
  const auto w0 = std::find(l1.begin(), l1.end(), Action{Op::backward_weight, 0, 1});
  std::iter_swap(i0, w0);
  EXPECT_NE(error_of([&] { validate(zb); }).find("(W0@s1): needs I0@s1"), std::string::npos);
  Schedule wrong = good;
  wrong.actions[0].push_back({Op::forward, 0, 1});
  EXPECT_EQ(error_of([&] { validate(wrong); }),
            "[pipeline] rank 0 action 8 (F0@s1): stage 1 lives on rank 1");
  Schedule twice = good;
  twice.actions[0].push_back({Op::forward, 0, 0});
  EXPECT_EQ(error_of([&] { validate(twice); }),
            "[pipeline] rank 0 action 8 (F0@s0): appears twice");
}

TEST(Schedule, BadSpecsNameTheKeys) {
  EXPECT_EQ(error_of([] {
              build_schedule({ScheduleKind::one_f_one_b, 4, 2, 1});
            }),
            "[pipeline] parallel.pipeline.schedule 1f1b needs parallel.pipeline.microbatches >= "
            "parallel.pp (4), got 2");
  EXPECT_EQ(error_of([] {
              build_schedule({ScheduleKind::interleaved_1f1b, 2, 3, 2});
            }),
            "[pipeline] parallel.pipeline.schedule interleaved_1f1b needs "
            "parallel.pipeline.microbatches (3) to be a multiple of parallel.pp (2)");
  EXPECT_EQ(error_of([] {
              build_schedule({ScheduleKind::gpipe, 2, 2, 2});
            }),
            "[pipeline] parallel.pipeline.virtual_stages = 2 needs parallel.pipeline.schedule "
            "interleaved_1f1b, not gpipe");
  EXPECT_EQ(error_of([] {
              build_schedule({ScheduleKind::zb_h2, 3, 2, 1});
            }),
            "[pipeline] parallel.pipeline.schedule zb_h2 needs parallel.pipeline.microbatches >= "
            "parallel.pp (3), got 2");
  EXPECT_EQ(error_of([] { schedule_kind_from_name("zb"); }),
            "[pipeline] parallel.pipeline.schedule = 'zb' is not a schedule: use gpipe, 1f1b, "
            "interleaved_1f1b, zb_h1 or zb_h2");
  EXPECT_EQ(schedule_kind_from_name("zb_h2"), ScheduleKind::zb_h2);
  EXPECT_EQ(schedule_kind_from_name("interleaved_1f1b"), ScheduleKind::interleaved_1f1b);
}

}  // namespace
}  // namespace hp::pipeline
