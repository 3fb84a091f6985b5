#include "hp/kernels/cpu/grouped_gemm.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "hp/core/error.h"

namespace hp::kernels {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Groups of 3, 0 (empty), 5 and 1 rows.
const std::vector<int32_t> kEnds{3, 3, 8, 9};

TEST(GroupedGemm, ForwardMatchesPerGroupLoops) {
  std::mt19937 rng(1);
  const int64_t total = 9, n = 6, k = 7, g = 4;
  auto a = random_vec(total * k, rng);
  std::vector<std::vector<float>> w(g);
  std::vector<const float*> wp;
  for (auto& m : w) {
    m = random_vec(n * k, rng);  // [N, K]: a Linear weight
    wp.push_back(m.data());
  }
  for (bool trans_b : {true, false}) {
    std::vector<float> c(total * n, 1.0f);
    grouped_gemm_f32(trans_b, g, kEnds.data(), n, k, a.data(), k, wp.data(), trans_b ? k : n, 0.0f,
                     c.data(), n);
    int64_t begin = 0;
    for (int64_t q = 0; q < g; ++q) {
      for (int64_t r = begin; r < kEnds[q]; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t t = 0; t < k; ++t)
            want += a[r * k + t] * (trans_b ? w[q][j * k + t] : w[q][t * n + j]);
          EXPECT_NEAR(c[r * n + j], want, 1e-4);
        }
      begin = kEnds[q];
    }
  }
}

TEST(GroupedGemm, WgradReducesOverGroupRowsAndZeroesEmptyGroups) {
  std::mt19937 rng(2);
  const int64_t total = 9, m = 4, n = 5, g = 4;
  auto a = random_vec(total * m, rng), b = random_vec(total * n, rng);
  std::vector<std::vector<float>> c(g, std::vector<float>(m * n, 7.0f));
  std::vector<float*> cp;
  for (auto& x : c) cp.push_back(x.data());
  grouped_gemm_wgrad_f32(g, kEnds.data(), m, n, a.data(), m, b.data(), n, 0.0f, cp.data(), n);
  int64_t begin = 0;
  for (int64_t q = 0; q < g; ++q) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t r = begin; r < kEnds[q]; ++r) want += a[r * m + i] * b[r * n + j];
        EXPECT_NEAR(c[q][i * n + j], want, 1e-4);
      }
    begin = kEnds[q];
  }
}

TEST(GroupedGemm, RejectsDecreasingOffsets) {
  std::vector<int32_t> bad{3, 2};
  float a[4] = {}, c[4] = {};
  const float* w[2] = {a, a};
  EXPECT_THROW(grouped_gemm_f32(true, 2, bad.data(), 1, 1, a, 1, w, 1, 0.0f, c, 1), ValueError);
}

}  // namespace
}  // namespace hp::kernels
