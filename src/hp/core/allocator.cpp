#include "hp/core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "hp/core/byte_size.h"
#include "hp/core/error.h"

namespace hp {

const char* mem_tier_name(MemTier tier) { return tier == MemTier::device ? "device" : "host"; }

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::params:
      return "params";
    case MemCategory::grads:
      return "grads";
    case MemCategory::optimizer:
      return "optimizer";
    case MemCategory::activations:
      return "activations";
    case MemCategory::other:
      break;
  }
  return "other";
}

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = size_t(64) << 10;  // smaller blocks go straight to malloc
constexpr size_t kCacheMax = size_t(4) << 30;   // cached bytes at most, per process

thread_local MemCategory t_category = MemCategory::other;

// Block size actually allocated: 64 B granularity, 64 KiB for cacheable blocks.
size_t block_size(size_t nbytes) {
  size_t g = nbytes >= kCacheMin ? kCacheMin : kAlign;
  size_t r = (nbytes + g - 1) / g * g;
  return r == 0 ? kAlign : r;
}
}  // namespace

MemCategoryScope::MemCategoryScope(MemCategory c) : previous_(t_category) { t_category = c; }
MemCategoryScope::~MemCategoryScope() { t_category = previous_; }
MemCategory current_mem_category() { return t_category; }

// Free blocks by (tier, block size), and the live blocks of kCacheMin bytes and more (what a
// budget error lists as the largest). Guarded by mu.
struct Allocator::Cache {
  mutable std::mutex mu;
  std::map<std::pair<int, size_t>, std::vector<void*>> free;
  size_t bytes = 0;
  struct Live {
    size_t nbytes;
    MemTier tier;
    MemCategory category;
  };
  std::unordered_map<void*, Live> live;
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

void Allocator::set_device_budget(int64_t bytes, std::string what) {
  std::lock_guard<std::mutex> lk(cache_->mu);
  budget_name_ = std::move(what);
  budget_.store(std::max<int64_t>(0, bytes));
}

std::string Allocator::describe_live(MemTier tier, int top) const {
  const MemStats s = stats(tier);
  std::string out = "live " + format_bytes(double(s.live_bytes)) + ":";
  for (int c = 0; c < kNumMemCategories; ++c)
    out += detail::cat(c == 0 ? " " : ", ", mem_category_name(static_cast<MemCategory>(c)), " ",
                       format_bytes(double(s.by_category[c])));
  std::vector<Cache::Live> blocks;
  {
    std::lock_guard<std::mutex> lk(cache_->mu);
    for (const auto& [p, b] : cache_->live)
      if (b.tier == tier) blocks.push_back(b);
  }
  const size_t n = std::min(blocks.size(), size_t(std::max(0, top)));
  std::partial_sort(blocks.begin(), blocks.begin() + long(n), blocks.end(),
                    [](const Cache::Live& a, const Cache::Live& b) { return a.nbytes > b.nbytes; });
  if (n > 0) out += "; largest live:";
  for (size_t i = 0; i < n; ++i)
    out += detail::cat(i == 0 ? " " : ", ", format_bytes(double(blocks[i].nbytes)), " (",
                       mem_category_name(blocks[i].category), ")");
  return out;
}

void* Allocator::allocate(size_t nbytes, MemTier tier, MemCategory category) {
  auto& c = counters_[static_cast<int>(tier)];
  const auto n = static_cast<int64_t>(nbytes);
  int64_t live = c.live.fetch_add(n) + n;
  if (tier == MemTier::device) {
    const int64_t budget = budget_.load();
    if (budget > 0 && live > budget) {
      c.live.fetch_sub(n);
      std::string name;
      {
        std::lock_guard<std::mutex> lk(cache_->mu);
        name = budget_name_;
      }
      HP_THROW(MemoryError, "alloc", "device tier over budget: allocating ",
               format_bytes(double(n)), " (", mem_category_name(category), ") with ",
               format_bytes(double(live - n)), " live would exceed ", name, " = ",
               format_bytes(double(budget)), " (", budget, " bytes); ", describe_live(tier),
               ". Raise the budget, offload (offload.optimizer: host|disk, offload.activations: "
               "host, offload.params / grads: host), recompute, or shrink the batch / seq_len (hp "
               "memory plan)");
    }
  }
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
  if (!p) {
    c.live.fetch_sub(n);
    HP_THROW(Error, "alloc", "out of memory allocating ", nbytes, " bytes on tier ",
             mem_tier_name(tier));
  }
  if (bs >= kCacheMin) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    cache_->live[p] = {nbytes, tier, category};
  }
  int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
  c.by_category[static_cast<int>(category)].fetch_add(n);
  c.count.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* p, size_t nbytes, MemTier tier, MemCategory category) {
  auto& c = counters_[static_cast<int>(tier)];
  c.live.fetch_sub(static_cast<int64_t>(nbytes));
  c.by_category[static_cast<int>(category)].fetch_sub(static_cast<int64_t>(nbytes));
  const size_t bs = block_size(nbytes);
  if (bs >= kCacheMin) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    cache_->live.erase(p);
    if (cache_->bytes + bs <= kCacheMax) {
      cache_->free[{static_cast<int>(tier), bs}].push_back(p);
      cache_->bytes += bs;
      return;
    }
  }
  std::free(p);
}

void Allocator::recategorize(void* p, size_t nbytes, MemTier tier, MemCategory from,
                             MemCategory to) {
  if (from == to) return;
  auto& c = counters_[static_cast<int>(tier)];
  c.by_category[static_cast<int>(from)].fetch_sub(static_cast<int64_t>(nbytes));
  c.by_category[static_cast<int>(to)].fetch_add(static_cast<int64_t>(nbytes));
  if (block_size(nbytes) >= kCacheMin) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    if (auto it = cache_->live.find(p); it != cache_->live.end()) it->second.category = to;
  }
}

MemStats Allocator::stats(MemTier tier) const {
  const auto& c = counters_[static_cast<int>(tier)];
  int64_t cached = 0;
  {
    std::lock_guard<std::mutex> lk(cache_->mu);
    for (auto& [key, blocks] : cache_->free)
      if (key.first == static_cast<int>(tier)) cached += static_cast<int64_t>(key.second * blocks.size());
  }
  MemStats s{c.live.load(), c.peak.load(), c.count.load(), cached, {}};
  for (int k = 0; k < kNumMemCategories; ++k) s.by_category[k] = c.by_category[k].load();
  return s;
}

void Allocator::reset_peak(MemTier tier) {
  auto& c = counters_[static_cast<int>(tier)];
  c.peak.store(c.live.load());
}

DeviceBudgetScope::DeviceBudgetScope(int64_t bytes, std::string what)
    : previous_(Allocator::instance().device_budget()) {
  Allocator::instance().set_device_budget(bytes, std::move(what));
}
DeviceBudgetScope::~DeviceBudgetScope() { Allocator::instance().set_device_budget(previous_); }

Storage::Storage(size_t nbytes, MemTier tier)
    : data_(Allocator::instance().allocate(nbytes, tier, current_mem_category())),
      nbytes_(nbytes),
      tier_(tier),
      category_(current_mem_category()) {}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> keep_alive)
    : data_(data), nbytes_(nbytes), owned_(false), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (owned_) Allocator::instance().deallocate(data_, nbytes_, tier_, category_);
}

void Storage::set_category(MemCategory c) {
  if (!owned_) return;
  Allocator::instance().recategorize(data_, nbytes_, tier_, category_, c);
  category_ = c;
}

}  // namespace hp
