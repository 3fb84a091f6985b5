// MX GEMM against "dequantize both operands, then multiply": every operand layout, partial blocks,
// several K chunks and tiles, bf16 output, alpha/beta, grouped forms, NaN blocks and bad arguments.
#include "hp/mx/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/mx/quantize.h"
#include "mx/gemm_test_util.h"

namespace hp::mx {
namespace {

using namespace test;

TEST(MxGemm, AllLayoutsMatchDequantizedProduct) {
  struct Shape3 {
    int64_t M, N, K;
  };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{37, 45, 70}, Shape3{200, 300, 1100}})
    for (MxLayout la : kLayouts)
      for (MxLayout lb : kLayouts) {
        const Op a = make_op(randn(s.M * s.K, 1), s.M, s.K, ElemFormat::e4m3, la);
        const Op b = make_op(randn(s.N * s.K, 2), s.N, s.K, ElemFormat::e5m2, lb);
        std::vector<float> c(size_t(s.M * s.N), NAN);  // beta == 0: C is never read
        mx_gemm(a.desc(ElemFormat::e4m3, la), b.desc(ElemFormat::e5m2, lb), s.M, s.N, s.K, c.data(),
                DType::f32);
        std::vector<double> ref, mag;
        ref_gemm(a.deq, b.deq, s.M, s.N, s.K, ref, mag);
        for (size_t i = 0; i < c.size(); ++i)
          ASSERT_NEAR(c[i], ref[i], 1e-6 * mag[i] + 1e-30)
              << "M=" << s.M << " N=" << s.N << " K=" << s.K << " la=" << int(la)
              << " lb=" << int(lb) << " i=" << i;
      }
}

TEST(MxGemm, ExactOnExactlyRepresentableInputs) {
  const int64_t M = 70, N = 90, K = 1060;
  for (MxLayout la : kLayouts)
    for (MxLayout lb : kLayouts) {
      const Op a = make_op(randn(M * K, 3, true), M, K, ElemFormat::e4m3, la);
      const Op b = make_op(randn(N * K, 4, true), N, K, ElemFormat::e4m3, lb);
      std::vector<float> c(size_t(M * N));
      mx_gemm(a.desc(ElemFormat::e4m3, la), b.desc(ElemFormat::e4m3, lb), M, N, K, c.data(),
              DType::f32);
      std::vector<double> ref, mag;
      ref_gemm(a.deq, b.deq, M, N, K, ref, mag);
      for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(double(c[i]), ref[i]) << i;
    }
}

TEST(MxGemm, Bf16OutputAlphaBetaAndThreadIndependence) {
  const int64_t M = 150, N = 260, K = 600;
  const Op a = make_op(randn(M * K, 5), M, K, ElemFormat::e4m3, MxLayout::colwise_k);
  const Op b = make_op(randn(N * K, 6), N, K, ElemFormat::e4m3, MxLayout::rowwise_k);
  const auto A = a.desc(ElemFormat::e4m3, MxLayout::colwise_k);
  const auto B = b.desc(ElemFormat::e4m3, MxLayout::rowwise_k);
  std::vector<double> ref, mag;
  ref_gemm(a.deq, b.deq, M, N, K, ref, mag);
  const std::vector<float> c0 = randn(M * N, 7);
  std::vector<float> c = c0;
  mx_gemm(A, B, M, N, K, c.data(), DType::f32, 2.0f, 0.5f);
  std::vector<uint16_t> cb(c0.size());
  for (size_t i = 0; i < c0.size(); ++i) cb[i] = f32_to_bf16(c0[i]);
  std::vector<uint16_t> cb_in = cb;
  mx_gemm(A, B, M, N, K, cb.data(), DType::bf16, 2.0f, 0.5f);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], 2.0 * ref[i] + 0.5 * c0[i], 2e-6 * mag[i] + 1e-6) << i;
    const double want = 2.0 * ref[i] + 0.5 * bf16_to_f32(cb_in[i]);
    ASSERT_NEAR(bf16_to_f32(cb[i]), want, 2e-6 * mag[i] + std::fabs(want) * 0.004 + 1e-6) << i;
  }
  const int saved = num_threads();
  std::vector<float> c1(size_t(M * N)), c2(size_t(M * N));
  set_num_threads(1);
  mx_gemm(A, B, M, N, K, c1.data(), DType::f32);
  set_num_threads(2);
  mx_gemm(A, B, M, N, K, c2.data(), DType::f32);
  set_num_threads(saved);
  EXPECT_EQ(c1, c2);
}

TEST(MxGemm, NanBlockPropagatesAndZeroK) {
  const int64_t M = 4, N = 3, K = 64;
  std::vector<float> x = randn(M * K, 8);
  x[size_t(1 * K + 40)] = NAN;  // row 1, second block
  const Op a = make_op(x, M, K, ElemFormat::e4m3, MxLayout::rowwise_k);
  const Op b = make_op(randn(N * K, 9), N, K, ElemFormat::e4m3, MxLayout::rowwise_k);
  std::vector<float> c(size_t(M * N));
  mx_gemm(a.desc(ElemFormat::e4m3, MxLayout::rowwise_k),
          b.desc(ElemFormat::e4m3, MxLayout::rowwise_k), M, N, K, c.data(), DType::f32);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) EXPECT_EQ(std::isnan(c[size_t(m * N + n)]), m == 1);
  std::vector<float> z(size_t(M * N), 3.0f);
  mx_gemm(a.desc(ElemFormat::e4m3, MxLayout::rowwise_k),
          b.desc(ElemFormat::e4m3, MxLayout::rowwise_k), M, N, 0, z.data(), DType::f32, 1.0f, 0.5f);
  for (float v : z) EXPECT_EQ(v, 1.5f);
}

TEST(MxGemm, GroupedPerExpertWeights) {
  const int64_t M = 100, N = 48, K = 70, G = 4;
  const std::vector<int32_t> ends = {5, 5, 70, 90};  // an empty group; rows 90.. untouched
  for (MxLayout lb : kLayouts) {
    const Op a = make_op(randn(M * K, 10), M, K, ElemFormat::e4m3, MxLayout::rowwise_k);
    std::vector<Op> bs;
    std::vector<uint8_t> bcodes, bscales;
    for (int64_t g = 0; g < G; ++g) {
      bs.push_back(make_op(randn(N * K, uint32_t(20 + g)), N, K, ElemFormat::e4m3, lb));
      bcodes.insert(bcodes.end(), bs.back().codes.begin(), bs.back().codes.end());
      bscales.insert(bscales.end(), bs.back().scales.begin(), bs.back().scales.end());
    }
    std::vector<float> c(size_t(M * N), 7.0f);
    mx_grouped_gemm(a.desc(ElemFormat::e4m3, MxLayout::rowwise_k),
                    MxOperand{bcodes.data(), bscales.data(), ElemFormat::e4m3, lb}, ends.data(), G,
                    M, N, K, c.data(), DType::f32);
    int64_t s = 0;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t mg = ends[size_t(g)] - s;
      std::vector<float> ag(a.deq.begin() + s * K, a.deq.begin() + (s + mg) * K);
      std::vector<double> ref, mag;
      ref_gemm(ag, bs[size_t(g)].deq, mg, N, K, ref, mag);
      for (int64_t i = 0; i < mg * N; ++i)
        ASSERT_NEAR(c[size_t(s * N + i)], ref[size_t(i)], 1e-6 * mag[size_t(i)]) << g;
      s = ends[size_t(g)];
    }
    for (int64_t i = 90 * N; i < M * N; ++i) ASSERT_EQ(c[size_t(i)], 7.0f);
  }
}

TEST(MxGemm, GroupedWgradAlongTokens) {
  const int64_t T = 120, M = 40, N = 72, G = 4;
  const std::vector<int32_t> ends = {33, 33, 100, 110};
  const QuantSpec spec{ElemFormat::e4m3, ScaleMode::rceil};
  const std::vector<float> dy = randn(T * M, 30), x = randn(T * N, 31);
  const int64_t S = grouped_colwise_scale_rows(ends.data(), G, T);
  std::vector<uint8_t> ac(size_t(T * M)), as(size_t(S * M)), bc(size_t(T * N)), bsc(size_t(S * N));
  quantize_grouped_colwise(dy.data(), DType::f32, T, M, ends.data(), G, spec, ac.data(), as.data());
  quantize_grouped_colwise(x.data(), DType::f32, T, N, ends.data(), G, spec, bc.data(), bsc.data());
  std::vector<float> dyq(size_t(T * M)), xq(size_t(T * N));
  dequantize_grouped_colwise(ac.data(), as.data(), T, M, ends.data(), G, ElemFormat::e4m3,
                             dyq.data(), DType::f32);
  dequantize_grouped_colwise(bc.data(), bsc.data(), T, N, ends.data(), G, ElemFormat::e4m3,
                             xq.data(), DType::f32);
  std::vector<float> c(size_t(G * M * N), NAN);
  mx_grouped_gemm_wgrad(MxOperand{ac.data(), as.data(), ElemFormat::e4m3, MxLayout::colwise_k},
                        MxOperand{bc.data(), bsc.data(), ElemFormat::e4m3, MxLayout::colwise_k},
                        ends.data(), G, T, M, N, c.data(), DType::f32);
  int64_t s = 0;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t t = s; t < ends[size_t(g)]; ++t) {
          const double p = double(dyq[size_t(t * M + m)]) * xq[size_t(t * N + n)];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(c[size_t((g * M + m) * N + n)], ref, 1e-6 * mag) << g;
      }
    s = ends[size_t(g)];
  }
}

TEST(MxGemm, BadArgumentsThrow) {
  std::vector<uint8_t> codes(64), scales(2);
  const MxOperand op{codes.data(), scales.data(), ElemFormat::e4m3, MxLayout::rowwise_k};
  std::vector<float> c(4);
  EXPECT_THROW(mx_gemm(op, op, -1, 2, 32, c.data(), DType::f32), ValueError);
  EXPECT_THROW(mx_gemm(op, op, 2, 2, 32, c.data(), DType::i32), ValueError);
  EXPECT_THROW(mx_gemm(MxOperand{}, op, 2, 2, 32, c.data(), DType::f32), ValueError);
  const std::vector<int32_t> bad = {2, 1};
  EXPECT_THROW(mx_grouped_gemm(op, op, bad.data(), 2, 2, 1, 32, c.data(), DType::f32), ValueError);
  const MxOperand col{codes.data(), scales.data(), ElemFormat::e4m3, MxLayout::colwise_k};
  EXPECT_THROW(mx_grouped_gemm(col, op, bad.data(), 1, 2, 1, 32, c.data(), DType::f32), ValueError);
  EXPECT_THROW(mx_grouped_gemm_wgrad(op, op, bad.data(), 1, 2, 1, 1, c.data(), DType::f32),
               ValueError);
}

}  // namespace
}  // namespace hp::mx
