// Pipeline schedules as data (pipeline/schedule.h): every builder's lists pass the validator for
// pp 2..4 and 1..8 microbatches, the simulated bubble equals each schedule's closed form, and the
// validator names the rank and action of a broken list.
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

TEST(Schedule, EveryScheduleValidatesForPp2To4AndMicrobatches1To8) {
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t m = 1; m <= 8; ++m) {
      const std::string at = "pp " + std::to_string(p) + ", m " + std::to_string(m);
      std::vector<ScheduleSpec> specs = {{ScheduleKind::gpipe, p, m, 1}};
      if (m >= p) {
        specs.push_back({ScheduleKind::one_f_one_b, p, m, 1});
        specs.push_back({ScheduleKind::zb_h1, p, m, 1});
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
        const bool split = spec.kind == ScheduleKind::zb_h1;
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

TEST(Schedule, DrawShowsTheTimeline) {
  const std::string chart = draw(build_schedule({ScheduleKind::gpipe, 2, 2, 1}));
  EXPECT_NE(chart.find("gpipe, 2 ranks, 2 microbatches: bubble 0.333333"), std::string::npos)
      << chart;
  // rank 1 idles one unit, then runs F0 F1 and both backwards (2 units each).
  EXPECT_NE(chart.find("rank 1 | .  F0 F1 B0 B0 B1 B1"), std::string::npos) << chart;
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
  EXPECT_EQ(error_of([] { schedule_kind_from_name("zb"); }),
            "[pipeline] parallel.pipeline.schedule = 'zb' is not a schedule: use gpipe, 1f1b, "
            "interleaved_1f1b or zb_h1");
  EXPECT_EQ(schedule_kind_from_name("interleaved_1f1b"), ScheduleKind::interleaved_1f1b);
}

}  // namespace
}  // namespace hp::pipeline
