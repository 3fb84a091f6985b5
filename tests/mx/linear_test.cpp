// mx_linear and mx_grouped_experts against the f32 path: within the MX quantization error on random
// normal data (relative Frobenius error, printed), and exactly on exactly representable data.
#include "hp/mx/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "hp/core/error.h"
#include "hp/ops/ops.h"

namespace hp::mx {
namespace {

// Normal values, or (exact) small ints in [-7, 7] times 2^(row % 5 - 2): every such value is
// exactly representable in E4M3 after its block's rceil scale along either axis, and all products
// and sums of the test shapes stay exact in f32.
std::vector<double> values(int64_t rows, int64_t cols, uint32_t seed, bool exact) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_int_distribution<int> id(-7, 7);
  std::vector<double> v(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[size_t(r * cols + c)] = exact ? std::ldexp(double(id(rng)), int(r % 5) - 2) : nd(rng);
  return v;
}

Tensor make(const Shape& shape, uint32_t seed, bool exact, DType dt = DType::f32) {
  const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
  return from_vector(values(rows, cols, seed, exact), shape, dt);
}

double rel_err(const Tensor& got, const Tensor& want) {
  const auto g = got.to_vector(), w = want.to_vector();
  EXPECT_EQ(g.size(), w.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return std::sqrt(num / den);
}

struct LinearRun {
  Tensor y, dx, dw, db;
};

// Forward + backward with upstream gradient g; mx = false runs ops::linear on the same leaves.
LinearRun run_linear(bool mx, const Tensor& x0, const Tensor& w0, const Tensor& b0,
                     const Tensor& g) {
  Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  Tensor y = mx ? mx_linear(x, w, b) : linear(x, w, b);
  y.backward(g);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

TEST(MxLinear, MatchesF32LinearWithinQuantizationError) {
  const Tensor x = make({3, 50, 96}, 1, false), w = make({80, 96}, 2, false),
               b = make({1, 80}, 3, false).to(DType::f32), g = make({3, 50, 80}, 4, false);
  const Tensor bias = reshape(b, {80});
  const LinearRun m = run_linear(true, x, w, bias, g), r = run_linear(false, x, w, bias, g);
  const double ey = rel_err(m.y, r.y), edx = rel_err(m.dx, r.dx), edw = rel_err(m.dw, r.dw);
  std::printf("mx_linear e4m3/rceil rel Frobenius error: y %.4f dx %.4f dw %.4f\n", ey, edx, edw);
  EXPECT_LT(ey, 0.06);
  EXPECT_LT(edx, 0.06);
  EXPECT_LT(edw, 0.06);
  EXPECT_LT(rel_err(m.db, r.db), 1e-6);  // the bias gradient is not quantized
  EXPECT_EQ(m.dx.shape(), x.shape());
}

TEST(MxLinear, ExactOnRepresentableInputs) {
  const Tensor x = make({70, 64}, 5, true), w = make({40, 64}, 6, true),
               b = reshape(make({1, 40}, 7, true), {40}), g = make({70, 40}, 8, true);
  const LinearRun m = run_linear(true, x, w, b, g), r = run_linear(false, x, w, b, g);
  EXPECT_EQ(m.y.to_vector(), r.y.to_vector());
  EXPECT_EQ(m.dx.to_vector(), r.dx.to_vector());
  EXPECT_EQ(m.dw.to_vector(), r.dw.to_vector());
  EXPECT_EQ(m.db.to_vector(), r.db.to_vector());
}

TEST(MxLinear, Bf16InputsNoBiasAndFrozenWeight) {
  const Tensor x = make({64, 128}, 9, false, DType::bf16), w = make({96, 128}, 10, false);
  const Tensor g = make({64, 96}, 11, false, DType::bf16);
  Tensor xl = x.clone();
  xl.requires_grad_();
  Tensor y = mx_linear(xl, w);  // weight does not require grad: no X column-wise is kept
  EXPECT_EQ(y.dtype(), DType::bf16);
  y.backward(g);
  ASSERT_TRUE(xl.grad().defined());
  EXPECT_EQ(xl.grad().dtype(), DType::bf16);
  const Tensor xf = x.to(DType::f32);
  EXPECT_LT(rel_err(y, linear(xf, w)), 0.06);
  EXPECT_LT(rel_err(xl.grad(), matmul(g.to(DType::f32), w)), 0.06);
}

TEST(MxLinear, BadShapesThrow) {
  EXPECT_THROW(mx_linear(zeros({2, 3}), zeros({4, 5})), ValueError);
  EXPECT_THROW(mx_linear(zeros({2, 5}), zeros({4, 5}), zeros({3})), ValueError);
  EXPECT_THROW(mx_linear(zeros({2, 5}, DType::i32), zeros({4, 5})), ValueError);
}

// Reference for the experts: per group, y_g = x_g·w_gᵀ, dx_g = g_g·w_g, dw_g = g_gᵀ·x_g (f32 ops).
struct ExpertsRun {
  Tensor y, dx, dw;
};

ExpertsRun run_experts(bool mx, const Tensor& x0, const std::vector<int32_t>& ends,
                       const Tensor& w0, const Tensor& g) {
  Tensor x = x0.clone(), w = w0.clone();
  x.requires_grad_();
  w.requires_grad_();
  const int64_t T = x.size(0), E = w.size(0);
  if (mx) {
    Tensor y = mx_grouped_experts(x, from_data(ends, {E}), w);
    y.backward(g);
    return {y.detach(), x.grad(), w.grad()};
  }
  Tensor loss = zeros({});
  std::vector<double> yv(size_t(T * w.size(1)), 0.0);
  int64_t s = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = ends[size_t(e)] - s;
    if (n > 0) {
      Tensor yg = linear(narrow(x, 0, s, n), select(w, 0, e));
      loss = loss + sum(yg * narrow(g, 0, s, n));
      const auto v = yg.to_vector();
      std::copy(v.begin(), v.end(), yv.begin() + s * w.size(1));
    }
    s = ends[size_t(e)];
  }
  loss.backward();
  Tensor dx = x.grad().defined() ? x.grad() : zeros(x.shape());
  Tensor dw = w.grad().defined() ? w.grad() : zeros(w.shape());
  return {from_vector(yv, {T, w.size(1)}), dx, dw};
}

TEST(MxGroupedExperts, MatchesPerGroupLoop) {
  const std::vector<int32_t> ends = {10, 10, 70, 95};  // an empty expert; rows 95.. in no group
  for (bool exact : {false, true}) {
    const Tensor x = make({100, 64}, 12, exact), w = make({4, 48, 64}, 13, exact),
                 g = make({100, 48}, 14, exact);
    const ExpertsRun m = run_experts(true, x, ends, w, g), r = run_experts(false, x, ends, w, g);
    if (exact) {
      EXPECT_EQ(m.y.to_vector(), r.y.to_vector());
      EXPECT_EQ(m.dx.to_vector(), r.dx.to_vector());
      EXPECT_EQ(m.dw.to_vector(), r.dw.to_vector());
    } else {
      const double ey = rel_err(m.y, r.y), edx = rel_err(m.dx, r.dx), edw = rel_err(m.dw, r.dw);
      std::printf("mx_grouped_experts rel Frobenius error: y %.4f dx %.4f dw %.4f\n", ey, edx, edw);
      EXPECT_LT(ey, 0.06);
      EXPECT_LT(edx, 0.06);
      EXPECT_LT(edw, 0.06);
    }
  }
}

TEST(MxGroupedExperts, BadArgumentsThrow) {
  const Tensor x = zeros({8, 32}), w = zeros({2, 16, 32});
  EXPECT_THROW(mx_grouped_experts(x, from_data(std::vector<int32_t>{4}, {1}), w), ValueError);
  EXPECT_THROW(mx_grouped_experts(x, from_data(std::vector<int32_t>{5, 4}, {2}), w), ValueError);
  EXPECT_THROW(mx_grouped_experts(x, from_data(std::vector<int32_t>{4, 9}, {2}), w), ValueError);
  EXPECT_THROW(mx_grouped_experts(zeros({8, 31}), from_data(std::vector<int32_t>{4, 8}, {2}), w),
               ValueError);
}

}  // namespace
}  // namespace hp::mx
