// Where tensors go when their creator names no tier (HyperOffload, docs/ARCHITECTURE.md §4c).
//
// The tensor factories (core/tensor.h) default to the device tier, the memory computation runs
// in. A MemTierScope redirects those device-tier requests made on its thread to another tier while
// it lives — e.g. a model whose masters will live on the host (offload.params: host) is built
// straight into host memory, so the device budget never has to hold the whole model. Scopes nest.
#pragma once

#include "hp/core/allocator.h"

namespace hp {

class MemTierScope {
 public:
  explicit MemTierScope(MemTier t);
  ~MemTierScope();
  MemTierScope(const MemTierScope&) = delete;
  MemTierScope& operator=(const MemTierScope&) = delete;

 private:
  MemTier previous_;
};

// The tier a device-tier request on this thread goes to (MemTier::device outside any scope).
MemTier device_tier_target();

}  // namespace hp
