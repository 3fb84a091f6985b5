// set_data / meta_tensor (core/tensor_data.h): every holder of a handle sees new data; views
// keep the old; autograd fields stay.
#include "hp/core/tensor_data.h"

#include <gtest/gtest.h>

namespace hp {
namespace {

TEST(TensorData, SetDataRepointsEveryHolder) {
  Tensor t = from_vector({1, 2, 3, 4}, {2, 2}).requires_grad_();
  t.set_name("w");
  t.set_grad(ones({2, 2}));
  const Tensor holder = t;  // e.g. a module member sharing the handle
  const Tensor old_view = t.as_strided({2}, {1}, 2);
  set_data(t, from_vector({5, 6, 7, 8, 9, 10}, {3, 2}, DType::bf16));
  EXPECT_EQ(holder.shape(), (Shape{3, 2}));
  EXPECT_EQ(holder.dtype(), DType::bf16);
  EXPECT_EQ(holder.to_vector(), (std::vector<double>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(old_view.to_vector(), (std::vector<double>{3, 4}));
  EXPECT_TRUE(holder.requires_grad());
  EXPECT_EQ(holder.name(), "w");
  EXPECT_TRUE(holder.grad().defined());
}

TEST(TensorData, MetaTensorHasShapeButNoData) {
  Tensor m = meta_tensor({4, 3}, DType::bf16);
  EXPECT_EQ(m.shape(), (Shape{4, 3}));
  EXPECT_EQ(m.dtype(), DType::bf16);
  EXPECT_FALSE(has_data(m));
  EXPECT_EQ(m.raw_data(), nullptr);
  EXPECT_TRUE(has_data(meta_tensor({0, 3}, DType::f32)));  // nothing to hold
  Tensor t = zeros({4, 3});
  const int64_t live = Allocator::instance().stats(MemTier::device).live_bytes;
  set_data(t, m);
  EXPECT_EQ(Allocator::instance().stats(MemTier::device).live_bytes, live - 48);
  EXPECT_FALSE(has_data(t));
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
}

}  // namespace
}  // namespace hp
