// Normwise-relative tensor comparison for tests of reordered float sums (sharded or distributed
// versions of one computation): max |a − b| <= rel · max |b|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "hp/ops/ops.h"

namespace hp::testing {

// max |a − b| <= rel · max(max |b|, floor). A floor of 1 covers values that are exactly zero in
// exact arithmetic, where both sides hold rounding noise of O(1) inputs.
inline void expect_close(const Tensor& a, const Tensor& b, double rel, const std::string& what,
                         double floor = 0) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto av = contiguous(a).to_vector(), bv = contiguous(b).to_vector();
  double scale = floor, worst = 0;
  for (double v : bv) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < av.size(); ++i) worst = std::max(worst, std::abs(av[i] - bv[i]));
  EXPECT_LE(worst, rel * scale) << what << " (max |b| " << scale << ")";
}

}  // namespace hp::testing
