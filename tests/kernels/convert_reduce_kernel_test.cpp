// The per-ISA bf16/f16 converters vs core's scalar ones (every 16-bit pattern, and f32 inputs with
// every rounding case and NaN), sum/max/dot vs double, and bitwise thread-count independence of
// the elementwise driver on a large non-contiguous broadcast case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/reduce.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

class ConvertKernels : public test::IsaTest {};
class ReduceKernels : public test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(ConvertKernels);
HP_INSTANTIATE_ISA_TESTS(ReduceKernels);

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_P(ConvertKernels, NarrowToF32AllPatterns) {
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  {
    const Isa isa = GetParam();
    const EwTable& tab = kernel_table<EwTable>();
    std::vector<float> b(65536), h(65536);
    tab.bf16_to_f32(in.data(), b.data(), 65536);
    tab.f16_to_f32(in.data(), h.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float wb = hp::bf16_to_f32(in[i]), wh = hp::f16_to_f32(in[i]);
      ASSERT_EQ(bits_of(b[i]), bits_of(wb)) << isa_name(isa) << " bf16 " << i;
      if (std::isnan(wh))
        ASSERT_TRUE(std::isnan(h[i])) << isa_name(isa) << " f16 " << i;
      else
        ASSERT_EQ(bits_of(h[i]), bits_of(wh)) << isa_name(isa) << " f16 " << i;
    }
  }
}

TEST_P(ConvertKernels, F32ToNarrowRoundsToNearestEven) {
  // Every upper half with low halves at the rounding edges (below, at and above the tie), plus
  // every f16 value and the midpoints next to it, plus random bits (NaNs included).
  std::vector<float> in;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      in.push_back(from_bits(hi << 16 | lo));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = hp::f16_to_f32(static_cast<uint16_t>(h));
    in.push_back(f);
    in.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    in.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
    const float g = hp::f16_to_f32(static_cast<uint16_t>(h + 1));
    if (std::isfinite(f) && std::isfinite(g)) in.push_back(static_cast<float>((double(f) + g) / 2));
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) in.push_back(from_bits(rng()));
  const int64_t n = static_cast<int64_t>(in.size());
  {
    const Isa isa = GetParam();
    const EwTable& tab = kernel_table<EwTable>();
    std::vector<uint16_t> b(in.size()), h(in.size());
    tab.f32_to_bf16(in.data(), b.data(), n);
    tab.f32_to_f16(in.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t wb = hp::f32_to_bf16(in[i]), wh = hp::f32_to_f16(in[i]);
      if (std::isnan(in[i])) {
        ASSERT_TRUE(std::isnan(hp::bf16_to_f32(b[i]))) << isa_name(isa) << " bf16 NaN " << i;
        ASSERT_TRUE(std::isnan(hp::f16_to_f32(h[i]))) << isa_name(isa) << " f16 NaN " << i;
        continue;
      }
      ASSERT_EQ(b[i], wb) << isa_name(isa) << " bf16 of " << in[i] << " bits " << bits_of(in[i]);
      ASSERT_EQ(h[i], wh) << isa_name(isa) << " f16 of " << in[i] << " bits " << bits_of(in[i]);
    }
  }
}

TEST_P(ReduceKernels, SumMaxDotVsDouble) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  {
    const Isa isa = GetParam();
    const EwTable& tab = kernel_table<EwTable>();
    for (int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 1000, 4097, 100003}) {
      std::vector<float> x(n), y(n);
      for (auto& v : x) v = d(rng);
      for (auto& v : y) v = d(rng);
      double s = 0, sa = 0, dot = 0, dota = 0;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        s += x[i], sa += std::fabs(x[i]), dot += double(x[i]) * y[i];
        dota += std::fabs(double(x[i]) * y[i]), mx = std::max(mx, x[i]);
      }
      // Fixed-order f32 accumulation: |error| <= n·2^-24·Σ|terms| (loose, tree order is better).
      const double eps = std::ldexp(1.0, -24) * static_cast<double>(n + 1);
      EXPECT_NEAR(tab.sum_f32(x.data(), n), s, eps * sa + 1e-30) << isa_name(isa) << " n=" << n;
      EXPECT_NEAR(tab.dot_f32(x.data(), y.data(), n), dot, eps * dota + 1e-30) << isa_name(isa);
      EXPECT_EQ(tab.max_f32(x.data(), n), mx) << isa_name(isa) << " n=" << n;
      if (n > 0) {
        x[n / 2] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_TRUE(std::isnan(tab.max_f32(x.data(), n))) << isa_name(isa) << " n=" << n;
        EXPECT_TRUE(std::isnan(tab.sum_f32(x.data(), n))) << isa_name(isa) << " n=" << n;
      }
    }
  }
}

// A non-contiguous, broadcasting case big enough to be split between threads: the bits of every
// result are the same with 1 and 2 threads (per op, per output dtype).
TEST(ElementwiseDriver, OneAndTwoThreadsGiveIdenticalBits) {
  const int saved = num_threads();
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> av(700 * 901), bv(901);
  for (auto& v : av) v = d(rng);
  for (auto& v : bv) v = d(rng);
  Tensor base = from_data(av, {700, 901});
  Tensor a = base.as_strided({901, 700}, {1, 901}, 0);  // transposed view [901, 700]
  Tensor b = from_data(bv, {901, 1});                   // broadcast along the last dim
  for (EwOp op : {EwOp::add, EwOp::mul, EwOp::silu_bwd, EwOp::gelu_bwd, EwOp::div}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      std::vector<std::vector<double>> res;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        res.push_back(elementwise(op, a, b, dt).to_vector());
      }
      ASSERT_EQ(res[0].size(), res[1].size());
      EXPECT_EQ(0, std::memcmp(res[0].data(), res[1].data(), res[0].size() * 8))
          << ew_name(op) << " " << dtype_name(dt);
    }
  }
  set_num_threads(saved);
}

// Reductions over a run of middle dims of a contiguous tensor (the broadcast backward's sum_to:
// [B, T, n, D] over n) go slab by slab without a transposing copy: sum/max/min equal the f64
// reference summed in index order, f64 inputs exactly, and the bits do not depend on the threads.
TEST(Reduce, MiddleDimRunMatchesReferenceAndIsThreadInvariant) {
  const int saved = num_threads();
  std::mt19937 rng(12);
  std::normal_distribution<double> d(0.0, 1.0);
  const Shape shape{3, 40, 4, 5, 300};  // reduced: the run {2, 3} (20 rows per slab)
  std::vector<double> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = from_vector(v, shape, dt);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      std::vector<std::vector<double>> res;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const Tensor r = reduce(op, a, {2, 3}, false, dt);
        ASSERT_EQ(r.shape(), (Shape{3, 40, 300}));
        res.push_back(r.to_vector());
      }
      EXPECT_EQ(res[0], res[1]);
      const std::vector<double> av = a.to_vector();  // the inputs as rounded to dt
      for (int64_t i = 0; i < 3 * 40; ++i)
        for (int64_t c = 0; c < 300; ++c) {
          double want = op == ReduceOp::sum ? 0.0 : av[size_t(i * 20 * 300 + c)];
          for (int64_t r = 0; r < 20; ++r) {
            const double x = av[size_t((i * 20 + r) * 300 + c)];
            want = op == ReduceOp::sum ? want + x : op == ReduceOp::max ? std::max(want, x)
                                                                          : std::min(want, x);
          }
          const double got = res[0][size_t(i * 300 + c)];
          if (dt == DType::f64 || op != ReduceOp::sum)
            ASSERT_EQ(got, want) << i << " " << c;
          else
            ASSERT_NEAR(got, want, 1e-5) << i << " " << c;
        }
    }
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace hp::kernels

namespace hp::kernels {
namespace {

TEST(Isa, NamesAndOverrides) {
  EXPECT_EQ(isa_from_name("avx2"), Isa::avx2);
  try {
    isa_from_name("neon");
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[isa] unknown ISA 'neon'"), std::string::npos)
        << e.what();
  }
  const Isa before = active_isa();
  set_active_isa(Isa::scalar);
  EXPECT_EQ(active_isa(), Isa::scalar);
  reset_active_isa();
  EXPECT_EQ(active_isa(), before);
}

}  // namespace
}  // namespace hp::kernels
