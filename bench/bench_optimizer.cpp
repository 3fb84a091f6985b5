// The optimizer phase of a training step on configs/bench_5m.yaml's parameters (5,261,568 f32):
// the global gradient norm with clipping, then AdamW. Rows:
//   fused      global_grad_norm, then Optimizer::step(lr, clip_factor): the trainer's path (two
//              passes: the norm reads g, the update reads g, p, m, v and writes p, m, v)
//   in_place   clip_grad_norm (norm, then g *= factor) then step(lr): one pass more
//   warm       fused, with the operands left in cache by the previous call
// each on every SIMD ISA the CPU has (the AdamW kernel is per ISA, bitwise the same on all).
// Ceiling: the fused path's 32 bytes per parameter at the memcpy rate of the same threads
// (bench_common.h). Peer: PyTorch clip_grad_norm_ + AdamW(fused=True) on the same shapes and
// thread count (bench/peers/optimizer.py: warm caches, so only the warm rows get a ratio to it).
// Best of 20 calls each, every call after 512 MiB of other writes (as a training step's
// activations evict the 84 MB of parameters, gradients and moments from this CPU's 260 MiB L3),
// and `warm` rows without them; the gradients are clipped every call (norm ~2300 > 1), as in the
// first steps of a run.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/dist/communicator.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/optim/grad.h"
#include "hp/optim/optimizer.h"

namespace {

using namespace hp;

std::vector<optim::NamedTensor> bench_5m_parameters() {
  std::vector<std::pair<std::string, Shape>> shapes = {
      {"embed", {4096, 256}}, {"lm_head", {4096, 256}}, {"norm", {256}}};
  for (int l = 0; l < 4; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* n : {"q", "k", "v", "o"}) shapes.push_back({p + n, {256, 256}});
    shapes.push_back({p + "gate", {688, 256}});
    shapes.push_back({p + "up", {688, 256}});
    shapes.push_back({p + "down", {256, 688}});
    shapes.push_back({p + "norm1", {256}});
    shapes.push_back({p + "norm2", {256}});
  }
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<optim::NamedTensor> out;
  for (const auto& [name, shape] : shapes) {
    Tensor p = zeros(shape), g = zeros(shape);
    for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = 0.02f * normal(rng);
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = normal(rng);
    p.set_grad(g);
    out.push_back({name, p});
  }
  return out;
}

// Best seconds of `reps` calls of fn, each after writing `evict` bytes elsewhere (0: none).
double best_seconds_after(const std::function<void()>& fn, int reps, std::vector<char>& evict) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    parallel_for(0, static_cast<int64_t>(evict.size()), int64_t(1) << 20,
                 [&](int64_t b, int64_t e) {
                   std::memset(evict.data() + b, r & 0xff, static_cast<size_t>(e - b));
                 });
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // call 0 warms up
  }
  return best;
}

}  // namespace

int main() {
  auto params = bench_5m_parameters();
  int64_t n = 0;
  for (const auto& [name, p] : params) n += p.numel();
  optim::OptimizerOptions o;
  o.adamw.beta2 = 0.95;
  o.adamw.weight_decay = 0.1;
  optim::Optimizer opt(params, o);
  const std::vector<Tensor> ps = opt.parameters();
  std::vector<Tensor> grads;
  for (const Tensor& p : ps) grads.push_back(p.grad());
  const dist::CommPtr world = dist::world();  // a world of one (no mpirun)
  // Each call restores the gradients first: the in-place clip rewrites them.
  auto restore = [&] {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(grads[i]);
  };
  const double gbps = bench::memcpy_gbps();
  const double ceiling_ms = 32.0 * double(n) / (gbps * 1e9) * 1e3;
  const double peer_s = bench::run_peer("optimizer.py", std::to_string(num_threads()));
  std::printf("bench_optimizer: %lld f32 parameters (bench_5m), %d threads; memcpy %.1f GB/s\n",
              static_cast<long long>(n), num_threads(), gbps);
  std::printf("%-8s %-9s %9s %12s %12s\n", "isa", "path", "best_ms", "vs_ceiling", "vs_pytorch");
  std::printf("%-8s %-9s %9.2f %12s %12s\n", "-", "ceiling", ceiling_ms, "1.00x", "");
  std::vector<char> evict(size_t(512) << 20), none;
  for (kernels::Isa isa : {kernels::Isa::scalar, kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (!kernels::isa_supported(isa)) continue;
    kernels::set_active_isa(isa);
    for (int row = 0; row < 3; ++row) {
      const bool fused = row != 1, warm = row == 2;
      const double s = best_seconds_after(
          [&] {
            if (fused) {
              const double norm = optim::global_grad_norm(ps, {}, *world);
              opt.step(1e-3, optim::clip_factor(norm, 1.0));
            } else {
              optim::clip_grad_norm(ps, 1.0);
              opt.step(1e-3);
              restore();
            }
          },
          20, warm ? none : evict);
      // Ratios as speeds: > 1 is faster than the ceiling's time / the peer's.
      std::printf("%-8s %-9s %9.2f %12s %12s\n", kernels::isa_name(isa),
                  warm    ? "warm"
                  : fused ? "fused"
                          : "in_place",
                  s * 1e3, bench::ratio_str(ceiling_ms / 1e3, s).c_str(),
                  warm ? bench::ratio_str(peer_s, s).c_str() : "-");
    }
  }
  kernels::reset_active_isa();
  std::printf("%-8s %-9s %9.2f\n", "pytorch", "fused", peer_s * 1e3);
  return 0;
}
