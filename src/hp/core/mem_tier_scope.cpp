#include "hp/core/mem_tier_scope.h"

namespace hp {

namespace {
thread_local MemTier t_target = MemTier::device;
}

MemTierScope::MemTierScope(MemTier t) : previous_(t_target) { t_target = t; }
MemTierScope::~MemTierScope() { t_target = previous_; }
MemTier device_tier_target() { return t_target; }

}  // namespace hp
