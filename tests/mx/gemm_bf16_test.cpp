// MX GEMM on the native bf16 path (bf16 panels, gemm_native.h) against the f32-decode path, its
// thread-count independence, and the f32 fallback for operands whose scales leave bf16's normal
// range. Runs where the CPU multiplies bf16 natively; elsewhere every test is skipped with the
// reason.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/kernels/cpu/gemm_native.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/mx/gemm.h"
#include "mx/gemm_test_util.h"

namespace hp::mx {
namespace {

using namespace test;
using kernels::Isa;

class MxGemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::native_bf16()) GTEST_SKIP() << "CPU has neither AVX512_BF16 nor AMX-BF16";
    if (!kernels::isa_supported(Isa::avx512)) GTEST_SKIP() << "CPU has no AVX-512";
    kernels::set_active_isa(Isa::avx512);
    // Native even where widening is the faster bf16 GEMM (bf16_compute_pays() false).
    kernels::detail::force_native_bf16_gemm(1);
  }
  void TearDown() override {
    kernels::detail::force_native_bf16_gemm(-1);
    kernels::reset_active_isa();
  }
};

// Every layout pair and element format, f32 and bf16 output with alpha/beta, several K chunks of
// the bf16 path (1024) and tiles: the bf16-panel result is within f32 rounding of the f32-panel
// one (the same exact products, summed in another order).
TEST_F(MxGemmBf16, MatchesF32DecodePath) {
  const int64_t M = 300, N = 210, K = 1100;
  for (MxLayout la : kLayouts)
    for (MxLayout lb : kLayouts)
      for (ElemFormat eb : {ElemFormat::e4m3, ElemFormat::e5m2}) {
        const Op a = make_op(randn(M * K, 1), M, K, ElemFormat::e4m3, la);
        const Op b = make_op(randn(N * K, 2), N, K, eb, lb);
        const MxOperand A = a.desc(ElemFormat::e4m3, la), B = b.desc(eb, lb);
        std::vector<double> ref, mag;
        ref_gemm(a.deq, b.deq, M, N, K, ref, mag);
        const std::vector<float> c0 = randn(M * N, 3);
        std::vector<uint16_t> c0_16(c0.size());
        for (size_t i = 0; i < c0.size(); ++i) c0_16[i] = f32_to_bf16(c0[i]);
        std::vector<float> out[2];
        std::vector<uint16_t> out16[2];
        for (int path = 0; path < 2; ++path) {  // 0: native bf16 panels, 1: f32 panels
          kernels::set_active_isa(path == 0 ? Isa::avx512 : Isa::avx2);
          ASSERT_EQ(mx_gemm_uses_bf16(A, B, M, N, K), path == 0);
          out[path] = c0;
          mx_gemm(A, B, M, N, K, out[path].data(), DType::f32, 1.5f, -0.5f);
          out16[path] = c0_16;
          mx_gemm(A, B, M, N, K, out16[path].data(), DType::bf16, 1.5f, -0.5f);
        }
        // Different kernels sum in different orders: identical bits would mean one path ran twice.
        EXPECT_NE(out[0], out[1]) << "la " << int(la) << " lb " << int(lb);
        for (size_t i = 0; i < ref.size(); ++i) {
          const double want = 1.5 * ref[i] - 0.5 * c0[i];
          ASSERT_NEAR(out[0][i], want, 2e-6 * mag[i] + 1e-6) << "la " << int(la) << " i " << i;
          ASSERT_NEAR(out[0][i], out[1][i], 2e-6 * mag[i] + 1e-6) << "la " << int(la) << " i " << i;
          const double b0 = bf16_to_f32(out16[0][i]), b1 = bf16_to_f32(out16[1][i]);
          ASSERT_NEAR(b0, b1, std::fabs(b1) / 128 + 2e-6 * mag[i] + 1e-6) << i;
        }
      }
}

// Same bits with 1 and 2 threads on the bf16 path: plain (several tiles) and grouped.
TEST_F(MxGemmBf16, BitwiseIdenticalAcrossThreadCounts) {
  const int64_t M = 700, N = 1300, K = 1100, G = 3;
  const Op a = make_op(randn(M * K, 4), M, K, ElemFormat::e4m3, MxLayout::rowwise_k);
  const Op b = make_op(randn(N * K, 5), N, K, ElemFormat::e4m3, MxLayout::colwise_k);
  const MxOperand A = a.desc(ElemFormat::e4m3, MxLayout::rowwise_k);
  const MxOperand B = b.desc(ElemFormat::e4m3, MxLayout::colwise_k);
  ASSERT_TRUE(mx_gemm_uses_bf16(A, B, M, N, K));
  // Grouped: G groups of rows of A against G weights [N / G, K] taken from b's first rows.
  const std::vector<int32_t> ends = {100, 450, 700};
  const Op w = make_op(randn(G * (N / G) * K, 6), G * (N / G), K, ElemFormat::e4m3,
                       MxLayout::rowwise_k);
  const MxOperand W = w.desc(ElemFormat::e4m3, MxLayout::rowwise_k);
  const int saved = num_threads();
  std::vector<float> plain[2], grouped[2];
  std::vector<uint16_t> plain16[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float>& p = plain[threads - 1];
    p.assign(size_t(M * N), 0.25f);
    mx_gemm(A, B, M, N, K, p.data(), DType::f32, 1.0f, 1.0f);
    plain16[threads - 1].assign(size_t(M * N), 0);
    mx_gemm(A, B, M, N, K, plain16[threads - 1].data(), DType::bf16);
    grouped[threads - 1].assign(size_t(M * (N / G)), 0.0f);
    mx_grouped_gemm(A, W, ends.data(), G, M, N / G, K, grouped[threads - 1].data(), DType::f32);
  }
  set_num_threads(saved);
  EXPECT_EQ(plain[0], plain[1]);
  EXPECT_EQ(plain16[0], plain16[1]);
  EXPECT_EQ(grouped[0], grouped[1]);
}

// An operand with scale byte 0 (2^-127) decodes to f32 subnormals, which AVX512_BF16 would
// flush: it takes the f32 path, and the result equals dequantize + f32 GEMM exactly (codes of
// magnitude <= 2^-6 · 1.875 and small-integer B keep every partial sum exact in f32).
TEST_F(MxGemmBf16, ExtremeScaleTakesExactF32Path) {
  const int64_t M = 40, N = 24, K = 96;
  std::vector<uint8_t> a_codes(size_t(M * K)), a_scales(size_t(M * (K / 32)), 0);
  for (size_t i = 0; i < a_codes.size(); ++i)
    a_codes[i] = uint8_t((i * 7 % 16) | (i % 3 == 0 ? 0x80 : 0));  // E4M3 exponent field 0 or 1
  std::vector<float> a_deq(a_codes.size());
  dequantize_rowwise(a_codes.data(), a_scales.data(), M, K, ElemFormat::e4m3, a_deq.data(),
                     DType::f32);
  const Op b = make_op(randn(N * K, 7, true), N, K, ElemFormat::e4m3, MxLayout::rowwise_k);
  const MxOperand A{a_codes.data(), a_scales.data(), ElemFormat::e4m3, MxLayout::rowwise_k};
  const MxOperand B = b.desc(ElemFormat::e4m3, MxLayout::rowwise_k);
  EXPECT_TRUE(mx_gemm_uses_bf16(B, B, N, N, K)) << "the normal operand alone stays on bf16";
  ASSERT_FALSE(mx_gemm_uses_bf16(A, B, M, N, K));
  std::vector<float> c(size_t(M * N)), want(size_t(M * N));
  mx_gemm(A, B, M, N, K, c.data(), DType::f32);
  kernels::gemm_f32(false, true, M, N, K, 1.0f, a_deq.data(), K, b.deq.data(), K, 0.0f,
                    want.data(), N);
  std::vector<double> ref, mag;
  ref_gemm(a_deq, b.deq, M, N, K, ref, mag);
  int subnormal = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(c[i], want[i]) << i;
    ASSERT_EQ(double(c[i]), ref[i]) << i;
    subnormal += c[i] != 0.0f && std::fpclassify(c[i]) == FP_SUBNORMAL;
  }
  EXPECT_GT(subnormal, 0) << "the case should produce f32 subnormals";
}

}  // namespace
}  // namespace hp::mx
