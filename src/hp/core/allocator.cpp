#include "hp/core/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "hp/core/error.h"

namespace hp {

const char* mem_tier_name(MemTier tier) { return tier == MemTier::device ? "device" : "host"; }

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = size_t(64) << 10;   // smaller blocks go straight to malloc
constexpr size_t kCacheMax = size_t(4) << 30;    // cached bytes at most, per process

// Block size actually allocated: 64 B granularity, 64 KiB for cacheable blocks.
size_t block_size(size_t nbytes) {
  size_t g = nbytes >= kCacheMin ? kCacheMin : kAlign;
  size_t r = (nbytes + g - 1) / g * g;
  return r == 0 ? kAlign : r;
}
}  // namespace

// Free blocks by (tier, block size). Guarded by mu.
struct Allocator::Cache {
  std::mutex mu;
  std::map<std::pair<int, size_t>, std::vector<void*>> free;
  size_t bytes = 0;
};

Allocator::Allocator() : cache_(new Cache) {}
Allocator::~Allocator() = default;

Allocator& Allocator::instance() {
  // Never destroyed: tensors held by other statics may free storage during exit.
  static Allocator* a = new Allocator;
  return *a;
}

void Allocator::release_cache() {
  std::lock_guard<std::mutex> lk(cache_->mu);
  for (auto& [key, blocks] : cache_->free)
    for (void* p : blocks) std::free(p);
  cache_->free.clear();
  cache_->bytes = 0;
}

void* Allocator::allocate(size_t nbytes, MemTier tier) {
  const size_t bs = block_size(nbytes);
  void* p = nullptr;
  if (bs >= kCacheMin) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    auto it = cache_->free.find({static_cast<int>(tier), bs});
    if (it != cache_->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cache_->bytes -= bs;
    }
  }
  if (!p) p = std::aligned_alloc(kAlign, bs);
  if (!p) {
    release_cache();
    p = std::aligned_alloc(kAlign, bs);
  }
  if (!p)
    HP_THROW(Error, "alloc", "out of memory allocating ", nbytes, " bytes on tier ",
             mem_tier_name(tier));
  auto& c = counters_[static_cast<int>(tier)];
  int64_t live = c.live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
  c.count.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* p, size_t nbytes, MemTier tier) {
  counters_[static_cast<int>(tier)].live.fetch_sub(static_cast<int64_t>(nbytes));
  const size_t bs = block_size(nbytes);
  if (bs >= kCacheMin) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    if (cache_->bytes + bs <= kCacheMax) {
      cache_->free[{static_cast<int>(tier), bs}].push_back(p);
      cache_->bytes += bs;
      return;
    }
  }
  std::free(p);
}

MemStats Allocator::stats(MemTier tier) const {
  const auto& c = counters_[static_cast<int>(tier)];
  int64_t cached = 0;
  {
    std::lock_guard<std::mutex> lk(cache_->mu);
    for (auto& [key, blocks] : cache_->free)
      if (key.first == static_cast<int>(tier)) cached += static_cast<int64_t>(key.second * blocks.size());
  }
  return MemStats{c.live.load(), c.peak.load(), c.count.load(), cached};
}

void Allocator::reset_peak(MemTier tier) {
  auto& c = counters_[static_cast<int>(tier)];
  c.peak.store(c.live.load());
}

Storage::Storage(size_t nbytes, MemTier tier)
    : data_(Allocator::instance().allocate(nbytes, tier)), nbytes_(nbytes), tier_(tier) {}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> keep_alive)
    : data_(data), nbytes_(nbytes), owned_(false), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (owned_) Allocator::instance().deallocate(data_, nbytes_, tier_);
}

}  // namespace hp
