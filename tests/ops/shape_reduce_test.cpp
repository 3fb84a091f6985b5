#include <gtest/gtest.h>

#include "gradcheck.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

TEST(ShapeOps, ViewsShareStorageAndHaveGradients) {
  Tensor x = leaf({2, 3, 4}, 1);
  Tensor v = permute(x, {2, 0, 1});
  EXPECT_EQ(v.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_FALSE(v.is_contiguous());
  expect_gradcheck([](const std::vector<Tensor>& in) { return permute(in[0], {2, 0, 1}) * 2.0; }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return reshape(permute(in[0], {1, 0, 2}), {3, -1}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return slice(in[0], 2, 1, 4, 2); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return narrow(in[0], 1, 1, 2); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return select(in[0], 1, -1); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return transpose(in[0], 0, 2); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return flatten(unsqueeze(in[0], 1), 2); }, {x});
  Tensor y = leaf({3, 1}, 2);
  expect_gradcheck([](const std::vector<Tensor>& in) { return expand(in[0], {2, 3, 5}); }, {y});
}

TEST(ShapeOps, ViewRejectsIncompatibleStrides) {
  Tensor x = zeros({4, 6});
  Tensor t = transpose(x, 0, 1);
  EXPECT_THROW(view(t, {24}), ValueError);
  EXPECT_EQ(reshape(t, {24}).shape(), (Shape{24}));
  EXPECT_THROW(reshape(x, {5, -1}), ValueError);
  EXPECT_THROW(narrow(x, 1, 4, 3), IndexError);
  EXPECT_THROW(permute(x, {0, 0}), ValueError);
  EXPECT_THROW(select(x, 2, 0), IndexError);
}

TEST(Reduce, SumMeanAmaxGradients) {
  for (bool tr : {false, true}) {
    Tensor x = leaf({3, 4, 5}, 3, tr);
    expect_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0], {1}); }, {x});
    expect_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0], {0, 2}, true); }, {x});
    expect_gradcheck([](const std::vector<Tensor>& in) { return mean(in[0], {-1}); }, {x});
    expect_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x});
    expect_gradcheck([](const std::vector<Tensor>& in) { return amax(in[0], {2}); }, {x});
    expect_gradcheck([](const std::vector<Tensor>& in) { return amax(in[0], {0, 1}); }, {x});
  }
}

TEST(Reduce, ValuesAgainstDoubleReference) {
  manual_seed(5);
  Tensor x = randn({37, 129});
  std::vector<double> v = x.to_vector();
  Tensor s0 = sum(x, {0}), s1 = sum(x, {1});
  for (int64_t j = 0; j < 129; ++j) {
    double r = 0;
    for (int64_t i = 0; i < 37; ++i) r += v[i * 129 + j];
    EXPECT_NEAR(s0.at({j}), r, 1e-4);
  }
  for (int64_t i = 0; i < 37; ++i) {
    double r = 0;
    for (int64_t j = 0; j < 129; ++j) r += v[i * 129 + j];
    EXPECT_NEAR(s1.at({i}), r, 1e-4);
  }
  Tensor m = amax(transpose(x, 0, 1), {1});
  for (int64_t j = 0; j < 129; ++j) {
    double r = -1e30;
    for (int64_t i = 0; i < 37; ++i) r = std::max(r, v[i * 129 + j]);
    EXPECT_EQ(m.at({j}), r);
  }
}

TEST(Reduce, TiesShareAmaxGradient) {
  Tensor x = from_vector({1, 3, 3, 2}, {4});
  x.requires_grad_();
  amax(x, {0}).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

}  // namespace
}  // namespace hp
