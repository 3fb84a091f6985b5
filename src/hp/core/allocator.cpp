#include "hp/core/allocator.h"

#include <cstdlib>
#include <new>

#include "hp/core/error.h"

namespace hp {

const char* mem_tier_name(MemTier tier) { return tier == MemTier::device ? "device" : "host"; }

Allocator& Allocator::instance() {
  static Allocator a;
  return a;
}

void* Allocator::allocate(size_t nbytes, MemTier tier) {
  constexpr size_t kAlign = 64;
  size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
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
  std::free(p);
  counters_[static_cast<int>(tier)].live.fetch_sub(static_cast<int64_t>(nbytes));
}

MemStats Allocator::stats(MemTier tier) const {
  const auto& c = counters_[static_cast<int>(tier)];
  return MemStats{c.live.load(), c.peak.load(), c.count.load()};
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
