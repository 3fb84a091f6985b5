// Multicore runtime over real MPI: a chunked all-to-all → GEMM → all-to-all pipeline whose comm
// tasks overlap its GEMM tasks equals the same plan run sequentially, bitwise, for several worker
// counts, and equals x · w; the gathered Chrome trace has one process per rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "hp/core/random.h"
#include "hp/dist/communicator.h"
#include "hp/io/json.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/multicore/pipeline.h"
#include "hp/multicore/runtime.h"
#include "hp/multicore/trace.h"
#include "hp/ops/ops.h"

namespace hp::multicore {
namespace {

// Rank r's x [chunks·rows, K] and the shared w [K, N].
std::pair<Tensor, Tensor> inputs(int rank, int64_t chunks, int64_t rows, int64_t K, int64_t N) {
  manual_seed(7);
  Tensor w = randn({K, N});
  manual_seed(100 + uint64_t(rank));
  return {randn({chunks * rows, K}), w};
}

TEST(MulticoreMpi, AllToAllGemmPipelineMatchesSequential) {
  auto comm = dist::world();
  const int64_t chunks = 4, rows = 48 * comm->size(), K = 96, N = 80;
  auto [x, w] = inputs(comm->rank(), chunks, rows, K, N);
  AllToAllGemm ref = all_to_all_gemm(comm, x, w, chunks);
  run_sequential(ref.plan);
  const Tensor& want = ref.plan.buffer(ref.out);

  // Rows come back to where they left, so out = x · w on every rank.
  Tensor local = empty({chunks * rows, N});
  kernels::gemm_f32(false, false, chunks * rows, N, K, 1.0f, x.data<float>(), K, w.data<float>(), N,
                    0.0f, local.data<float>(), N);
  for (int64_t i = 0; i < local.numel(); ++i)
    ASSERT_NEAR(want.data<float>()[i], local.data<float>()[i], 1e-4) << "element " << i;

  for (auto [cube, vector] : {std::pair{1, 1}, {2, 1}, {1, 2}}) {
    AllToAllGemm p = all_to_all_gemm(comm, x, w, chunks);
    // A join on the fan-in of every combine: out's row sums, in row order.
    const BufferId sums = p.plan.add_buffer("row sums", empty({chunks * rows}));
    p.plan.add_vector(
        "row sums", {p.out}, {sums}, chunks * rows, 64,
        [&, out = p.out, sums](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            float acc = 0;
            for (int64_t j = 0; j < N; ++j) acc += ctx.data<float>(out)[r * N + j];
            ctx.data<float>(sums)[r] = acc;
          }
        },
        {{{p.combined, chunks}}, kNoEvent});
    RuntimeOptions o;
    o.cube_threads = cube;
    o.vector_threads = vector;
    o.rank = comm->rank();
    Runtime rt(o);
    for (int rep = 0; rep < 2; ++rep) {
      rt.run(p.plan);
      const Tensor& got = p.plan.buffer(p.out);
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0)
          << "cube " << cube << " vector " << vector << " rep " << rep;
      float last = 0;
      for (int64_t j = 0; j < N; ++j) last += want.data<float>()[(chunks * rows - 1) * N + j];
      EXPECT_EQ(p.plan.buffer(sums).data<float>()[chunks * rows - 1], last);
    }
  }
}

// With a modelled link of 20 ms per call, chunk c+1's dispatch is in flight while chunk c's GEMM
// runs: the trace shows a comm span overlapping a cube span on every rank. The link is slow beside
// the GEMM (well under 1 ms) so that a worker thread descheduled on a loaded machine (3-4 ranks on
// 2 cores in CI) still starts its GEMM inside the window.
TEST(MulticoreMpi, CommOverlapsGemm) {
  auto comm = dist::world();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto [x, w] = inputs(comm->rank(), 4, 32 * comm->size(), 256, 256);
  AllToAllGemm p = all_to_all_gemm(comm, x, w, 4);
  RuntimeOptions o;
  o.rank = comm->rank();
  o.link.latency_us = 20000;
  const RunTrace t = Runtime(o).run(p.plan);
  bool overlap = false;
  for (const Span& a : t.spans)
    for (const Span& b : t.spans)
      overlap = overlap ||
                (p.plan.task(a.task).role == Role::comm && p.plan.task(b.task).role == Role::cube &&
                 a.t0_ns < b.t1_ns && b.t0_ns < a.t1_ns);
  EXPECT_TRUE(overlap);
  // Four chunks, two calls each on a serial 20 ms link: the run takes at least 160 ms.
  EXPECT_GE(t.seconds(), 0.160);
}

TEST(MulticoreMpi, GatheredTraceHasEveryRank) {
  auto comm = dist::world();
  auto [x, w] = inputs(comm->rank(), 3, 16 * comm->size(), 32, 24);
  AllToAllGemm p = all_to_all_gemm(comm, x, w, 3);
  RuntimeOptions o;
  o.rank = comm->rank();
  const RunTrace t = Runtime(o).run(p.plan);
  // Every rank names the same file; only rank 0 writes it.
  const std::string path =
      (std::filesystem::temp_directory_path() / "hp_multicore_mpitest_trace.json").string();
  write_chrome_trace(path, p.plan, t, *comm);
  if (comm->rank() == 0) {
    const io::Json doc = io::parse_json(io::read_text_file(path, "test"), path);
    std::set<std::pair<int64_t, int64_t>> lanes;
    std::set<int64_t> pids;
    for (const io::Json& ev : doc.at("traceEvents").elements()) {
      if (ev.get_string("ph") == "M" && ev.get_string("name") == "thread_name")
        lanes.insert({ev.get_int("pid"), ev.get_int("tid")});
      if (ev.get_string("ph") == "X") pids.insert(ev.get_int("pid"));
    }
    EXPECT_EQ(int64_t(lanes.size()), 3 * comm->size());  // cube 0, vector 0, comm per rank
    EXPECT_EQ(int64_t(pids.size()), comm->size());
    std::filesystem::remove(path);
  }
  comm->barrier();
}

}  // namespace
}  // namespace hp::multicore
