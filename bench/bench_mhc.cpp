// MegaMHC (ops/mhc_fused.h): the fused mHC block against the composed ops it replaced
// (HyperConnection::mix_composed / fold_composed), forward + backward, on DeepSeek-V4-like shapes
// (hc_mult 4, 20 Sinkhorn iterations, hidden 1024 and 2048, several thousand tokens):
//   - ms per forward + backward of mix (with the adjacent RMSNorm) and fold, fused and composed,
//     and the speedup (issue 14 target >= 2x);
//   - GB/s of the fused block against the memcpy bandwidth measured in the same run (the ceiling:
//     past its one small GEMM the block is memory-bound). Bytes counted: the [R, N·D] streams-sized
//     traffic of the fused passes and GEMMs (16 streams-sized reads / writes: x read 7 times, the
//     new streams, their grad, d x from mix and fold and their sum, the G buffer written and read);
//   - PyTorch eager on the same math, shapes and thread count (bench/peers/mhc.py), where
//   installed.
// The block's output `out` is a leaf here, so only the mHC ops are timed: backward runs from the
// new streams (grad g) and the normed input (grad g_in) at once.
// Usage: build/bench_mhc [TOKENS] (default 4096); threads from HP_NUM_THREADS.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_common.h"
#include "hp/autograd/engine.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/models/mhc.h"
#include "hp/ops/ops.h"

namespace {

using namespace hp;

// Best-of-reps seconds of mix + fold forward and backward.
double time_block(bool fused, int64_t tokens, int64_t n, int64_t d, DType dt) {
  manual_seed(1);
  models::HyperConnection hc(n, d, 20, 1e-6, 1e-6, dt, 0.02);
  nn::RMSNorm norm(d, 1e-6, dt);
  const Tensor streams = randn({1, tokens, n, d}).to(dt).requires_grad_();
  const Tensor out = randn({1, tokens, d}).to(dt).requires_grad_();
  const Tensor g = randn({1, tokens, n, d}).to(dt), g_in = randn({1, tokens, d}).to(dt);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    for (const Tensor& t : {streams, out, hc.fn, hc.base, hc.scale, norm.weight}) t.zero_grad();
    const auto t0 = std::chrono::steady_clock::now();
    const models::HcMix m = fused ? hc.mix(streams, norm) : hc.mix_composed(streams, norm);
    const Tensor y = fused ? models::HyperConnection::fold(m, out, streams)
                           : models::HyperConnection::fold_composed(m, out, streams);
    autograd::backward({y, m.input}, {g, g_in});
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t n = 4;
  const double ceiling = bench::memcpy_gbps();
  std::printf(
      "MegaMHC vs the composed mHC ops, mix + norm + fold fwd+bwd, %lld tokens, hc_mult %lld,"
      " %d threads; memcpy %.1f GB/s\n",
      (long long)tokens, (long long)n, num_threads(), ceiling);
  for (int64_t d : {1024, 2048})
    for (DType dt : {DType::f32, DType::bf16}) {
      const double fused = time_block(true, tokens, n, d, dt);
      const double composed = time_block(false, tokens, n, d, dt);
      const double bytes = 16.0 * double(tokens) * double(n * d) * double(dtype_size(dt));
      const double peer =
          dt == DType::f32
              ? bench::run_peer("mhc.py", std::to_string(tokens) + " " + std::to_string(d) + " " +
                                              std::to_string(num_threads()))
              : std::nan("");
      std::printf(
          "hidden %5lld %-4s fused %8.2f ms (%5.1f GB/s, %.2fx memcpy)  composed %8.2f ms"
          "  speedup %.2fx  PyTorch %s ms (fused vs PyTorch %s)\n",
          (long long)d, std::string(dtype_name(dt)).c_str(), fused * 1e3, bytes / fused / 1e9,
          bytes / fused / 1e9 / ceiling, composed * 1e3, composed / fused,
          std::isnan(peer) ? "n/a" : std::to_string(peer * 1e3).substr(0, 7).c_str(),
          std::isnan(peer) ? "n/a" : bench::ratio_str(peer, fused).c_str());
    }
  return 0;
}
