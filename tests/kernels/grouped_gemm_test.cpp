#include "hp/kernels/cpu/grouped_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

// Once per ISA: the ISA picks the tile's sgemm library (gemm_plan.h sgemm_tile).
class GroupedGemm : public hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(GroupedGemm);

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Groups of 3, 0 (empty), 5 and 1 rows.
const std::vector<int32_t> kEnds{3, 3, 8, 9};

TEST_P(GroupedGemm, ForwardMatchesPerGroupLoops) {
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

TEST_P(GroupedGemm, WgradReducesOverGroupRowsAndZeroesEmptyGroups) {
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

TEST(GroupedGemmArgs, RejectsDecreasingOffsets) {
  std::vector<int32_t> bad{3, 2};
  float a[4] = {}, c[4] = {};
  const float* w[2] = {a, a};
  EXPECT_THROW(grouped_gemm_f32(true, 2, bad.data(), 1, 1, a, 1, w, 1, 0.0f, c, 1), ValueError);
}

// A group large enough to be cut into tiles (1100 rows: > 2^27 multiply-adds) beside whole-group
// tiles and an empty group, all scheduled as one list: the bits do not depend on the thread count,
// and every group equals its own gemm_f32 (within rounding: the tiles differ).
TEST_P(GroupedGemm, MixedTilingIsThreadInvariantAndMatchesPerGroupGemm) {
  std::mt19937 rng(3);
  const std::vector<int32_t> ends{0, 1100, 1105, 1235};
  const int64_t g = 4, total = 1235, n = 256, k = 512;
  const auto a = random_vec(size_t(total * k), rng), bw = random_vec(size_t(total * n), rng);
  std::vector<std::vector<float>> w(g);
  std::vector<const float*> wp;
  for (auto& m : w) {
    m = random_vec(size_t(n * k), rng);
    wp.push_back(m.data());
  }
  auto forward = [&] {
    std::vector<float> c(size_t(total * n));
    grouped_gemm_f32(true, g, ends.data(), n, k, a.data(), k, wp.data(), k, 0.0f, c.data(), n);
    return c;
  };
  auto wgrad = [&] {  // dW_g [k, n] = A_gᵀ · B_g over the group's rows
    std::vector<float> c(size_t(g * k * n), 7.0f);
    std::vector<float*> cp;
    for (int64_t q = 0; q < g; ++q) cp.push_back(c.data() + q * k * n);
    grouped_gemm_wgrad_f32(g, ends.data(), k, n, a.data(), k, bw.data(), n, 0.0f, cp.data(), n);
    return c;
  };
  set_num_threads(1);
  const auto f1 = forward(), w1 = wgrad();
  set_num_threads(2);
  const auto f2 = forward(), w2 = wgrad();
  EXPECT_EQ(f1, f2);
  EXPECT_EQ(w1, w2);
  int64_t begin = 0;
  for (int64_t q = 0; q < g; ++q) {
    const int64_t rows = ends[size_t(q)] - begin;
    std::vector<float> ref(size_t(std::max<int64_t>(rows, 1) * n)), ref_w(size_t(k * n), 0.0f);
    if (rows > 0) {
      gemm_f32(false, true, rows, n, k, 1.0f, a.data() + begin * k, k, wp[size_t(q)], k, 0.0f,
               ref.data(), n);
      gemm_f32(true, false, k, n, rows, 1.0f, a.data() + begin * k, k, bw.data() + begin * n, n,
               0.0f, ref_w.data(), n);
    }
    for (int64_t i = 0; i < rows * n; ++i)
      ASSERT_NEAR(f2[size_t(begin * n + i)], ref[size_t(i)], 1e-3 * (1 + std::fabs(ref[size_t(i)])));
    for (int64_t i = 0; i < k * n; ++i)  // empty group: zeros
      ASSERT_NEAR(w2[size_t(q * k * n + i)], ref_w[size_t(i)], 1e-3 * (1 + std::fabs(ref_w[size_t(i)])));
    begin = ends[size_t(q)];
  }
}

}  // namespace
}  // namespace hp::kernels
