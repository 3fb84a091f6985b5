#include "hp/train/activation_choice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "hp/core/allocator.h"
#include "hp/core/byte_size.h"
#include "hp/core/tensor.h"
#include "hp/kernels/cpu/gemm_peak.h"
#include "hp/models/hf/registry.h"
#include "hp/models/transformer.h"
#include "hp/nn/module.h"
#include "hp/offload/async_file.h"
#include "hp/train/options.h"

namespace hp::train {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int64_t kProbeBytes = int64_t(16) << 20;  // the bandwidth probe's buffer
}  // namespace

double block_forward_flops(const models::ModelConfig& c, const std::string& kind, int64_t rows,
                           int64_t seq) {
  const nn::SkipInitGuard skip;
  const models::DecoderLayer layer(c, models::architecture(c.architecture).layers, 0);
  int64_t params = kind.empty() ? layer.num_parameters() : 0;
  for (const auto& [name, child] : layer.children())
    if (name == kind) params = child->num_parameters();
  const double tokens = double(rows) * double(seq);
  double flops = 2.0 * double(params) * tokens;
  if (kind.empty() || kind.find("attn") != std::string::npos)
    flops += 2.0 * tokens * double(seq) * double(c.num_attention_heads) * double(c.head_dim);
  return flops;
}

double gemm_flops_per_s(const Config& cfg) {
  if (cfg.metrics.peak_tflops > 0) return cfg.metrics.peak_tflops * 1e12;
  return kernels::gemm_peak(compute_dtype(cfg)).gflops * 1e9;
}

double tier_bytes_per_s(const Config& cfg, const Layout& layout) {
  // Host-tier buffers, not counted against the device budget.
  Tensor a = empty({kProbeBytes}, DType::u8, MemTier::host);
  Tensor b = empty({kProbeBytes}, DType::u8, MemTier::host);
  std::memset(a.raw_data(), 1, size_t(kProbeBytes));
  std::memset(b.raw_data(), 2, size_t(kProbeBytes));
  double best = 1e30;
  if (cfg.offload.activations == OffloadTier::disk) {
    offload::AsyncFile f(disk_tier_file(cfg, layout, "bandwidth"),
                         static_cast<int>(cfg.memory.io_threads));
    for (int i = 0; i < 2; ++i) {
      const Clock::time_point t0 = Clock::now();
      f.wait(f.write(0, a.raw_data(), kProbeBytes, a.storage()));
      f.wait(f.read(0, b.raw_data(), kProbeBytes, b.storage()));
      best = std::min(best, seconds_since(t0) / 2);  // per direction
    }
  } else {
    for (int i = 0; i < 3; ++i) {
      const Clock::time_point t0 = Clock::now();
      std::memcpy(b.raw_data(), a.raw_data(), size_t(kProbeBytes));
      best = std::min(best, seconds_since(t0));
    }
  }
  return double(kProbeBytes) / std::max(best, 1e-9);
}

void choose_blocks(MemoryPlan& p, int64_t act_none, int64_t act_all, bool by_cost,
                   int64_t input_bytes) {
  using Fate = MemoryPlan::Fate;
  int64_t saved_all = 0;
  for (const MemoryPlan::Block& b : p.activation_blocks) saved_all += b.bytes;
  const int64_t window = std::max<int64_t>(0, act_all - act_none + saved_all);
  const int64_t fixed = p.device.params + p.device.grads + p.device.optimizer;
  std::vector<size_t> order(p.activation_blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return p.activation_blocks[a].bytes > p.activation_blocks[b].bytes;
  });
  // A tenth of the activations kept as headroom: the estimate is within ~15% (offload_test), and a
  // step past the budget fails.
  int64_t act = act_none, saved = 0;
  for (size_t i : order) {
    if (fixed + act + act / 10 <= p.budget) break;
    MemoryPlan::Block& b = p.activation_blocks[i];
    b.fate = Fate::swapped;
    if (by_cost) {
      const double forward_s = b.flops / std::max(p.gemm_flops_per_s, 1.0);
      b.recompute_s = forward_s;
      b.swap_s = std::max(
          0.0, 2.0 * double(b.bytes) / std::max(p.tier_bytes_per_s, 1.0) - 2.0 * forward_s);
      if (b.recompute_s < b.swap_s) b.fate = Fate::recomputed;
    }
    saved += b.fate == Fate::swapped ? b.bytes : std::max<int64_t>(0, b.bytes - input_bytes);
    act = std::max<int64_t>(0, act_none - saved + window);
  }
  p.device.activations = act;
}

}  // namespace hp::train
