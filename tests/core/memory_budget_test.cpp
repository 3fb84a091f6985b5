// Byte sizes, allocation categories and the device-tier budget (core/byte_size.h,
// core/allocator.h).
#include <gtest/gtest.h>

#include "error_of.h"
#include "hp/core/allocator.h"
#include "hp/core/byte_size.h"
#include "hp/core/mem_tier_scope.h"
#include "hp/core/tensor.h"

namespace hp {
namespace {

using testing::error_of;

TEST(ByteSize, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_byte_size("6GiB", "k"), int64_t(6) << 30);
  EXPECT_EQ(parse_byte_size("512MiB", "k"), int64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("1.5KiB", "k"), 1536);
  EXPECT_EQ(parse_byte_size("8 GB", "k"), int64_t(8000000000));
  EXPECT_EQ(parse_byte_size("4096", "k"), 4096);
  EXPECT_EQ(parse_byte_size("2TiB", "k"), int64_t(2) << 40);
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
}

TEST(ByteSize, BadValuesNameKeyAndValue) {
  for (const char* bad : {"", "GiB", "6 gigs", "6gb", "-1GiB", "1.2.3MiB", "1e30TiB"}) {
    const std::string e = error_of([&] { parse_byte_size(bad, "memory.device_budget"); });
    EXPECT_NE(e.find("[config] memory.device_budget: bad size '" + std::string(bad) + "'"),
              std::string::npos)
        << bad << ": " << e;
  }
  EXPECT_NE(error_of([] { parse_byte_size("6GB2", "x"); }).find("unknown unit 'GB2'"),
            std::string::npos);
}

TEST(MemoryBudget, RefusesDeviceAllocationsPastTheBudgetNamingWhatIsLive) {
  auto& a = Allocator::instance();
  const int64_t live0 = a.stats(MemTier::device).live_bytes;
  Tensor params, state;
  {
    const MemCategoryScope p(MemCategory::params);
    params = empty({1 << 18});  // 1 MiB
  }
  {
    const MemCategoryScope o(MemCategory::optimizer);
    state = empty({1 << 19});  // 2 MiB, the largest live block
  }
  const MemStats s = a.stats(MemTier::device);
  EXPECT_GE(s.by_category[int(MemCategory::params)], int64_t(1) << 20);
  EXPECT_GE(s.by_category[int(MemCategory::optimizer)], int64_t(2) << 20);
  {
    const DeviceBudgetScope budget(live0 + (int64_t(4) << 20), "memory.device_budget");
    Tensor fits = empty({1 << 17});  // 512 KiB more: 3.5 MiB of 4
    const std::string e = error_of([] {
      const MemCategoryScope act(MemCategory::activations);
      Tensor too_big = empty({1 << 18});  // 1 MiB more: over
    });
    EXPECT_NE(e.find("[alloc] device tier over budget: allocating 1.00 MiB (activations)"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("memory.device_budget = "), std::string::npos) << e;
    EXPECT_NE(e.find("optimizer 2.00 MiB"), std::string::npos) << e;
    EXPECT_NE(e.find("largest live: 2.00 MiB (optimizer)"), std::string::npos) << e;
    // The refused bytes were never counted, and the host tier has no cap.
    EXPECT_EQ(a.stats(MemTier::device).live_bytes, live0 + (int64_t(7) << 19));
    Tensor host = empty({1 << 20}, DType::f32, MemTier::host);
    EXPECT_EQ(host.tier(), MemTier::host);
    EXPECT_THROW(empty({1 << 18}), MemoryError);
  }
  EXPECT_EQ(a.device_budget(), 0);  // restored: unlimited again
  Tensor big = empty({1 << 20});
  EXPECT_EQ(big.numel(), 1 << 20);
}

TEST(MemoryBudget, GradientsKeptFromBackwardCountAsGrads) {
  auto& a = Allocator::instance();
  Tensor t = empty({1 << 16});
  const int64_t grads0 = a.stats(MemTier::device).by_category[int(MemCategory::grads)];
  const int64_t act0 = a.stats(MemTier::device).by_category[int(MemCategory::activations)];
  t.storage()->set_category(MemCategory::grads);
  EXPECT_EQ(a.stats(MemTier::device).by_category[int(MemCategory::grads)], grads0 + (1 << 18));
  EXPECT_EQ(a.stats(MemTier::device).by_category[int(MemCategory::activations)], act0);
  t = Tensor();
  EXPECT_EQ(a.stats(MemTier::device).by_category[int(MemCategory::grads)], grads0);
}

TEST(MemTierScope, RedirectsDefaultDeviceRequestsOnThisThread) {
  {
    const MemTierScope on_host(MemTier::host);
    EXPECT_EQ(empty({16}).tier(), MemTier::host);
    EXPECT_EQ(zeros({16}).tier(), MemTier::host);
    {
      const MemTierScope back(MemTier::device);
      EXPECT_EQ(empty({16}).tier(), MemTier::device);
    }
    EXPECT_EQ(empty({16}).tier(), MemTier::host);
  }
  EXPECT_EQ(empty({16}).tier(), MemTier::device);
}

}  // namespace
}  // namespace hp
