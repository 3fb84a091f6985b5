// The native bf16 GEMM (oneDNN's AVX512_BF16 kernels per tile, gemm_native.h): against the double
// reference, against the widening path, and bitwise across thread counts. Runs where the CPU
// multiplies bf16 natively; elsewhere every test is skipped with the reason.
//
// Inputs are uniform in [-1, 1] rounded to bf16: no denormals, which AVX512_BF16 dot products
// flush to zero (the widening path keeps them), so both paths see the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/bf16_rate.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/kernels/cpu/gemm_native.h"
#include "hp/kernels/cpu/gemm_plan.h"
#include "hp/kernels/cpu/isa.h"
#include "kernels/gemm_test_util.h"

namespace hp::kernels {
namespace {

using namespace test;

class NativeBf16Gemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!native_bf16()) GTEST_SKIP() << "CPU has neither AVX512_BF16 nor AMX-BF16";
    if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "CPU has no AVX-512";
    set_active_isa(Isa::avx512);
    // Native even where widening is the faster bf16 GEMM (bf16_compute_pays() false).
    detail::force_native_bf16_gemm(1);
    ASSERT_TRUE(detail::native_bf16_gemm());
  }
  void TearDown() override {
    detail::force_native_bf16_gemm(-1);
    reset_active_isa();
  }
};

// cases() plus shapes that the plan cuts into several tiles, with edge tiles in M and N.
std::vector<Case> tiled_cases() {
  std::vector<Case> out = cases();
  for (int t = 0; t < 4; ++t) {
    out.push_back({300, 200, 64, bool(t & 1), bool(t & 2), 3});
    out.push_back({130, 1100, 40, bool(t & 1), bool(t & 2), 0});
  }
  return out;
}

struct Bf16Operands {
  std::vector<uint16_t> A16, B16, C16;
  std::vector<float> A, B, C;
  Bf16Operands(const Case& c, const Layout& l, uint32_t seed)
      : A16(to_bf16(random_vec(size_t(l.a_rows * l.lda), seed))),
        B16(to_bf16(random_vec(size_t(l.b_rows * l.ldb), seed + 1))),
        C16(to_bf16(random_vec(size_t(c.M * l.ldc), seed + 2))),
        A(from_bf16(A16)),
        B(from_bf16(B16)),
        C(from_bf16(C16)) {}
};

void run_bf16(const Case& c, const Layout& l, const Bf16Operands& o, float alpha, float beta,
              void* out, DType c_dtype) {
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, alpha, o.A16.data(), l.lda, o.B16.data(), l.ldb, beta, out,
            c_dtype, l.ldc);
}

TEST_F(NativeBf16Gemm, MatchesReferenceF32AndBf16Out) {
  for (const Case& c : tiled_cases()) {
    ASSERT_NE(detail::plan_tiles(c.M, c.N, c.K).count(), 0);
    const Layout l(c);
    const Bf16Operands o(c, l, 21);
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, 2.0f}}) {
      std::vector<double> ref, mag;
      reference(c, l, alpha, o.A.data(), o.B.data(), beta, o.C.data(), ref, mag);
      auto out32 = o.C;
      run_bf16(c, l, o, alpha, beta, out32.data(), DType::f32);
      auto out16 = o.C16;
      run_bf16(c, l, o, alpha, beta, out16.data(), DType::bf16);
      for (int64_t m = 0; m < c.M; ++m) {
        for (int64_t n = 0; n < c.N; ++n) {
          const size_t i = size_t(m * l.ldc + n);
          const double tol = f32_tol(mag[i], c.K);
          ASSERT_NEAR(out32[i], ref[i], tol) << name(c) << " at " << m << "," << n;
          // bf16 output: within one bf16 ulp of the correctly rounded reference.
          const float want = bf16_to_f32(f32_to_bf16(float(ref[i])));
          int exp = 0;
          std::frexp(want, &exp);
          ASSERT_LE(std::fabs(bf16_to_f32(out16[i]) - want), std::ldexp(1.0, exp - 8) + tol)
              << name(c) << " at " << m << "," << n;
        }
        for (int64_t n = c.N; n < l.ldc; ++n) {  // padding between rows is untouched
          ASSERT_EQ(out32[size_t(m * l.ldc + n)], o.C[size_t(m * l.ldc + n)]) << name(c);
          ASSERT_EQ(out16[size_t(m * l.ldc + n)], o.C16[size_t(m * l.ldc + n)]) << name(c);
        }
      }
    }
  }
}

// The native and widening paths compute the same sums in different orders: f32 rounding apart.
TEST_F(NativeBf16Gemm, MatchesWideningPath) {
  for (const Case& c : tiled_cases()) {
    const Layout l(c);
    const Bf16Operands o(c, l, 31);
    std::vector<double> ref, mag;
    reference(c, l, 1.5f, o.A.data(), o.B.data(), -1.0f, o.C.data(), ref, mag);
    auto native = o.C;
    run_bf16(c, l, o, 1.5f, -1.0f, native.data(), DType::f32);
    set_active_isa(Isa::avx2);
    ASSERT_FALSE(detail::native_bf16_gemm());
    auto widened = o.C;
    run_bf16(c, l, o, 1.5f, -1.0f, widened.data(), DType::f32);
    set_active_isa(Isa::avx512);
    for (size_t i = 0; i < native.size(); ++i)
      ASSERT_NEAR(native[i], widened[i], 2 * f32_tol(mag[i], c.K)) << name(c) << " at " << i;
  }
}

// Same bits with 1 and 2 threads: every transpose, f32 and bf16 output, beta 0 and 1, on a shape
// cut into several tiles with edge tiles in both directions.
TEST_F(NativeBf16Gemm, BitwiseIdenticalAcrossThreadCounts) {
  const int before = num_threads();
  for (int t = 0; t < 4; ++t) {
    const Case c{2100, 2100, 72, bool(t & 1), bool(t & 2), 0};
    const detail::TilePlan p = detail::plan_tiles(c.M, c.N, c.K);
    ASSERT_TRUE(p.grid_m > 1 && p.grid_n > 1 && c.M % p.tile_m != 0 && c.N % p.tile_n != 0);
    const Layout l(c);
    const Bf16Operands o(c, l, 41);
    for (DType dt : {DType::f32, DType::bf16})
      for (float beta : {0.0f, 1.0f}) {
        std::vector<std::vector<char>> outs;
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          std::vector<char> out(o.C.size() * dtype_size(dt));
          if (dt == DType::f32)
            std::memcpy(out.data(), o.C.data(), out.size());
          else
            std::memcpy(out.data(), o.C16.data(), out.size());
          run_bf16(c, l, o, 1.0f, beta, out.data(), dt);
          outs.push_back(std::move(out));
        }
        EXPECT_EQ(outs[0], outs[1]) << name(c) << " " << dtype_name(dt) << " beta " << beta;
      }
  }
  set_num_threads(before);
}

TEST_F(NativeBf16Gemm, BetaZeroIgnoresNaNInC) {
  const Case c{300, 200, 64, false, true};
  const Layout l(c);
  const Bf16Operands o(c, l, 51);
  std::vector<float> C(size_t(c.M * l.ldc), std::numeric_limits<float>::quiet_NaN());
  run_bf16(c, l, o, 1.0f, 0.0f, C.data(), DType::f32);
  for (float v : C) ASSERT_FALSE(std::isnan(v));
  std::vector<uint16_t> C16(C.size(), 0x7FC0);
  run_bf16(c, l, o, 1.0f, 0.0f, C16.data(), DType::bf16);
  for (uint16_t v : C16) ASSERT_FALSE(std::isnan(bf16_to_f32(v)));
}

// Batch strides, with stride_b = 0 broadcasting one B (attention-style shared operand).
TEST_F(NativeBf16Gemm, BatchedMatchesPerEntry) {
  const Case c{70, 90, 33, true, false, 2};
  const Layout l(c);
  const int64_t batch = 3, sa = l.a_rows * l.lda + 7, sc = c.M * l.ldc + 5;
  const auto A16 = to_bf16(random_vec(size_t(batch * sa), 61));
  const auto B16 = to_bf16(random_vec(size_t(l.b_rows * l.ldb), 62));
  const auto A = from_bf16(A16), B = from_bf16(B16);
  std::vector<float> out(size_t(batch * sc), 7.0f);
  gemm_bf16_batched(c.ta, c.tb, batch, c.M, c.N, c.K, 1.0f, A16.data(), l.lda, sa, B16.data(),
                    l.ldb, 0, 0.0f, out.data(), DType::f32, l.ldc, sc);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<double> ref, mag;
    reference(c, l, 1.0f, A.data() + i * sa, B.data(), 0.0f, nullptr, ref, mag);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t j = size_t(m * l.ldc + n);
        ASSERT_NEAR(out[size_t(i * sc) + j], ref[j], f32_tol(mag[j], c.K)) << "batch " << i;
      }
  }
}

// A repeated GEMM creates no primitives, and the kernel is a native one, not oneDNN's reference.
TEST_F(NativeBf16Gemm, CachesNativePrimitives) {
  const Case c{300, 1100, 520, false, true};
  const Layout l(c);
  const Bf16Operands o(c, l, 71);
  std::vector<float> out(o.C.size());
  run_bf16(c, l, o, 1.0f, 0.0f, out.data(), DType::f32);
  const int64_t cached = detail::bf16_tile_cache_size();
  EXPECT_GT(cached, 0);
  run_bf16(c, l, o, 1.0f, 0.0f, out.data(), DType::f32);
  EXPECT_EQ(detail::bf16_tile_cache_size(), cached);
  const detail::TilePlan p = detail::plan_tiles(c.M, c.N, c.K);
  const detail::Bf16Tile t{false, true, p.tile_m, p.tile_n, c.K,  l.lda,
                           l.ldb, l.ldc, DType::f32, 1.0f,   0.0f};
  const std::string impl = detail::bf16_tile_impl(t);
  EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
  EXPECT_EQ(detail::bf16_tile_cache_size(), cached) << "the tile's primitive was not cached";
  EXPECT_NE(isa_summary().find("oneDNN native"), std::string::npos) << isa_summary();
}

}  // namespace
}  // namespace hp::kernels

namespace hp::kernels {
namespace {

// The probe that decides whether native bf16 pays: 0 without AVX512_BF16, else a plausible flop
// ratio (measured ~0.5 on Emerald Rapids, ~2 where vdpbf16ps issues at the FMA's rate); the GEMM
// runs natively by default exactly where it pays, and the override switches only the speed test.
// HP_BF16_GEMM set to `value` (unset if null) for one test, whatever the suite runs under.
class Bf16GemmEnv {
 public:
  explicit Bf16GemmEnv(const char* value) {
    const char* env = std::getenv("HP_BF16_GEMM");
    had_ = env != nullptr;
    if (had_) saved_ = env;
    if (value)
      setenv("HP_BF16_GEMM", value, 1);
    else
      unsetenv("HP_BF16_GEMM");
  }
  ~Bf16GemmEnv() {
    if (had_)
      setenv("HP_BF16_GEMM", saved_.c_str(), 1);
    else
      unsetenv("HP_BF16_GEMM");
    detail::force_native_bf16_gemm(-1);
    reset_active_isa();
  }

 private:
  bool had_ = false;
  std::string saved_;
};

TEST(Bf16Probe, DecidesTheNativePath) {
  const Bf16GemmEnv env(nullptr);  // the CPU's own choice
  detail::force_native_bf16_gemm(-1);
  const double rate = measure_bf16_dot_rate();
  if (!__builtin_cpu_supports("avx512bf16")) {
    EXPECT_EQ(rate, 0.0);
    EXPECT_FALSE(bf16_compute_pays());
  } else {
    EXPECT_GT(rate, 0.1);
    EXPECT_LT(rate, 8.0);
  }
  if (!native_bf16()) {
    EXPECT_FALSE(bf16_compute_pays());
  }
  // The CPU decides, not the probe: the same answer under any load.
  EXPECT_EQ(bf16_compute_pays(), native_bf16() && (__builtin_cpu_supports("amx-bf16") ||
                                                   __builtin_cpu_is("amd")));
  const bool hw = native_bf16() && isa_supported(Isa::avx512);
  if (hw) set_active_isa(Isa::avx512);
  EXPECT_EQ(detail::native_bf16_gemm(), hw && bf16_compute_pays()) << isa_summary();
  detail::force_native_bf16_gemm(0);
  EXPECT_FALSE(detail::native_bf16_gemm());
  detail::force_native_bf16_gemm(1);
  EXPECT_EQ(detail::native_bf16_gemm(), hw);
}

TEST(Bf16Probe, BadOverrideNamesTheVariable) {
  const Bf16GemmEnv env("fast");
  try {
    detail::force_native_bf16_gemm(-1);
    ADD_FAILURE() << "HP_BF16_GEMM=fast was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("HP_BF16_GEMM='fast'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hp::kernels
