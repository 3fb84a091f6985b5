// Collective bandwidth under MPI, as nccl-tests define it (S = bytes of the full tensor, t = time):
//   algbw = S / t; busbw = algbw · 2(W-1)/W (all_reduce) or · (W-1)/W (all_gather, reduce_scatter,
//   all_to_all). Printed next to single-thread memcpy bandwidth (the shared-memory ceiling), plus
//   an overlap figure: the fraction of a non-blocking all-gather hidden behind a GEMM.
// Run by hand: mpirun --allow-run-as-root --oversubscribe -np 2 build/bench_collectives
// (or build/hp launch -n 4 -- build/bench_collectives). Rank 0 prints.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "hp/dist/communicator.h"
#include "hp/ops/ops.h"

namespace {
using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& f, int iters) {
  f();
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}
}  // namespace

int main() {
  using namespace hp;
  auto c = dist::world();
  const int w = c->size();
  const bool root = c->rank() == 0;
  if (root)
    std::printf("ranks %d\n%-15s %12s %10s %10s\n", w, "op", "bytes", "algbw GB/s", "busbw GB/s");
  for (int64_t bytes : {int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24}) {
    int64_t n = bytes / 4 / w * w;  // f32 elements, divisible by the rank count
    Tensor full = ones({n}), part = ones({n / w});
    int iters = bytes <= (1 << 16) ? 200 : 20;
    struct Row {
      const char* name;
      double factor;
      std::function<void()> f;
    };
    std::vector<Row> rows = {
        {"all_reduce", 2.0 * (w - 1) / w, [&] { c->all_reduce(full); }},
        {"all_gather", double(w - 1) / w, [&] { c->all_gather(part); }},
        {"reduce_scatter", double(w - 1) / w, [&] { c->reduce_scatter(full); }},
        {"all_to_all", double(w - 1) / w, [&] { c->all_to_all(full); }},
    };
    for (auto& r : rows) {
      c->barrier();
      double t = seconds(r.f, iters);
      double alg = static_cast<double>(n * 4) / t / 1e9;
      if (root)
        std::printf("%-15s %12lld %10.2f %10.2f\n", r.name, (long long)(n * 4), alg,
                    alg * r.factor);
    }
    std::vector<char> a(static_cast<size_t>(bytes)), b(static_cast<size_t>(bytes));
    double t = seconds([&] { std::memcpy(b.data(), a.data(), a.size()); }, iters);
    if (root) std::printf("%-15s %12lld %10.2f\n", "memcpy", (long long)bytes, bytes / t / 1e9);
  }
  // Overlap: GEMM alone, all-gather alone, and both (all-gather in flight during the GEMM).
  Tensor x = randn({384, 384}), shard = ones({(int64_t{1} << 22) / w});
  double t_gemm = seconds([&] { matmul(x, x); }, 5);
  double t_comm = seconds([&] { c->all_gather(shard); }, 5);
  double t_both = seconds(
      [&] {
        auto work = c->iall_gather(shard);
        matmul(x, x);
        work->wait();
      },
      5);
  double hidden = (t_gemm + t_comm - t_both) / std::min(t_gemm, t_comm);
  if (root)
    std::printf("overlap: gemm %.2f ms, all_gather(16 MiB) %.2f ms, both %.2f ms, hidden %.0f%%\n",
                t_gemm * 1e3, t_comm * 1e3, t_both * 1e3, 100 * std::max(0.0, hidden));
  return 0;
}
