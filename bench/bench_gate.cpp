// MegaGate (moe/gate.h): the fused router against the chain of ops it replaced
// (composed_gate), forward + backward w.r.t. the logits, on router shapes of Qwen3-MoE (softmax
// top-8 of 64, normalized) and DeepSeek-V3 (sigmoid, bias, 8 groups keep 4, top-8 of 256, scaled):
//   - ms per forward + backward, fused and composed (best of 7, the two alternating), and the
//     speedup (issue target >= 2x);
//   - GB/s of the fused gate (logits read twice, d logits written, weights and indices) against
//     the memcpy bandwidth measured in the same run (the ceiling: the gate is memory-bound);
//   - PyTorch's composed router on the same shapes and thread count (the peer), where installed;
//   - where the fused gate's time goes (best of 7 each, same threads): its forward alone, the
//     score pass alone (the elementwise kernels' exp or sigmoid over every row), the selection
//     alone (gate_topk.h on rows of precomputed corrected scores), and the backward as the rest.
// Usage: build/bench_gate [TOKENS] (default 16384); threads from HP_NUM_THREADS.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/ew_table.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/moe/gate.h"
#include "hp/kernels/cpu/gate_topk.h"
#include "hp/ops/ops.h"

namespace {

using namespace hp;

struct Case {
  const char* name;
  int64_t experts;
  moe::GateSpec spec;
  bool bias;
  const char* peer;  // bench/peers/gate.py mode
};

using Gate = std::function<moe::GateOutput(const Tensor&)>;

// Best-of-reps seconds of one forward + backward of `fused` and of `composed` on logits [n, e],
// the two alternating rep by rep so that both see the same load on a shared machine.
std::pair<double, double> time_gates(int64_t n, int64_t e, int64_t k, const Gate& fused,
                                     const Gate& composed) {
  manual_seed(1);
  Tensor logits = randn({n, e}).requires_grad_();
  const Tensor g = randn({n, k});
  double best[2] = {1e30, 1e30};
  for (int r = 0; r < 7; ++r)
    for (int which = 0; which < 2; ++which) {
      logits.zero_grad();
      const auto t0 = std::chrono::steady_clock::now();
      sum(mul((which == 0 ? fused : composed)(logits).weights, g)).backward();
      best[which] = std::min(
          best[which],
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  return {best[0], best[1]};
}

double best_ms(const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best * 1e3;
}

// The fused gate's phases on logits [n, e] (see the header comment).
void print_phases(int64_t n, int64_t e, const Tensor& bias, const moe::GateSpec& g) {
  manual_seed(1);
  const Tensor logits = randn({n, e});
  const double fwd = best_ms([&] {
    autograd::NoGradGuard ng;
    moe::fused_gate(logits, bias, g);
  });
  const bool sig = g.score == moe::GateScore::sigmoid;
  const kernels::EwTable& ew = kernels::kernel_table<kernels::EwTable>();
  const auto score = ew.f32[int(sig ? kernels::EwOp::sigmoid : kernels::EwOp::exp)];
  Tensor p = empty({n, e});
  const double scores = best_ms([&] {
    parallel_for(0, n, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const float* in[1] = {logits.data<float>() + t * e};
        score(p.data<float>() + t * e, in, e, nullptr);
      }
    });
  });
  // What the fused gate selects on: softmax without bias or groups selects on the logits.
  const Tensor c = sig ? (bias.defined() ? add(sigmoid(logits), bias) : sigmoid(logits)) : logits;
  const kernels::GateTopKFn topk = kernels::kernel_table<kernels::GateTopKTable>().topk;
  const kernels::GateTopKShape shape{e, g.top_k, g.n_group, g.topk_group};
  const double select = best_ms([&] {
    parallel_for(0, n, 16, [&](int64_t lo, int64_t hi) {
      const auto k = size_t(g.top_k), ng = size_t(g.n_group);
      std::vector<int64_t> idx(k), gidx(ng);
      std::vector<float> val(k), gval(ng), top2(2 * ng), kept2(2 * ng);
      std::vector<char> keep(ng);
      const kernels::GateTopKScratch w{idx.data(),  val.data(),   gidx.data(), gval.data(),
                                      top2.data(), kept2.data(), keep.data()};
      for (int64_t t = lo; t < hi; ++t) topk(c.data<float>() + t * e, shape, w);
    });
  });
  std::printf("%-38s phases: forward %.2f ms (score pass alone %.2f, selection alone %.2f)\n", "",
              fwd, scores, select);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 16384;
  moe::GateSpec qwen;
  qwen.top_k = 8;
  qwen.norm_topk_prob = true;
  moe::GateSpec deepseek;
  deepseek.score = moe::GateScore::sigmoid;
  deepseek.top_k = 8;
  deepseek.n_group = 8;
  deepseek.topk_group = 4;
  deepseek.norm_topk_prob = true;
  deepseek.norm_eps = 1e-20;
  deepseek.scaling = 2.5;
  const Case cases[] = {{"qwen3-moe softmax top-8/64", 64, qwen, false, "softmax"},
                        {"deepseek-v3 sigmoid group top-8/256", 256, deepseek, true, "deepseek"}};
  const double ceiling = bench::memcpy_gbps();
  std::printf("MegaGate vs the composed router, fwd+bwd, %lld tokens, %d threads; memcpy %.1f GB/s\n",
              (long long)n, num_threads(), ceiling);
  for (const Case& c : cases) {
    const Tensor bias = c.bias ? mul(randn({c.experts}), 0.1) : Tensor();
    const int64_t k = c.spec.top_k;
    const auto [fused, composed] = time_gates(
        n, c.experts, k, [&](const Tensor& l) { return moe::fused_gate(l, bias, c.spec); },
        [&](const Tensor& l) { return moe::composed_gate(l, bias, c.spec); });
    // Logits read in forward and again in backward, d logits written, weights + indices written.
    const double bytes = double(n) * (3.0 * double(c.experts) * 4 + double(k) * 12);
    const double peer =
        bench::run_peer("gate.py", std::string(c.peer) + " " + std::to_string(n) + " " +
                                       std::to_string(num_threads()));
    std::printf("%-38s fused %7.2f ms (%5.1f GB/s, %.2fx memcpy)  composed %7.2f ms  speedup %.2fx"
                "  PyTorch %s ms (fused vs PyTorch %s)\n",
                c.name, fused * 1e3, bytes / fused / 1e9, bytes / fused / 1e9 / ceiling,
                composed * 1e3, composed / fused,
                std::isnan(peer) ? "n/a" : std::to_string(peer * 1e3).substr(0, 6).c_str(),
                bench::ratio_str(peer, fused).c_str());
    print_phases(n, c.experts, bias, c.spec);
  }
  return 0;
}
