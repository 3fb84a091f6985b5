// Tensor allocation with a shape whose element count or byte size overflows int64 (a size from a
// bad config): a ValueError naming the shape, never a wrapped-around small allocation.
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "has.h"
#include "hp/core/tensor.h"

namespace hp {
namespace {

using testing::error_of;

using test::has;

TEST(ShapeOverflow, ElementCountOverflowNamesTheShape) {
  const int64_t big = int64_t(1) << 62;
  // 2^62 · 4 wraps to 0 in int64: before the check this allocated 0 bytes and returned a tensor.
  std::string e = error_of([&] { empty({big, 4}); });
  EXPECT_TRUE(has(e, "[shape]") && has(e, "[4611686018427387904, 4]") && has(e, "overflows int64"))
      << e;
  EXPECT_THROW(zeros({big, 4}), ValueError);
  EXPECT_THROW(full({4, big, 2}, 1.0), ValueError);
  EXPECT_THROW(shape_numel({big, big}), ValueError);
  int64_t dummy = 0;
  EXPECT_THROW(from_blob(&dummy, {big, 8}, DType::f32, nullptr), ValueError);
}

TEST(ShapeOverflow, ByteSizeOverflowNamesShapeAndDtype) {
  // 2^61 · 2 elements fit int64, their 8-byte f64 size does not.
  const int64_t n = int64_t(1) << 61;
  EXPECT_EQ(shape_numel({n, 2}), int64_t(1) << 62);
  const std::string e = error_of([&] { empty({n, 2}, DType::f64); });
  EXPECT_TRUE(has(e, "[2305843009213693952, 2]") && has(e, "f64") && has(e, "byte size")) << e;
}

TEST(ShapeOverflow, EmptyShapesWithHugeDimsStayValid) {
  // A zero dim makes any shape empty, however large the other dims.
  const int64_t big = int64_t(1) << 62;
  EXPECT_EQ(shape_numel({big, 16, 0}), 0);
  EXPECT_EQ(empty({0, big}).numel(), 0);
  EXPECT_THROW(empty({-1, 4}), ValueError);
}

TEST(ShapeOverflow, ArangeWithMoreElementsThanInt64) {
  const std::string e = error_of([] { arange(0.0, 1e30, 1.0); });
  EXPECT_TRUE(has(e, "[arange]") && has(e, "int64")) << e;
  EXPECT_EQ(arange(0.0, 3.0, 1.0).numel(), 3);
}

}  // namespace
}  // namespace hp
