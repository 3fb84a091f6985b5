// Multicore runtime: a chunked all-to-all → GEMM → all-to-all pipeline (multicore/pipeline.h)
// overlapped by the runtime vs the same plan run sequentially (each comm call posted and waited),
// at the shared-memory link of this host and with the link model (multicore/link.h) set to
// bandwidths that make communication 0.5×, 1× and 2× the compute time the sequential run measured
// without it. Prints per link: time of
// both, the ideal max(comm, compute), the fraction of communication hidden
// ((sequential − overlapped) / sequential comm time), the GEMM rate of the overlapped run and its
// ceiling (kernels::gemm_f32 at the same thread count on one chunk's shape, all ranks at once,
// measured in this run), and whether the results are bitwise equal.
//
// Run: build/hp launch -n 2 -- build/bench_multicore [rows K N chunks]
//   rows: per rank per chunk (default 512), K = N = 512, 8 chunks.
// Env: HP_MC_CUBE / HP_MC_VECTOR worker threads (default 1 / 1); HP_MC_REPS (default 5, best
// taken); HP_LINK_GBPS / HP_LINK_US: one fixed link instead of the sweep; HP_MC_TRACE=path writes
// the Chrome trace of the last overlapped run. Figures are the slowest rank's. Rank 0 prints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hp/core/thread_pool.h"
#include "hp/dist/communicator.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/multicore/pipeline.h"
#include "hp/multicore/runtime.h"
#include "hp/multicore/trace.h"
#include "hp/ops/ops.h"

namespace {

using namespace hp;
using namespace hp::multicore;

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

// The slowest rank's value.
double slowest(dist::Communicator& c, double v) {
  return c.all_reduce(from_data<double>({v}, {1}), dist::ReduceOp::max).data<double>()[0];
}

// Best-of-reps gemm_f32 GFLOP/s on [M, K] · [K, N] with the pool at the current thread count.
double gemm_ceiling(dist::Communicator& c, int64_t M, int64_t N, int64_t K, int reps) {
  Tensor a = randn({M, K}), b = randn({K, N}), out = empty({M, N});
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    kernels::gemm_f32(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
                      out.data<float>(), N);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return 2.0 * double(M) * double(N) * double(K) / slowest(c, best) / 1e9;
}

struct Row {
  double seq_s = 1e30, ovl_s = 1e30, comm_s = 1e30;
  bool equal = true;
};

Row measure(dist::Communicator& c, AllToAllGemm& p, const RuntimeOptions& o, int reps,
            RunTrace* last) {
  Row row;
  Runtime rt(o);
  for (int r = 0; r < reps; ++r) {
    c.barrier();
    const RunTrace seq = run_sequential(p.plan, o.link);
    const Tensor want = p.plan.buffer(p.out).clone();
    c.barrier();
    *last = rt.run(p.plan);
    const Tensor& got = p.plan.buffer(p.out);
    row.equal = row.equal && std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) == 0;
    row.seq_s = std::min(row.seq_s, seq.seconds());
    row.ovl_s = std::min(row.ovl_s, last->seconds());
    row.comm_s = std::min(row.comm_s, double(seq.busy_ns(p.plan, Role::comm)) * 1e-9);
  }
  row.seq_s = slowest(c, row.seq_s);
  row.ovl_s = slowest(c, row.ovl_s);
  row.comm_s = slowest(c, row.comm_s);
  row.equal = slowest(c, row.equal ? 0.0 : 1.0) == 0.0;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = dist::world();
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t K = argc > 2 ? std::atoll(argv[2]) : 512, N = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t chunks = argc > 4 ? std::atoll(argv[4]) : 8;
  const int reps = env_int("HP_MC_REPS", 5);
  RuntimeOptions o = RuntimeOptions::from_env();
  o.cube_threads = env_int("HP_MC_CUBE", 1);
  o.vector_threads = env_int("HP_MC_VECTOR", 1);
  o.rank = comm->rank();
  // The sequential baseline and the ceiling use as many GEMM threads as the runtime's cube group.
  set_num_threads(o.cube_threads);
  manual_seed(1);
  Tensor w = randn({K, N});
  manual_seed(10 + uint64_t(comm->rank()));
  AllToAllGemm p = all_to_all_gemm(comm, randn({chunks * rows, K}), w, chunks);

  const double ceiling = gemm_ceiling(*comm, rows, N, K, reps);
  const double chunk_gemm_s = 2.0 * double(rows * N * K) / (ceiling * 1e9);
  // Per chunk, both all-to-alls send (size−1)/size of [rows, K] and [rows, N] f32.
  const double chunk_bytes = double(rows / comm->size() * (comm->size() - 1) * (K + N) * 4);
  const bool root = comm->rank() == 0;
  if (root) {
    std::printf(
        "ranks %d, %lld chunks of [%lld, %lld] · [%lld, %lld] per rank, cube %d + vector %d"
        " + comm threads per rank, best of %d\n",
        comm->size(), (long long)chunks, (long long)rows, (long long)K, (long long)K, (long long)N,
        o.cube_threads, o.vector_threads, reps);
    std::printf(
        "GEMM ceiling: %.1f GFLOP/s per rank (gemm_f32, %d thread(s), all ranks at once); "
        "%.2f ms per chunk\n",
        ceiling, o.cube_threads, chunk_gemm_s * 1e3);
    std::printf("%-22s %8s %9s %9s %9s %8s %11s %6s\n", "link", "comm/gemm", "seq ms", "ovl ms",
                "ideal ms", "hidden", "GEMM GF/s", "equal");
  }
  RunTrace last;
  auto report = [&](const std::string& name, const LinkModel& link) {
    o.link = link;
    const Row r = measure(*comm, p, o, reps, &last);
    const double compute_s = r.seq_s - r.comm_s;
    const double hidden = std::clamp((r.seq_s - r.ovl_s) / r.comm_s, 0.0, 1.0);
    if (root) {
      char label[64];
      std::snprintf(label, sizeof label, "%s %.3g GB/s", name.c_str(), link.gbps);
      std::printf("%-22s %8.2f %9.2f %9.2f %9.2f %7.0f%% %11.1f %6s\n",
                  link.active() ? label : name.c_str(), r.comm_s / compute_s, r.seq_s * 1e3,
                  r.ovl_s * 1e3, std::max(r.comm_s, compute_s) * 1e3, hidden * 100.0,
                  p.gemm_flops() / r.ovl_s / 1e9, r.equal ? "yes" : "NO");
    }
    return compute_s;
  };
  if (o.link.active()) {
    report("env", o.link);
  } else if (chunk_bytes == 0) {
    report("one rank (no link)", {});
  } else {
    // The sweep's bandwidths come from the compute time this run's sequential baseline measured
    // (closer to the target ratios on a loaded machine than the ceiling's).
    const double chunk_compute_s = slowest(*comm, report("host (no model)", {})) / double(chunks);
    for (double ratio : {0.5, 1.0, 2.0}) {
      LinkModel m;
      m.gbps = chunk_bytes / (ratio * chunk_compute_s) / 1e9;
      report("model " + std::to_string(ratio).substr(0, 3) + "x", m);
    }
  }
  if (const char* path = std::getenv("HP_MC_TRACE"); path && *path) {
    write_chrome_trace(path, p.plan, last, *comm);
    if (root) std::printf("trace of the last overlapped run: %s\n", path);
  }
  return 0;
}
