#include "hp/kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_plan.h"
#include "isa_test.h"
#include "kernels/gemm_test_util.h"

namespace hp::kernels {
namespace {

using namespace test;

// Every f32 / widened-bf16 test runs once per ISA: the ISA picks the tile's sgemm library
// (OpenBLAS on AVX2, oneDNN's sgemm on AVX-512, gemm_plan.h sgemm_tile).
class Gemm : public hp::test::IsaTest {};
HP_INSTANTIATE_ISA_TESTS(Gemm);

TEST_P(Gemm, F32MatchesReference) {
  for (const Case& c : cases()) {
    const Layout l(c);
    auto A = random_vec(size_t(l.a_rows * l.lda), 1);
    auto B = random_vec(size_t(l.b_rows * l.ldb), 2);
    auto C = random_vec(size_t(c.M * l.ldc), 3);
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{1.5f, -0.5f}}) {
      std::vector<double> ref, mag;
      reference(c, l, alpha, A.data(), B.data(), beta, C.data(), ref, mag);
      auto out = C;
      gemm_f32(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), l.lda, B.data(), l.ldb, beta, out.data(),
               l.ldc);
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          const size_t i = size_t(m * l.ldc + n);
          ASSERT_NEAR(out[i], ref[i], f32_tol(mag[i], c.K)) << name(c) << " at " << m << "," << n;
        }
      for (int64_t m = 0; m < c.M; ++m)  // padding between rows is untouched
        for (int64_t n = c.N; n < l.ldc; ++n)
          ASSERT_EQ(out[size_t(m * l.ldc + n)], C[size_t(m * l.ldc + n)]) << name(c);
    }
  }
}

TEST_P(Gemm, Bf16MatchesReferenceF32AndBf16Out) {
  for (const Case& c : cases()) {
    const Layout l(c);
    auto A16 = to_bf16(random_vec(size_t(l.a_rows * l.lda), 4));
    auto B16 = to_bf16(random_vec(size_t(l.b_rows * l.ldb), 5));
    auto C16 = to_bf16(random_vec(size_t(c.M * l.ldc), 6));
    const auto A = from_bf16(A16), B = from_bf16(B16), C = from_bf16(C16);
    const float alpha = 0.75f, beta = 2.0f;
    std::vector<double> ref, mag;
    reference(c, l, alpha, A.data(), B.data(), beta, C.data(), ref, mag);

    auto out32 = C;
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, alpha, A16.data(), l.lda, B16.data(), l.ldb, beta,
              out32.data(), DType::f32, l.ldc);
    auto out16 = C16;
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, alpha, A16.data(), l.lda, B16.data(), l.ldb, beta,
              out16.data(), DType::bf16, l.ldc);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t i = size_t(m * l.ldc + n);
        const double tol = f32_tol(mag[i], c.K);
        ASSERT_NEAR(out32[i], ref[i], tol) << name(c);
        // bf16 output: within one bf16 ulp of the correctly rounded reference.
        const float want = bf16_to_f32(f32_to_bf16(float(ref[i])));
        int exp = 0;
        std::frexp(want, &exp);
        const double ulp = std::ldexp(1.0, exp - 8);
        ASSERT_LE(std::fabs(bf16_to_f32(out16[i]) - want), ulp + tol) << name(c);
      }
  }
}

// K longer than one widening chunk: the bf16 path accumulates chunk by chunk.
TEST_P(Gemm, Bf16SeveralKChunks) {
  for (int t = 0; t < 4; ++t) {
    const Case c{9, 17, 2100, bool(t & 1), bool(t & 2), 1};
    const Layout l(c);
    auto A16 = to_bf16(random_vec(size_t(l.a_rows * l.lda), 14));
    auto B16 = to_bf16(random_vec(size_t(l.b_rows * l.ldb), 15));
    const auto A = from_bf16(A16), B = from_bf16(B16);
    auto C = random_vec(size_t(c.M * l.ldc), 16);
    std::vector<double> ref, mag;
    reference(c, l, 1.0f, A.data(), B.data(), -1.0f, C.data(), ref, mag);
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A16.data(), l.lda, B16.data(), l.ldb, -1.0f,
              C.data(), DType::f32, l.ldc);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t i = size_t(m * l.ldc + n);
        ASSERT_NEAR(C[i], ref[i], f32_tol(mag[i], c.K)) << name(c);
      }
  }
}

TEST_P(Gemm, BetaZeroIgnoresNaNInC) {
  const Case c{33, 65, 130, false, true};
  const Layout l(c);
  auto A = random_vec(size_t(l.a_rows * l.lda), 7);
  auto B = random_vec(size_t(l.b_rows * l.ldb), 8);
  std::vector<float> C(size_t(c.M * l.ldc), std::numeric_limits<float>::quiet_NaN());
  gemm_f32(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), l.lda, B.data(), l.ldb, 0.0f, C.data(),
           l.ldc);
  for (float v : C) ASSERT_FALSE(std::isnan(v));
  std::vector<uint16_t> C16(C.size(), 0x7FC0);
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 1.0f, to_bf16(A).data(), l.lda, to_bf16(B).data(), l.ldb,
            0.0f, C16.data(), DType::bf16, l.ldc);
  for (uint16_t v : C16) ASSERT_FALSE(std::isnan(bf16_to_f32(v)));
}

TEST_P(Gemm, KZeroScalesC) {
  std::vector<float> C = {1, -2, 3, 4, 5, 6};
  gemm_f32(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{0.5f, -1, 1.5f, 2, 2.5f, 3}));
  std::vector<uint16_t> C16 = to_bf16({1, -2, 3, 4, 5, 6});
  gemm_bf16(true, true, 2, 3, 0, 1.0f, nullptr, 2, nullptr, 1, -2.0f, C16.data(), DType::bf16, 3);
  EXPECT_EQ(from_bf16(C16), (std::vector<float>{-2, 4, -6, -8, -10, -12}));
  std::vector<float> nan_c(6, std::numeric_limits<float>::quiet_NaN());
  gemm_f32(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.0f, nan_c.data(), 3);
  EXPECT_EQ(nan_c, std::vector<float>(6, 0.0f));
  gemm_f32(false, false, 0, 3, 4, 1.0f, nullptr, 4, nullptr, 3, 0.0f, nullptr, 3);  // M = 0
}

TEST_P(Gemm, BatchedMatchesPerEntry) {
  const Case c{17, 40, 70, true, false, 3};
  const Layout l(c);
  const int64_t batch = 3;
  const int64_t sa = l.a_rows * l.lda + 11, sb = l.b_rows * l.ldb + 2, sc = c.M * l.ldc + 5;
  auto A = random_vec(size_t(batch * sa), 9);
  auto B = random_vec(size_t(batch * sb), 10);
  auto C = random_vec(size_t(batch * sc), 11);
  auto A16 = to_bf16(A), B16 = to_bf16(B);
  const auto Ab = from_bf16(A16), Bb = from_bf16(B16);
  auto out = C;
  gemm_f32_batched(c.ta, c.tb, batch, c.M, c.N, c.K, 1.25f, A.data(), l.lda, sa, B.data(), l.ldb,
                   sb, 0.5f, out.data(), l.ldc, sc);
  std::vector<uint16_t> out16(C.size());
  // stride_b = 0 broadcasts one B to every batch entry (attention-style shared operand).
  gemm_bf16_batched(c.ta, c.tb, batch, c.M, c.N, c.K, 1.0f, A16.data(), l.lda, sa, B16.data(),
                    l.ldb, 0, 0.0f, out16.data(), DType::bf16, l.ldc, sc);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<double> ref, mag, ref16, mag16;
    reference(c, l, 1.25f, A.data() + i * sa, B.data() + i * sb, 0.5f, C.data() + i * sc, ref, mag);
    reference(c, l, 1.0f, Ab.data() + i * sa, Bb.data(), 0.0f, nullptr, ref16, mag16);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t j = size_t(m * l.ldc + n);
        ASSERT_NEAR(out[size_t(i * sc) + j], ref[j], f32_tol(mag[j], c.K)) << "batch " << i;
        ASSERT_NEAR(bf16_to_f32(out16[size_t(i * sc) + j]), ref16[j],
                    std::fabs(ref16[j]) / 128 + f32_tol(mag16[j], c.K))
            << "batch " << i;
      }
  }
}

// Results must not depend on the thread count: same bits with 1 and 2 threads, on a shape that
// is cut into several tiles and (bf16) several K chunks.
TEST_P(Gemm, BitwiseIdenticalAcrossThreadCounts) {
  const int64_t M = 300, N = 1100, K = 1300;
  ASSERT_GT(detail::plan_tiles(M, N, K).count(), 1);
  auto A = random_vec(size_t(M * K), 12);
  auto B = random_vec(size_t(K * N), 13);
  auto A16 = to_bf16(A), B16 = to_bf16(B);
  auto run = [&](int threads, std::vector<float>& c32, std::vector<uint16_t>& c16) {
    set_num_threads(threads);
    c32.assign(size_t(M * N), 0.0f);
    c16.assign(size_t(M * N), 0);
    gemm_f32(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, c32.data(), N);
    gemm_bf16(false, false, M, N, K, 1.0f, A16.data(), K, B16.data(), N, 0.0f, c16.data(),
              DType::bf16, N);
  };
  const int before = num_threads();
  std::vector<float> c1, c2;
  std::vector<uint16_t> h1, h2;
  run(1, c1, h1);
  run(2, c2, h2);
  set_num_threads(before);
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)));
  EXPECT_EQ(h1, h2);
}

template <class Fn>
void expect_value_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no ValueError, expected one mentioning '" << needle << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[gemm]", 0), 0u) << e.what();
  }
}

TEST(GemmArgs, RejectsBadArguments) {
  std::vector<float> buf(64);
  float* p = buf.data();
  expect_value_error([&] { gemm_f32(false, false, -1, 2, 2, 1, p, 2, p, 2, 0, p, 2); }, "M=-1");
  expect_value_error([&] { gemm_f32(false, false, 2, 2, -3, 1, p, 2, p, 2, 0, p, 2); }, "K=-3");
  expect_value_error([&] { gemm_f32(false, false, 4, 4, 4, 1, p, 3, p, 4, 0, p, 4); }, "lda=3");
  expect_value_error([&] { gemm_f32(true, false, 5, 5, 3, 1, p, 4, p, 5, 0, p, 5); }, "lda=4");
  expect_value_error([&] { gemm_f32(false, true, 4, 4, 6, 1, p, 6, p, 4, 0, p, 4); }, "ldb=4");
  expect_value_error([&] { gemm_f32(false, false, 2, 5, 2, 1, p, 2, p, 5, 0, p, 4); }, "ldc=4");
  expect_value_error([&] { gemm_f32(false, false, 2, 2, 2, 1, p, 2, p, 2, 0, nullptr, 2); },
                     "C is null");
  expect_value_error(
      [&] { gemm_f32_batched(false, false, 2, 2, 2, 2, 1, p, 2, 4, p, 2, 4, 0, p, 2, 3); },
      "stride_c=3");
  auto* q = reinterpret_cast<uint16_t*>(p);
  expect_value_error([&] { gemm_bf16(false, false, 2, 2, 2, 1, q, 2, q, 2, 0, p, DType::f16, 2); },
                     "f16");
  expect_value_error([] { gemm_peak_gflops(DType::i32); }, "i32");
}

}  // namespace
}  // namespace hp::kernels
