// The memory plan's arithmetic (memory_tiers.h).
#include "hp/train/memory_tiers.h"

#include <algorithm>

namespace hp::train {

std::vector<std::string> MemoryPlan::offloaded_blocks() const {
  std::vector<std::string> out;
  for (const Block& b : activation_blocks)
    if (b.fate == Fate::swapped) out.push_back(b.fqn);
  return out;
}

std::vector<std::string> MemoryPlan::recomputed_blocks() const {
  std::vector<std::string> out;
  for (const Block& b : activation_blocks)
    if (b.fate == Fate::recomputed) out.push_back(b.fqn);
  return out;
}

int64_t MemoryPlan::activations_for(int64_t rows, int64_t seq) const {
  const double tokens = double(rows) * double(seq);
  const double v = act_base + act_base_per_token * tokens +
                   double(layers) * (act_layer + act_layer_per_token * tokens);
  return std::max<int64_t>(0, int64_t(v));
}

int64_t MemoryPlan::minimum_device_bytes() const {
  const double one_layer_tokens = double(micro_rows) * double(seq_len);
  return device.params + device.grads + device.optimizer +
         std::max<int64_t>(0, int64_t(act_base + act_base_per_token * one_layer_tokens + act_layer +
                                      act_layer_per_token * one_layer_tokens));
}

int64_t MemoryPlan::max_rows() const {
  if (budget == 0) return -1;
  int64_t r = 0;
  const int64_t room = budget - (device.params + device.grads + device.optimizer);
  while (activations_for(r + 1, seq_len) <= room && r < (int64_t(1) << 30)) r = r == 0 ? 1 : r * 2;
  int64_t lo = r / 2, hi = r;  // activations_for(hi) fits, lo too; refine between r and 2r
  hi = r * 2;
  while (lo + 1 < hi) {
    const int64_t mid = (lo + hi) / 2;
    (activations_for(mid, seq_len) <= room ? lo : hi) = mid;
  }
  return activations_for(1, seq_len) <= room ? lo : 0;
}

int64_t MemoryPlan::max_seq_len() const {
  if (budget == 0) return -1;
  const int64_t room = budget - (device.params + device.grads + device.optimizer);
  int64_t lo = 0, hi = 1;
  while (activations_for(micro_rows, hi) <= room && hi < (int64_t(1) << 40)) lo = hi, hi *= 2;
  while (lo + 1 < hi) {
    const int64_t mid = (lo + hi) / 2;
    (activations_for(micro_rows, mid) <= room ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace hp::train
