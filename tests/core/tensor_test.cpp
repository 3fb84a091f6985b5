#include <gtest/gtest.h>

#include <cmath>

#include "hp/core/allocator.h"
#include "hp/core/random.h"
#include "hp/core/tensor.h"
#include "hp/core/thread_pool.h"

namespace hp {
namespace {

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = arange(0, 12, 1, DType::f32);
  EXPECT_EQ(t.shape(), (Shape{12}));
  EXPECT_EQ(t.numel(), 12);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at({5}), 5.0);
  Tensor f = full({2, 3}, 2.5, DType::bf16);
  EXPECT_EQ(f.itemsize(), 2u);
  EXPECT_EQ(f.to_vector(), std::vector<double>(6, 2.5));
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  EXPECT_THROW(empty({2, -1}), ValueError);
  EXPECT_THROW(from_vector({1, 2, 3}, {2, 2}), ValueError);
  EXPECT_THROW(t.at({12}), IndexError);
  EXPECT_THROW(t.data<double>(), ValueError);
}

TEST(Tensor, StridedViewCopyAndContiguous) {
  Tensor t = from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.as_strided({3, 2}, {1, 3}, 0);  // transpose view
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.at({2, 1}), 5.0);
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // No elements, any strides (a tensor-parallel column block of width 0): contiguous.
  EXPECT_TRUE(empty({3, 0}).is_contiguous());
  EXPECT_TRUE(empty({0, 4}).as_strided({4, 0}, {1, 4}, 0).is_contiguous());
  // Broadcast copy with dtype conversion.
  Tensor dst = empty({2, 3}, DType::f16);
  dst.copy_from(from_vector({1, 2, 3}, {3}));
  EXPECT_EQ(dst.to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(t.as_strided({3, 3}, {3, 1}, 0), IndexError);  // beyond storage
  EXPECT_THROW(dst.copy_from(zeros({4})), ValueError);
}

TEST(Tensor, ToStringElidesLongDims) {
  Tensor t = arange(0, 100, 1, DType::i64);
  std::string s = t.to_string();
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_NE(s.find("[100] i64"), std::string::npos);
  EXPECT_NE(s.find("99"), std::string::npos);
}

TEST(Allocator, TracksLiveAndPeakAndReusesBlocks) {
  auto& a = Allocator::instance();
  a.reset_peak(MemTier::device);
  const int64_t live0 = a.stats(MemTier::device).live_bytes;
  void* first = nullptr;
  {
    Tensor t = empty({1 << 20}, DType::f32);  // 4 MiB, device tier by default
    first = t.raw_data();
    EXPECT_EQ(a.stats(MemTier::device).live_bytes, live0 + (4 << 20));
  }
  EXPECT_EQ(a.stats(MemTier::device).live_bytes, live0);
  EXPECT_GE(a.stats(MemTier::device).peak_bytes, live0 + (4 << 20));
  Tensor again = empty({1 << 20}, DType::f32);
  EXPECT_EQ(again.raw_data(), first);  // same-size block comes back from the cache
  const int64_t host0 = a.stats(MemTier::host).live_bytes;
  Tensor host = empty({256}, DType::f32, MemTier::host);
  EXPECT_EQ(a.stats(MemTier::host).live_bytes, host0 + 1024);
  EXPECT_EQ(host.tier(), MemTier::host);
}

TEST(Random, PhiloxKnownAnswer) {
  // Random123 known-answer test: philox4x32-10, counter 0, key 0.
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Random, ValuesIndependentOfThreadsAndSplits) {
  RngState at{42, 7};
  std::vector<float> a(100003), b(100003);
  set_num_threads(1);
  fill_normal(a.data(), static_cast<int64_t>(a.size()), at, 0, 1);
  set_num_threads(2);
  fill_normal(b.data(), static_cast<int64_t>(b.size()), at, 0, 1);
  EXPECT_EQ(a, b);
  // A draw at offset +1 block equals the original shifted by 4 values.
  std::vector<float> c(8);
  fill_normal(c.data(), 8, RngState{42, 8}, 0, 1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c[i], a[4 + i]);
  double mean = 0, var = 0;
  for (float v : a) mean += v;
  mean /= a.size();
  for (float v : a) var += (v - mean) * (v - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.02);
}

TEST(Random, GeneratorAdvances) {
  Generator g(3);
  EXPECT_EQ(g.reserve(10), 0u);
  EXPECT_EQ(g.reserve(1), 3u);  // ceil(10/4) blocks used
  EXPECT_EQ(g.state().offset, 4u);
}

TEST(ThreadPool, ParallelForCoversRangeOnceAndPropagatesErrors) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<int> hits(10007, 0);
    parallel_for(0, 10007, 100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int h : hits) ASSERT_EQ(h, 1);
    EXPECT_THROW(parallel_for(0, 1000, 1, [](int64_t, int64_t e) {
                   if (e == 1000) throw ValueError("boom");
                 }),
                 ValueError);
    std::vector<int64_t> blocks(num_blocks(1000, 64), -1);
    parallel_blocks(1000, 64, [&](int64_t k, int64_t b, int64_t e) { blocks[k] = e - b; });
    EXPECT_EQ(blocks.back(), 1000 - 15 * 64);
  }
  set_num_threads(2);
  EXPECT_THROW(set_num_threads(0), ValueError);
}

}  // namespace
}  // namespace hp
