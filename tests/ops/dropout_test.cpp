// dropout: identity cases, argument errors, mask statistics and scaling, gradients, and exact
// replay under autograd::checkpoint.
#include <gtest/gtest.h>

#include <cstring>

#include "gradcheck.h"
#include "hp/autograd/checkpoint.h"
#include "hp/core/thread_pool.h"

namespace hp {
namespace {

using V = std::vector<Tensor>;

TEST(Dropout, IdentityZerosAndErrors) {
  Tensor x = ones({4, 5});
  EXPECT_TRUE(dropout(x, 0.0).same(x));
  EXPECT_TRUE(dropout(x, 0.7, /*training=*/false).same(x));
  Tensor xl = testing::leaf({4, 5}, 51);
  Tensor z = dropout(xl, 1.0);
  for (double v : z.to_vector()) EXPECT_EQ(v, 0.0);
  sum(z).backward();
  for (double v : xl.grad().to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(dropout(x, -0.1), ValueError);
  EXPECT_THROW(dropout(x, 1.5), ValueError);
  EXPECT_THROW(dropout(x, NAN), ValueError);
  EXPECT_THROW(dropout(from_data<int64_t>({1}, {1}), 0.5), ValueError);
}

TEST(Dropout, MaskStatisticsScaleAndGradient) {
  manual_seed(9);
  Tensor x = add(rand({200, 300}), 1.0);  // in [1, 2): never 0
  x.requires_grad_();
  const RngState before = default_generator().state();
  Tensor y = dropout(x, 0.3);
  sum(y).backward();
  const auto xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
  int64_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] != 0) {
      ++kept;
      ASSERT_NEAR(yv[i], xv[i] / 0.7, 1e-5);
      ASSERT_NEAR(gv[i], 1 / 0.7, 1e-6);
    } else {
      ASSERT_EQ(gv[i], 0.0);
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / xv.size(), 0.7, 0.01);
  // Consecutive calls draw fresh masks; the same state reproduces them, for any thread count.
  default_generator().set_state(before);
  const int prev = num_threads();
  set_num_threads(1);
  Tensor y1 = dropout(x.detach(), 0.3);
  set_num_threads(prev);
  EXPECT_EQ(y1.to_vector(), yv);
  EXPECT_NE(dropout(x.detach(), 0.3).to_vector(), yv);
  // bf16 and a non-contiguous input.
  Tensor xb = transpose(x.detach(), 0, 1).to(DType::bf16);
  Tensor yb = dropout(transpose(x.detach(), 0, 1), 0.5);
  EXPECT_EQ(yb.shape(), (Shape{300, 200}));
  EXPECT_EQ(dropout(xb, 0.5).dtype(), DType::bf16);
}

TEST(Dropout, GradientCheckWithFixedMask) {
  // Re-seeding inside the function makes every evaluation draw the same mask.
  Tensor x = testing::leaf({3, 7}, 52, /*transposed=*/true);
  testing::expect_gradcheck(
      [](const V& in) {
        manual_seed(77);
        return dropout(in[0], 0.4);
      },
      {x});
}

TEST(Dropout, ReplaysExactlyUnderCheckpoint) {
  Tensor x = testing::leaf({16, 33}, 53), w = testing::leaf({33}, 54);
  // Two dropouts inside the region, and one after it that must not see a replayed state.
  auto region = [&w](const V& in) {
    Tensor h = dropout(tanh(mul(in[0], w)), 0.5);
    return V{add(dropout(mul(h, h), 0.25), in[0])};
  };
  auto run = [&](bool recompute) {
    manual_seed(123);
    x.zero_grad(), w.zero_grad();
    Tensor y = recompute ? autograd::checkpoint(region, {x})[0] : region({x})[0];
    Tensor out = dropout(y, 0.5);
    sum(mul(out, out)).backward();
    return V{out.detach(), x.grad(), w.grad()};
  };
  const V plain = run(false), ckpt = run(true);
  for (size_t k = 0; k < plain.size(); ++k) {
    ASSERT_TRUE(plain[k].defined() && ckpt[k].defined()) << k;
    EXPECT_EQ(std::memcmp(plain[k].raw_data(), ckpt[k].raw_data(), plain[k].nbytes()), 0) << k;
  }
}

}  // namespace
}  // namespace hp
