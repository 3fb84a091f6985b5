// LR schedules at their edge steps.
#include "hp/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hp/core/error.h"

namespace hp::optim {
namespace {

ScheduleSpec spec(ScheduleKind k, int64_t total, int64_t warmup, double min_ratio = 0.0,
                  double decay = 0.1) {
  return {k, total, warmup, decay, min_ratio};
}

TEST(Schedule, WarmupIsSharedAndNeverZero) {
  for (auto k :
       {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::linear, ScheduleKind::wsd}) {
    auto s = spec(k, 100, 4);
    EXPECT_DOUBLE_EQ(lr_factor(s, 0), 1.0 / 5);
    EXPECT_DOUBLE_EQ(lr_factor(s, 3), 4.0 / 5);
    EXPECT_DOUBLE_EQ(lr_factor(s, 4), 1.0) << schedule_kind_name(k);
  }
}

TEST(Schedule, Constant) {
  auto s = spec(ScheduleKind::constant, 10, 0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1000), 1.0);
}

TEST(Schedule, CosineEndsAtMinRatio) {
  auto s = spec(ScheduleKind::cosine, 11, 2, 0.1);
  EXPECT_DOUBLE_EQ(lr_factor(s, 2), 1.0);
  // Decay covers steps 2..10 (9 steps): the midpoint, step 6, sits halfway.
  EXPECT_NEAR(lr_factor(s, 6), 0.55, 1e-12);
  EXPECT_NEAR(lr_factor(s, 10), 0.1, 1e-12);
  EXPECT_NEAR(lr_factor(s, 50), 0.1, 1e-12);
  EXPECT_NEAR(lr_factor(s, 3), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 8)), 1e-12);
}

TEST(Schedule, Linear) {
  auto s = spec(ScheduleKind::linear, 5, 0, 0.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1), 0.75);
  EXPECT_DOUBLE_EQ(lr_factor(s, 4), 0.0);
}

TEST(Schedule, WsdStableThenDecay) {
  // 100 steps, 10 warmup, decay over the last 20: stable through step 79, decay 80..99.
  auto s = spec(ScheduleKind::wsd, 100, 10, 0.0, 0.2);
  EXPECT_EQ(wsd_decay_steps(s), 20);
  EXPECT_DOUBLE_EQ(lr_factor(s, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 79), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 80), 1.0);
  EXPECT_NEAR(lr_factor(s, 81), 1.0 - 1.0 / 19, 1e-12);
  EXPECT_DOUBLE_EQ(lr_factor(s, 99), 0.0);
  // The decay never eats into the warmup.
  auto tight = spec(ScheduleKind::wsd, 10, 8, 0.5, 0.5);
  EXPECT_DOUBLE_EQ(lr_factor(tight, 7), 8.0 / 9);
  EXPECT_DOUBLE_EQ(lr_factor(tight, 8), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(tight, 9), 0.5);
}

TEST(Schedule, OneStepRunsEntirelyAtMin) {
  EXPECT_DOUBLE_EQ(lr_factor(spec(ScheduleKind::cosine, 1, 0, 0.2), 0), 0.2);
  EXPECT_DOUBLE_EQ(lr_factor(spec(ScheduleKind::constant, 1, 0, 0.2), 0), 1.0);
}

TEST(Schedule, Errors) {
  EXPECT_THROW(lr_factor(spec(ScheduleKind::cosine, 10, 0), -1), ValueError);
  EXPECT_THROW(lr_factor(spec(ScheduleKind::cosine, 10, 11), 0), ValueError);
  EXPECT_THROW(lr_factor(spec(ScheduleKind::wsd, 10, 0, 0.0, 0.0), 5), ValueError);
  EXPECT_THROW(schedule_kind_from_name("step"), ValueError);
}

}  // namespace
}  // namespace hp::optim
