#include <gtest/gtest.h>

#include "gradcheck.h"
#include "hp/core/thread_pool.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

// Naive f64 reference of a @ b for 2-D tensors.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> c(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += a.at({i, k}) * b.at({k, j});
  return c;
}

TEST(Matmul, GradientsWithBatchBroadcastAndTransposedOperands) {
  Tensor a = leaf({2, 3, 4}, 1), b = leaf({4, 5}, 2);
  expect_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  Tensor at = leaf({3, 4}, 3, /*transposed=*/true), bt = leaf({2, 4, 5}, 4, true);
  expect_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {at, bt});
  Tensor v = leaf({4}, 5);
  expect_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, v});
  expect_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[1], in[0]); }, {b, v});
  Tensor x = leaf({2, 3, 4}, 6), w = leaf({5, 4}, 7), bias = leaf({5}, 8);
  expect_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias});
}

TEST(Matmul, F32AndBf16AgainstReference) {
  manual_seed(1);
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 33, 65}, {64, 130, 31}}) {
    Tensor a = randn({M, K}), b = randn({K, N});
    std::vector<double> ref = ref_matmul(a, b);
    std::vector<double> got = matmul(a, b).to_vector();
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::fabs(ref[i])));
    // Transposed view operands give the same values.
    Tensor bt = transpose(randn({N, K}), 0, 1);
    std::vector<double> ref_t = ref_matmul(a, bt), got_t = matmul(a, bt).to_vector();
    for (size_t i = 0; i < ref_t.size(); ++i) ASSERT_NEAR(got_t[i], ref_t[i], 1e-4 * (1 + std::fabs(ref_t[i])));
    // bf16 inputs accumulate in f32 and round once: within one bf16 ulp of the f64 result of the
    // same (bf16-rounded) inputs.
    Tensor ab = a.to(DType::bf16), bb = b.to(DType::bf16);
    Tensor cb = matmul(ab, bb);
    EXPECT_EQ(cb.dtype(), DType::bf16);
    std::vector<double> refb = ref_matmul(ab, bb), gotb = cb.to_vector();
    for (size_t i = 0; i < refb.size(); ++i)
      ASSERT_NEAR(gotb[i], refb[i], std::fabs(refb[i]) * (1.0 / 128) + 1e-4) << i;
  }
}

TEST(Matmul, ShapeErrorsNameBothOperands) {
  try {
    matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[matmul]"), std::string::npos);
    EXPECT_NE(m.find("[2, 3] f32"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5] f32"), std::string::npos) << m;
  }
  EXPECT_THROW(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), ValueError);  // batch 2 vs 3
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 5})), ValueError);
  EXPECT_EQ(matmul(zeros({0, 3}), zeros({3, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 4})).to_vector(), std::vector<double>(8, 0.0));
}

TEST(Matmul, ThreadCountDoesNotChangeBits) {
  manual_seed(2);
  Tensor a = randn({3, 129, 257}), b = randn({257, 191});
  set_num_threads(1);
  std::vector<double> one = matmul(a, b).to_vector();
  set_num_threads(2);
  EXPECT_EQ(matmul(a, b).to_vector(), one);
}

// linear's own backward (dW = dYᵀ·X written as [out, in], dX = dY·W) against the composed
// matmul(x, wᵀ) + bias it replaced: equal within f32 rounding, and the bits do not depend on the
// thread count. Its weight gradient (linear_weight_grad) is produced contiguous [out, in], so
// AccumulateGrad keeps the buffer instead of copying a transposed view.
TEST(Linear, BackwardMatchesComposedMatmulContiguousAndThreadInvariant) {
  manual_seed(3);
  const Tensor x0 = randn({2, 150, 160}), w0 = randn({96, 160}), b0 = randn({96}),
               r = randn({2, 150, 96});
  struct Grads {
    std::vector<double> x, w, b;
  };
  auto run = [&](bool composed) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
    Tensor y = composed ? add(matmul(x, transpose(w, 0, 1)), b) : linear(x, w, b);
    sum(mul(y, r)).backward();
    return Grads{x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
  };
  set_num_threads(1);
  const Grads one = run(false);
  set_num_threads(2);
  const Grads two = run(false), old = run(true);
  const Tensor dw = linear_weight_grad(reshape(x0, {300, 160}), reshape(r, {300, 96}));
  EXPECT_EQ(dw.shape(), (Shape{96, 160}));
  EXPECT_TRUE(dw.is_contiguous());
  EXPECT_EQ(dw.to_vector(), one.w);  // what the backward accumulated, bit for bit
  EXPECT_EQ(two.x, one.x);
  EXPECT_EQ(two.w, one.w);
  EXPECT_EQ(two.b, one.b);
  auto expect_close = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
  };
  expect_close(two.x, old.x);
  expect_close(two.w, old.w);
  expect_close(two.b, old.b);
}

}  // namespace
}  // namespace hp
