// Storage allocation with live/peak byte accounting per memory tier.
//
// Metrics read the counters for "peak memory"; HyperOffload reads them to decide what to move.
// Allocations are 64-byte aligned (one cache line, one AVX-512 register). Freed blocks of 64 KiB
// and more are kept in a per-size cache and handed out again (training steps repeat the same
// shapes), so hot loops stop paying for fresh pages; live/peak count only blocks in use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hp {

enum class MemTier : uint8_t { device, host };
inline constexpr int kNumMemTiers = 2;
const char* mem_tier_name(MemTier tier);

struct MemStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;    // allocations since start
  int64_t cached_bytes = 0;  // freed blocks held for reuse
};

// Process-wide accounting. Thread-safe.
class Allocator {
 public:
  static Allocator& instance();
  void* allocate(size_t nbytes, MemTier tier);
  void deallocate(void* p, size_t nbytes, MemTier tier);
  MemStats stats(MemTier tier) const;
  // Sets peak = live for a tier (e.g. at the start of a measured step).
  void reset_peak(MemTier tier);
  // Returns every cached block to the system.
  void release_cache();

 private:
  Allocator();
  ~Allocator();
  struct Counters {
    std::atomic<int64_t> live{0}, peak{0}, count{0};
  };
  Counters counters_[kNumMemTiers];
  struct Cache;
  Cache* cache_;
};

// A refcounted block of bytes. Tensors share it through shared_ptr.
class Storage {
 public:
  Storage(size_t nbytes, MemTier tier);
  // Wraps memory owned elsewhere (e.g. an mmapped file); `keep_alive` holds the owner.
  Storage(void* data, size_t nbytes, std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  MemTier tier() const { return tier_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  MemTier tier_ = MemTier::host;
  bool owned_ = true;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace hp
