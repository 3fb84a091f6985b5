// Context-parallel attention (parallel/context_parallel.h), causal f32 forward + backward over one
// sequence of L tokens split over the launched ranks (cp = world size):
//   - time per step and tokens/s for ring and Ulysses, beside one rank running the whole sequence
//     with as many threads as there are cp ranks (the same cores), and PyTorch's
//     scaled_dot_product_attention on that shape and thread count (the peer, where installed);
//   - GFLOP/s per rank against the f32 GEMM rate of one core (the ceiling);
//   - ring attention's exposed communication (time the least-blocked rank waits for the next K/V or
//     dK/dV block) against its communication time (the same hops sent alone, back to back, without
//     the attention).
// Run under MPI: build/hp launch -n 2 -- build/bench_context_parallel [L] [Hq] [Hkv] [D]
// (defaults 16384 8 2 64). FLOPs as bench_attention: fwd + bwd = 7·L²·D per query head (causal).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_common.h"
#include "hp/core/random.h"
#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/ops/ops.h"
#include "hp/parallel/context_parallel.h"

namespace {

using namespace hp;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


struct AttnShape {
  int64_t len, hq, hkv, d;
};

// Best-of-3 seconds of one forward + backward of `attend` on [1, H, T, D] operands.
template <class Attend>
double time_fwd_bwd(const AttnShape& s, int64_t t, Attend attend) {
  manual_seed(1);
  Tensor q = randn({1, s.hq, t, s.d}).requires_grad_(), k = randn({1, s.hkv, t, s.d}).requires_grad_(),
         v = randn({1, s.hkv, t, s.d}).requires_grad_(), g = randn({1, s.hq, t, s.d});
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    for (const Tensor& x : {q, k, v}) x.zero_grad();
    const auto t0 = std::chrono::steady_clock::now();
    sum(mul(attend(q, k, v), g)).backward();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// The ring's hops alone: (n−1) K/V hops forward, (n−2) K/V and (n−1) dK/dV hops backward.
double time_ring_hops(const AttnShape& s, int64_t t, const dist::CommPtr& comm) {
  const int n = comm->size(), r = comm->rank();
  Tensor kv = zeros({2, 1, s.hkv, t, s.d});
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int hop = 0; hop < 3 * n - 4; ++hop) {
      auto send = comm->isend(kv, (r + 1) % n, 21);
      kv = comm->irecv(kv.shape(), DType::f32, (r - 1 + n) % n, 21)->result();
      send->wait();
    }
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = dist::world();
  const int n = world->size(), rank = world->rank();
  const AttnShape s{argc > 1 ? std::atoll(argv[1]) : 16384, argc > 2 ? std::atoll(argv[2]) : 8,
                argc > 3 ? std::atoll(argv[3]) : 2, argc > 4 ? std::atoll(argv[4]) : 64};
  const int64_t t = s.len / n;
  const double flops = 7.0 * double(s.len) * double(s.len) * double(s.d) * double(s.hq);
  openblas_set_num_threads(1);
  const double gemm = bench::sgemm_attention_gflops(10);
  set_num_threads(1);
  if (rank == 0)
    std::printf("context-parallel attention, causal f32 fwd+bwd: L %lld, Hq %lld, Hkv %lld, D %lld, "
                "cp %d (one thread per rank)\nceiling: f32 GEMM %.1f GFLOP/s per core (OpenBLAS "
                "sgemm 2048x2048x64, 1 thread)\n",
                (long long)s.len, (long long)s.hq, (long long)s.hkv, (long long)s.d, n, gemm);
  // max over ranks of a per-rank figure
  auto slowest = [&](double x) {
    return world->all_reduce(from_data<double>({x}, {1}), dist::ReduceOp::max).to_vector()[0];
  };
  auto attend_with = [&](parallel::ContextMethod method) {
    return [&, method](const Tensor& q, const Tensor& k, const Tensor& v) {
      return parallel::context_attention(q, k, v, 0.0, method, world);
    };
  };
  double ring_s = 0;
  for (auto method : {parallel::ContextMethod::ring, parallel::ContextMethod::alltoall}) {
    const bool ring = method == parallel::ContextMethod::ring;
    if (!ring && s.hq % n != 0) continue;
    const parallel::RingStats before = parallel::ring_stats();
    world->barrier();
    const double sec = slowest(time_fwd_bwd(s, t, attend_with(method)));
    const double blocked = (parallel::ring_stats().exposed_s - before.exposed_s) / 3.0;
    if (ring) ring_s = sec;
    if (rank == 0)
      std::printf("%-8s %8.1f ms  %8.0f tokens/s  %6.1f GFLOP/s per rank (%.2fx the core's GEMM)\n",
                  ring ? "ring" : "alltoall", sec * 1e3, double(s.len) / sec,
                  flops / sec / n / 1e9, flops / sec / n / 1e9 / gemm);
    if (!ring) continue;
    // Exposed communication = the ring's step − the same blocks computed without sending
    // anything; its communication time = the same hops sent alone, back to back.
    const bool was = parallel::detail::ring_skip_communication(true);
    world->barrier();
    const double compute_only = slowest(time_fwd_bwd(s, t, attend_with(method)));
    parallel::detail::ring_skip_communication(was);
    const double hops = slowest(time_ring_hops(s, t, world));
    // Blocked time in the ring's waits counts a slower neighbour too; the least-blocked rank is
    // the one its neighbours wait for, so its blocked time is the communication left exposed on
    // the critical path. The step difference is printed beside it (noisy: seconds against ms).
    const double least_blocked =
        world->all_reduce(from_data<double>({blocked}, {1}), dist::ReduceOp::min).to_vector()[0];
    const double most_blocked = slowest(blocked);
    if (rank == 0)
      std::printf("ring communication: %.2f ms for its %d hops alone; blocked in waits per step: "
                  "%.2f ms on the least-blocked rank (exposed: %.0f%% of the communication time), "
                  "%.2f ms on the most-blocked (includes waiting for a slower neighbour); step "
                  "%.1f ms vs %.1f ms computing the same blocks without sending\n",
                  hops * 1e3, 3 * n - 4, least_blocked * 1e3, 100.0 * least_blocked / hops,
                  most_blocked * 1e3, sec * 1e3, compute_only * 1e3);
  }
  // One rank, the whole sequence, n threads (the same cores), and PyTorch on that shape.
  world->barrier();
  if (rank == 0) {
    set_num_threads(n);
    const double one = time_fwd_bwd(s, s.len, [](const Tensor& q, const Tensor& k, const Tensor& v) {
      return scaled_dot_product_attention(q, k, v, true);
    });
    const std::string args = "1 " + std::to_string(s.hq) + " " + std::to_string(s.hkv) + " " +
                             std::to_string(s.len) + " " + std::to_string(s.d) + " " +
                             std::to_string(n);
    const double peer = bench::run_peer("attention.py", args);
    std::printf("1 rank, %d threads: %8.1f ms  %8.0f tokens/s; ring cp %d / 1 rank: %.2fx\n", n,
                one * 1e3, double(s.len) / one, n, one / ring_s);
    if (std::isnan(peer))
      std::printf("PyTorch sdpa: n/a (torch not importable by $HP_PEER_PYTHON or python3)\n");
    else
      std::printf("PyTorch sdpa, %d threads: %.1f ms; ring cp %d vs PyTorch: %s (> 1: faster)\n",
                  n, peer * 1e3, n, bench::ratio_str(peer, ring_s).c_str());
  }
  world->barrier();
  return 0;
}
