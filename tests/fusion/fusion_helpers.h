// Shared helpers of the fusion tests: ISA loops, bitwise and ULP comparisons, random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/fusion/fuse.h"
#include "hp/fusion/vjp.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/ops/ops.h"

namespace hp::fusion::testing {

inline std::string dname(DType dt) {
  return std::string(dtype_name(dt));
}

using kernels::Isa;

// Same shape, dtype and bytes (so -0 vs +0 and NaN payloads count).
inline void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor a = got.contiguous(), b = want.contiguous();
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  const size_t item = a.itemsize();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * item, pb + i * item, item) != 0)
      bad += 1, first = first < 0 ? i : first;
  EXPECT_EQ(bad, 0) << what << ": first mismatch at flat index " << first << " (got "
                    << (first >= 0 ? a.to_vector()[static_cast<size_t>(first)] : 0) << ", want "
                    << (first >= 0 ? b.to_vector()[static_cast<size_t>(first)] : 0) << ")";
}

inline void expect_all_bitwise(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    expect_bitwise(got[i], want[i], what + " output " + std::to_string(i));
}

inline double ulp_of(double r) {
  r = std::fabs(r);
  if (r < FLT_MIN) return std::ldexp(1.0, -149);
  int e;
  std::frexp(std::min(r, static_cast<double>(FLT_MAX)), &e);
  return std::ldexp(1.0, e - 24);
}

// |got - want| <= ulps · ulp(want) + abs_per_x · |x| elementwise (x: the input, for functions whose
// approximation error is absolute in x, as GELU's).
inline void expect_ulp(const Tensor& got, const Tensor& want, double ulps, const std::string& what,
                       const Tensor& x = Tensor(), double abs_per_x = 0) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector(), w = want.to_vector();
  const auto xv = x.defined() ? x.to_vector() : std::vector<double>(g.size(), 0.0);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i;
      continue;
    }
    const double err = std::fabs(g[i] - w[i]);
    const double allowed = ulps * ulp_of(w[i]) + abs_per_x * std::fabs(xv[i]);
    worst = std::max(worst, err / ulp_of(w[i]));
    ASSERT_LE(err, allowed) << what << " at " << i << ": got " << g[i] << " want " << w[i];
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

inline Tensor randn_t(const Shape& s, DType dt, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  return randn(s, DType::f32, 0.0, scale).to(dt);
}

// Collects the fallback log lines of one test.
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    set_log_sink([this](const std::string& l) { lines.push_back(l); });
  }
  ~LogCapture() { set_log_sink(nullptr); }
};

}  // namespace hp::fusion::testing
