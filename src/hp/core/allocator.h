// Storage allocation with live/peak byte accounting per memory tier and category.
//
// Tiers (HyperOffload, docs/ARCHITECTURE.md §4c): `device` is the fast memory computation runs
// in — HBM on an accelerator; on this CPU build a pool of host RAM capped by a budget
// (memory.device_budget) — and every tensor is allocated there unless asked otherwise; `host` is
// unbounded RAM that offloaded state lives in. (The disk tier is files: offload/async_file.h.)
// Each allocation is also tagged with a category (parameters, gradients, optimizer state,
// activations) taken from the calling thread's MemCategoryScope, so a refused allocation can say
// what fills the budget. Allocations are 64-byte aligned (one cache line, one AVX-512 register).
// Freed blocks of 64 KiB and more are kept in a per-size cache and handed out again (training
// steps repeat the same shapes), so hot loops stop paying for fresh pages; live/peak and the
// budget count only blocks in use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hp {

enum class MemTier : uint8_t { device, host };
inline constexpr int kNumMemTiers = 2;
const char* mem_tier_name(MemTier tier);

// What an allocation holds (for budget reports and the memory plan).
enum class MemCategory : uint8_t { other, params, grads, optimizer, activations };
inline constexpr int kNumMemCategories = 5;
const char* mem_category_name(MemCategory c);  // "other", "params", "grads", "optimizer", ...

// Tags the allocations this thread makes while it lives with `c` (scopes nest; the innermost
// wins). Allocations made outside any scope, or on other threads, are `other`.
class MemCategoryScope {
 public:
  explicit MemCategoryScope(MemCategory c);
  ~MemCategoryScope();
  MemCategoryScope(const MemCategoryScope&) = delete;
  MemCategoryScope& operator=(const MemCategoryScope&) = delete;

 private:
  MemCategory previous_;
};
MemCategory current_mem_category();

struct MemStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;    // allocations since start
  int64_t cached_bytes = 0;  // freed blocks held for reuse
  int64_t by_category[kNumMemCategories] = {};  // live bytes per MemCategory
};

// Process-wide accounting. Thread-safe.
class Allocator {
 public:
  static Allocator& instance();
  // Throws MemoryError when a device-tier allocation would take the tier's live bytes past the
  // device budget (the message names the budget, the live bytes per category and the largest
  // live blocks), Error when the system is out of memory.
  void* allocate(size_t nbytes, MemTier tier, MemCategory category);
  void deallocate(void* p, size_t nbytes, MemTier tier, MemCategory category);
  // Moves a live block's bytes from one category to another (a gradient produced as a backward
  // temporary becomes a parameter's .grad).
  void recategorize(void* p, size_t nbytes, MemTier tier, MemCategory from, MemCategory to);
  MemStats stats(MemTier tier) const;
  // Sets peak = live for a tier (e.g. at the start of a measured step).
  void reset_peak(MemTier tier);
  // Returns every cached block to the system.
  void release_cache();

  // The device tier's cap in bytes (0 = unlimited, the default). `what` names it in errors
  // ("memory.device_budget"). Lowering it below the live bytes refuses only later allocations.
  void set_device_budget(int64_t bytes, std::string what = "device budget");
  int64_t device_budget() const { return budget_.load(); }
  // "live 60.00 MiB: params 20.00 MiB, grads 10.00 MiB, ...; largest: 8.00 MiB (optimizer), ..."
  // for `tier` (the largest `top` live blocks of 64 KiB and more).
  std::string describe_live(MemTier tier, int top = 5) const;

 private:
  Allocator();
  ~Allocator();
  struct Counters {
    std::atomic<int64_t> live{0}, peak{0}, count{0};
    std::atomic<int64_t> by_category[kNumMemCategories] = {};
  };
  Counters counters_[kNumMemTiers];
  std::atomic<int64_t> budget_{0};
  std::string budget_name_;
  struct Cache;
  Cache* cache_;
};

// Sets the device budget for its lifetime and restores the previous one after (a run's
// memory.device_budget; tests).
class DeviceBudgetScope {
 public:
  DeviceBudgetScope(int64_t bytes, std::string what);
  ~DeviceBudgetScope();
  DeviceBudgetScope(const DeviceBudgetScope&) = delete;
  DeviceBudgetScope& operator=(const DeviceBudgetScope&) = delete;

 private:
  int64_t previous_;
};

// A refcounted block of bytes. Tensors share it through shared_ptr.
class Storage {
 public:
  // Tagged with the calling thread's current_mem_category().
  Storage(size_t nbytes, MemTier tier);
  // Wraps memory owned elsewhere (e.g. an mmapped file); `keep_alive` holds the owner.
  Storage(void* data, size_t nbytes, std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  MemTier tier() const { return tier_; }
  MemCategory category() const { return category_; }
  // Re-tags an owned block (no-op for wrapped memory).
  void set_category(MemCategory c);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  MemTier tier_ = MemTier::host;
  MemCategory category_ = MemCategory::other;
  bool owned_ = true;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace hp
