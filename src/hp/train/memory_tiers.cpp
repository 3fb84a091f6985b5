// The memory plan's arithmetic and its table (memory_tiers.h).
#include "hp/train/memory_tiers.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "hp/core/byte_size.h"

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

namespace {

// The plan's lines on the activation blocks ("" without activation offload): how many are swapped
// / recomputed, the tier's bytes, the blocks, and auto's costs.
std::string activation_blocks_text(const MemoryPlan& p) {
  using Fate = MemoryPlan::Fate;
  if (p.activation_blocks.empty()) return "";
  int64_t counts[3] = {}, swapped_bytes = 0;
  std::string lists[3];
  char cost[96];
  for (const MemoryPlan::Block& b : p.activation_blocks) {
    const int f = static_cast<int>(b.fate);
    if (++counts[f] > 6 || b.fate == Fate::kept) continue;
    lists[f] += (counts[f] > 1 ? ", " : "") + b.fqn + " " + format_bytes(double(b.bytes));
    if (p.activation_select == ActivationSelect::auto_) {
      std::snprintf(cost, sizeof cost, " (recompute %.3g ms, swap %.3g ms)", 1e3 * b.recompute_s,
                    1e3 * b.swap_s);
      lists[f] += cost;
    }
  }
  for (const MemoryPlan::Block& b : p.activation_blocks)
    if (b.fate == Fate::swapped) swapped_bytes += b.bytes;
  const std::string tier = enum_name(p.activation_tier);
  const char* how = p.activation_select == ActivationSelect::largest
                        ? " (largest first until it fits)"
                    : p.activation_select == ActivationSelect::auto_
                        ? " (largest first until it fits, recomputed or swapped by cost)"
                        : "";
  std::string s =
      "offload    activations " + tier + how + ": " + std::to_string(counts[int(Fate::swapped)]) +
      " of " + std::to_string(p.activation_blocks.size()) + " blocks swapped, " +
      std::to_string(counts[int(Fate::recomputed)]) + " recomputed; " +
      format_bytes(double(swapped_bytes)) + " per micro-batch on the " + tier + " tier\n";
  const char* names[3] = {"kept", "swapped", "recomputed"};
  for (int f : {int(Fate::swapped), int(Fate::recomputed)})
    if (counts[f] > 0)
      s += std::string("           ") + names[f] + ": " + lists[f] +
           (counts[f] > 6 ? ", ...\n" : "\n");
  if (p.activation_select == ActivationSelect::auto_) {
    std::snprintf(cost, sizeof cost, "           costs: GEMM %.1f GFLOP/s, %s tier %.2f GB/s\n",
                  p.gemm_flops_per_s / 1e9, tier.c_str(), p.tier_bytes_per_s / 1e9);
    s += cost;
  }
  if (p.activation_select != ActivationSelect::all)
    s += "           (device activations estimated for that choice; the largest batch / seq_len "
         "below swap every block)\n";
  return s;
}

}  // namespace

std::string MemoryPlan::to_text() const {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line,
                "model      %lld parameters; per rank (FSDP over %lld): micro-batch %lld x %lld "
                "tokens\n",
                static_cast<long long>(parameters), static_cast<long long>(shard_ranks),
                static_cast<long long>(micro_rows), static_cast<long long>(seq_len));
  s += line;
  std::snprintf(line, sizeof line, "%-8s %12s %12s %12s %12s %12s\n", "tier", "params", "grads",
                "optimizer", "activations", "total");
  s += line;
  const std::pair<const char*, const Tier*> tiers[] = {
      {"device", &device}, {"host", &host}, {"disk", &disk}};
  for (const auto& [name, t] : tiers) {
    std::snprintf(line, sizeof line, "%-8s %12s %12s %12s %12s %12s\n", name,
                  format_bytes(double(t->params)).c_str(), format_bytes(double(t->grads)).c_str(),
                  format_bytes(double(t->optimizer)).c_str(),
                  format_bytes(double(t->activations)).c_str(),
                  format_bytes(double(t->total())).c_str());
    s += line;
  }
  s += "activations: measured on the model at 2 and 3 layers with the micro-batch and half of it, "
       "extrapolated to its depth; they include FSDP's gathered compute copies and the step's "
       "transient buffers, as the trainer's act_mem_bytes\n";
  std::snprintf(
      line, sizeof line,
      "measured   at %lld and %lld layers x %lld and %lld tokens: %lld %lld / %lld %lld "
      "bytes\n",
      static_cast<long long>(measured_layers[0]), static_cast<long long>(measured_layers[1]),
      static_cast<long long>(measured_tokens[0]), static_cast<long long>(measured_tokens[1]),
      static_cast<long long>(act_measured[0][0]), static_cast<long long>(act_measured[0][1]),
      static_cast<long long>(act_measured[1][0]), static_cast<long long>(act_measured[1][1]));
  s += line;
  s += activation_blocks_text(*this);
  if (budget == 0) {
    s += "budget     memory.device_budget unset (unlimited)\n";
  } else {
    s += "budget     memory.device_budget " + format_bytes(double(budget)) + ": " +
         (fits() ? "fits" : "does NOT fit") + " (device total " +
         format_bytes(double(device.total())) + ")\n";
    s += "largest    micro-batch rows at seq_len " + std::to_string(seq_len) + ": " +
         std::to_string(max_rows()) + "; seq_len at " + std::to_string(micro_rows) +
         " rows: " + std::to_string(max_seq_len()) + "\n";
  }
  return s;
}

}  // namespace hp::train
