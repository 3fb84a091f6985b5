// Stage cuts (pipeline/stage.h): the balanced cut weighs the embedding and head, not layer count.
#include "hp/pipeline/stage.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace hp::pipeline {
namespace {

TEST(StageCut, EqualLayersWithoutExtrasSplitEvenly) {
  EXPECT_EQ(balanced_cut({1, 1, 1, 1}, 0, 0, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(balanced_cut({1, 1, 1, 1, 1, 1}, 0, 0, 3), (std::vector<int64_t>{2, 2, 2}));
  // Uneven: earlier stages take the extra layer.
  EXPECT_EQ(balanced_cut({1, 1, 1, 1, 1}, 0, 0, 2), (std::vector<int64_t>{3, 2}));
}

TEST(StageCut, AHeavyHeadMovesLayersToEarlierStages) {
  // 8 layers of cost 1, a head worth 2 layers: [4, 4] costs max 6; [5, 3] costs max 5.
  EXPECT_EQ(balanced_cut(std::vector<double>(8, 1.0), 0, 2, 2), (std::vector<int64_t>{5, 3}));
  // A heavy embedding and head on 4 stages of 8 layers: the middle stages take more layers.
  EXPECT_EQ(balanced_cut(std::vector<double>(8, 1.0), 1, 2, 4), (std::vector<int64_t>{2, 3, 2, 1}));
  // The most expensive stage is the least possible (brute force over 3-way cuts of 7 layers).
  const std::vector<double> c = {3, 1, 4, 1, 5, 9, 2};
  const auto cut = balanced_cut(c, 2, 6, 3);
  auto worst = [&](int64_t a, int64_t b) {
    double s0 = 2, s1 = 0, s2 = 6;
    for (int64_t i = 0; i < 7; ++i) (i < a ? s0 : i < b ? s1 : s2) += c[size_t(i)];
    return std::max({s0, s1, s2});
  };
  double best = 1e9;
  for (int64_t a = 1; a < 6; ++a)
    for (int64_t b = a + 1; b < 7; ++b) best = std::min(best, worst(a, b));
  EXPECT_EQ(worst(cut[0], cut[0] + cut[1]), best);
  EXPECT_EQ(cut[0] + cut[1] + cut[2], 7);
}

TEST(StageCut, RangesAndErrors) {
  EXPECT_EQ(stage_ranges({2, 3, 1}),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 5}, {5, 6}}));
  EXPECT_EQ(hp::testing::error_of([] {
              balanced_cut({1, 1}, 0, 0, 3);
            }),
            "[pipeline] 2 layers cannot be cut into 3 stages of at least one layer each");
}

}  // namespace
}  // namespace hp::pipeline
