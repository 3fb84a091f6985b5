// softmax, log_softmax, logsumexp, max, topk and cross_entropy: gradients against f64 finite
// differences, values against double references, errors, and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gradcheck.h"
#include "hp/core/thread_pool.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

using V = std::vector<Tensor>;

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Runs fn with n threads, restoring the previous count.
template <class Fn>
auto with_threads(int n, Fn fn) {
  const int prev = num_threads();
  set_num_threads(n);
  auto r = fn();
  set_num_threads(prev);
  return r;
}

TEST(Softmax, Gradients) {
  for (bool tr : {false, true}) {
    SCOPED_TRACE(tr ? "transposed" : "contiguous");
    Tensor x = leaf({3, 4, 5}, 11, tr);
    expect_gradcheck([](const V& in) { return softmax(in[0], -1); }, {x});
    expect_gradcheck([](const V& in) { return softmax(in[0], 0); }, {x});
    expect_gradcheck([](const V& in) { return softmax(in[0], 1); }, {x});
    expect_gradcheck([](const V& in) { return log_softmax(in[0], -1); }, {x});
    expect_gradcheck([](const V& in) { return log_softmax(in[0], 1); }, {x});
    expect_gradcheck([](const V& in) { return logsumexp(in[0], {-1}); }, {x});
    expect_gradcheck([](const V& in) { return logsumexp(in[0], {0, 2}, true); }, {x});
    expect_gradcheck([](const V& in) { return logsumexp(in[0], {}); }, {x});
  }
}

// Double reference of softmax / log_softmax / logsumexp rows.
void reference_rows(const std::vector<double>& x, int64_t rows, int64_t n, std::vector<double>* sm,
                    std::vector<double>* lsm, std::vector<double>* lse) {
  sm->resize(x.size()), lsm->resize(x.size()), lse->resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[r * n + j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j] - m);
    (*lse)[r] = m + std::log(s);
    for (int64_t j = 0; j < n; ++j) {
      (*sm)[r * n + j] = std::exp(x[r * n + j] - m) / s;
      (*lsm)[r * n + j] = x[r * n + j] - (*lse)[r];
    }
  }
}

TEST(Softmax, ValuesAgainstDoubleReference) {
  manual_seed(3);
  // 37 rows of 131: rows end in a partial vector, so the padded tails are exercised.
  Tensor x = mul(randn({37, 131}), 4.0);
  std::vector<double> sm, lsm, lse;
  reference_rows(x.to_vector(), 37, 131, &sm, &lsm, &lse);
  const auto y = softmax(x, 1).to_vector(), ly = log_softmax(x, -1).to_vector();
  const auto l = logsumexp(x, {1}).to_vector();
  for (size_t i = 0; i < sm.size(); ++i) {
    ASSERT_NEAR(y[i], sm[i], 1e-6 * sm[i] + 1e-9) << i;
    ASSERT_NEAR(ly[i], lsm[i], 2e-5) << i;
  }
  for (size_t r = 0; r < lse.size(); ++r) ASSERT_NEAR(l[r], lse[r], 2e-5);
  // Another dim: softmax over dim 0 is softmax of the transpose's rows.
  const auto y0 = contiguous(transpose(softmax(x, 0), 0, 1)).to_vector();
  const auto yt = softmax(contiguous(transpose(x, 0, 1)), 1).to_vector();
  for (size_t i = 0; i < y0.size(); ++i) ASSERT_FLOAT_EQ(y0[i], yt[i]);
  // bf16 computes in f32 and rounds once: within bf16's half-ulp of the reference on its input.
  const Tensor xb = x.to(DType::bf16);
  reference_rows(xb.to_vector(), 37, 131, &sm, &lsm, &lse);
  const auto yb = softmax(xb, 1).to_vector();
  for (size_t i = 0; i < sm.size(); ++i) ASSERT_NEAR(yb[i], sm[i], 4e-3 * sm[i] + 1e-30) << i;
  const Tensor xh = x.to(DType::f16);
  reference_rows(xh.to_vector(), 37, 131, &sm, &lsm, &lse);
  const auto yh = softmax(xh, 1).to_vector();
  for (size_t i = 0; i < sm.size(); ++i) ASSERT_NEAR(yh[i], sm[i], 1e-3 * sm[i] + 1e-7) << i;
}

TEST(Softmax, InfiniteEntries) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_vector({0.0, -inf, 1.0, -inf, -inf, -inf}, {2, 3});
  auto y = softmax(x, 1).to_vector();
  EXPECT_EQ(y[1], 0.0);  // masked entries are exactly 0
  EXPECT_NEAR(y[0] + y[2], 1.0, 1e-6);
  auto l = logsumexp(x, {1}).to_vector();
  EXPECT_EQ(l[1], -inf);  // an all -inf row, as torch
  EXPECT_TRUE(std::isnan(softmax(from_vector({1.0, NAN, 2.0}, {3}), 0).to_vector()[0]));
}

TEST(Max, ValuesIndicesAndGradient) {
  Tensor x = from_vector({1, 5, 5, 2, 7, 0, 7, 3}, {2, 4});
  auto [v, i] = max(x, 1);
  EXPECT_EQ(v.to_vector(), (std::vector<double>{5, 7}));
  EXPECT_EQ(i.to_vector(), (std::vector<double>{1, 0}));  // first occurrence
  EXPECT_EQ(i.dtype(), DType::i64);
  auto [vk, ik] = max(x, 0, true);
  EXPECT_EQ(vk.shape(), (Shape{1, 4}));
  EXPECT_EQ(ik.to_vector(), (std::vector<double>{1, 0, 1, 1}));
  EXPECT_EQ(max(from_vector({1, NAN, 3}, {3}), 0).second.item(), 1);  // NaN is reported
  EXPECT_THROW(max(zeros({2, 0}), 1), ValueError);
  for (bool tr : {false, true}) {
    Tensor a = leaf({3, 4, 5}, 21, tr);
    expect_gradcheck([](const V& in) { return max(in[0], 1).first; }, {a});
    expect_gradcheck([](const V& in) { return max(in[0], -1, true).first; }, {a});
  }
}

TEST(Topk, SortedWithTiesToLowerIndex) {
  Tensor x = from_vector({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, {10});
  auto [v, i] = topk(x, 4);
  EXPECT_EQ(v.to_vector(), (std::vector<double>{9, 6, 5, 5}));
  EXPECT_EQ(i.to_vector(), (std::vector<double>{5, 7, 4, 8}));
  EXPECT_THROW(topk(x, 11), ValueError);
  EXPECT_THROW(topk(x, -1), ValueError);
  // Against a sort reference on random rows, along a middle dim.
  manual_seed(4);
  Tensor r = randn({3, 20, 2});
  auto [rv, ri] = topk(r, 7, 1);
  EXPECT_EQ(rv.shape(), (Shape{3, 7, 2}));
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t c = 0; c < 2; ++c) {
      std::vector<std::pair<double, int64_t>> col;
      for (int64_t j = 0; j < 20; ++j) col.push_back({-r.at({a, j, c}), j});
      std::sort(col.begin(), col.end());
      for (int64_t q = 0; q < 7; ++q) {
        EXPECT_EQ(rv.at({a, q, c}), -col[q].first);
        EXPECT_EQ(ri.at({a, q, c}), col[q].second);
      }
    }
  for (bool tr : {false, true}) {
    Tensor a = leaf({4, 6}, 22, tr);
    expect_gradcheck([](const V& in) { return topk(in[0], 3, 1).first; }, {a});
    expect_gradcheck([](const V& in) { return topk(in[0], 2, 0).first; }, {a});
  }
}

// Double reference: per-row -log softmax(x)[t].
std::vector<double> ce_reference(const Tensor& logits, const std::vector<int64_t>& t,
                                 int64_t ignore) {
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  std::vector<double> sm, lsm, lse;
  reference_rows(logits.to_vector(), n, v, &sm, &lsm, &lse);
  std::vector<double> out(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (t[i] != ignore) out[i] = -lsm[i * v + t[i]];
  return out;
}

TEST(CrossEntropy, Gradients) {
  Tensor t = from_data<int64_t>({2, -100, 0, 4}, {4});
  for (bool tr : {false, true}) {
    SCOPED_TRACE(tr ? "transposed" : "contiguous");
    Tensor x = leaf({4, 5}, 31, tr);
    for (const char* red : {"mean", "sum", "none"}) {
      SCOPED_TRACE(red);
      expect_gradcheck([&](const V& in) { return cross_entropy(in[0], t, -100, red); }, {x});
    }
  }
  Tensor t32 = from_data<int32_t>({1, 1, 3}, {3});
  expect_gradcheck([&](const V& in) { return cross_entropy(in[0], t32, 3); }, {leaf({3, 6}, 32)});
}

TEST(CrossEntropy, ValuesAgainstDoubleReference) {
  manual_seed(5);
  Tensor x = mul(randn({9, 37}), 3.0);
  std::vector<int64_t> tv = {0, 36, 5, -1, 12, 12, 7, -1, 30};
  Tensor t = from_data<int64_t>(tv, {9});
  auto ref = ce_reference(x, tv, -1);
  auto none = cross_entropy(x, t, -1, "none").to_vector();
  double total = 0;
  for (int i = 0; i < 9; ++i) {
    ASSERT_NEAR(none[i], ref[i], 2e-5);
    total += ref[i];
  }
  EXPECT_NEAR(cross_entropy(x, t, -1, "sum").item(), total, 1e-4);
  EXPECT_NEAR(cross_entropy(x, t, -1, "mean").item(), total / 7, 1e-5);
  // bf16 logits: f32 compute, loss in bf16.
  Tensor xb = x.to(DType::bf16);
  Tensor lb = cross_entropy(xb, t, -1, "none");
  EXPECT_EQ(lb.dtype(), DType::bf16);
  auto refb = ce_reference(xb.to(DType::f32), tv, -1);
  for (int i = 0; i < 9; ++i) ASSERT_NEAR(lb.to_vector()[i], refb[i], 1e-2 * refb[i] + 1e-3);
  // Gradient of the mean: (softmax - onehot) / 7 on kept rows, 0 on ignored ones.
  Tensor xl = x.clone();
  xl.requires_grad_();
  cross_entropy(xl, t, -1).backward();
  std::vector<double> sm, lsm, lse;
  reference_rows(x.to_vector(), 9, 37, &sm, &lsm, &lse);
  const auto g = xl.grad().to_vector();
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 37; ++j) {
      double want = tv[i] == -1 ? 0.0 : (sm[i * 37 + j] - (j == tv[i])) / 7;
      ASSERT_NEAR(g[i * 37 + j], want, 1e-7) << i << "," << j;
    }
  Tensor xbl = xb.clone();
  xbl.requires_grad_();
  cross_entropy(xbl, t, -1).backward();
  EXPECT_EQ(xbl.grad().dtype(), DType::bf16);
  const auto gb = xbl.grad().to_vector();
  for (size_t k = 0; k < g.size(); ++k) ASSERT_NEAR(gb[k], g[k], 2e-3);
}

TEST(CrossEntropy, AllIgnoredMeanIsZeroWithZeroGradient) {
  // Our choice (torch gives NaN): see hp/ops/loss.cpp.
  Tensor x = leaf({3, 4}, 33);
  Tensor t = from_data<int64_t>({-100, -100, -100}, {3});
  Tensor loss = cross_entropy(x, t);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (double v : x.grad().to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(CrossEntropy, BadTargetsThrow) {
  Tensor x = zeros({3, 5});
  try {
    cross_entropy(x, from_data<int64_t>({0, 1, 7}, {3}));
    FAIL() << "no throw";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("target 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({0, -3, 1}, {3})), IndexError);
  EXPECT_THROW(cross_entropy(x, from_data<int32_t>({5, 0, 1}, {3})), IndexError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({0, 1}, {2})), ValueError);
  EXPECT_THROW(cross_entropy(x, zeros({3})), ValueError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({0, 1, 2}, {3}), -100, "avg"), ValueError);
  EXPECT_THROW(cross_entropy(zeros({3}), from_data<int64_t>({0, 1, 2}, {3})), ValueError);
}

TEST(Determinism, SoftmaxAndCrossEntropyIndependentOfThreads) {
  manual_seed(6);
  Tensor x = mul(randn({256, 1003}), 3.0);  // big enough to split across threads
  Tensor g = randn({256, 1003});
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < 256; ++i) tv.push_back(i % 7 == 0 ? -100 : (i * 37) % 1003);
  Tensor t = from_data<int64_t>(tv, {256});
  auto run = [&] {
    V out;
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor a = x.to(dt);
      a.requires_grad_();
      Tensor y = softmax(a, 1);
      y.backward(g.to(dt));
      out.push_back(y), out.push_back(a.grad());
      Tensor b = x.to(dt);
      b.requires_grad_();
      Tensor l = cross_entropy(b, t);
      l.backward();
      out.push_back(l), out.push_back(b.grad());
      Tensor c = x.to(dt);
      c.requires_grad_();
      Tensor ls = log_softmax(c, 0);
      ls.backward(g.to(dt));
      out.push_back(ls), out.push_back(c.grad());
    }
    return out;
  };
  const V one = with_threads(1, run), two = with_threads(2, run);
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) EXPECT_TRUE(bitwise_equal(one[k], two[k])) << k;
}

}  // namespace
}  // namespace hp
