// GEMM benchmark: hp::kernels::gemm_f32 / gemm_bf16 beside the raw libraries and PyTorch.
//
// Each row reports, from the same run:
//   GFLOPs       hp's best-of GFLOP/s (2·M·N·K per call)
//   ceil_GFLOPs  the ceiling: OpenBLAS sgemm called directly on the same shape with its own
//                threads (= hp threads). For bf16 rows it is the same f32 sgemm: oneDNN 2.6 has no
//                bf16 matmul on AVX2, so the best the libraries reach for this math is f32 sgemm.
//   vs_ceil      GFLOPs / ceil_GFLOPs
//   cpu_GFLOPs, ceil_cpu_GFLOPs   the same per CPU-second of the process (all threads): steadier
//                than wall time when other processes share the cores
//   dnnl_GFLOPs  oneDNN matmul called directly (f32 rows; OpenMP, OMP_NUM_THREADS = hp threads)
//   peer_GFLOPs  torch.matmul, same shape/dtype/threads (bench/peers/gemm.py), and vs_peer
// Shapes: square NN, and LLM linears Y[M, N] = X[M, K]·W[N, K]ᵀ (trans_b).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/core/dtype.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"

namespace {

struct Shape {
  int64_t M, N, K;
  bool trans_b;
};

// Operands for one shape: A [M, K], B [K, N] or [N, K], C [M, N]; f32 and bf16 copies.
struct Operands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
  explicit Operands(const Shape& s)
      : a(size_t(s.M * s.K)), b(size_t(s.K * s.N)), c(size_t(s.M * s.N)) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 13) - 6) * 0.0625f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 11) - 5) * 0.125f;
    a16.resize(a.size());
    b16.resize(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = hp::f32_to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = hp::f32_to_bf16(b[i]);
  }
};

// Wall and process CPU seconds (all threads) of one call. CPU time is what the work costs no
// matter how many other processes share the cores; spinning threads count against it too.
struct Timing {
  double wall = 1e30, cpu = 1e30;
  void keep_best(const Timing& t) {
    wall = std::min(wall, t.wall);
    cpu = std::min(cpu, t.cpu);
  }
};

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

Timing time_of(const auto& fn) {
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  Timing t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.cpu = cpu_seconds() - c0;
  return t;
}

// OpenBLAS sgemm on the shape with its own threads (= hp threads): the ceiling.
void openblas_sgemm(const Shape& s, Operands& o) {
  openblas_set_num_threads(hp::num_threads());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N, s.K,
              1.0f, o.a.data(), s.K, o.b.data(), s.trans_b ? s.K : s.N, 0.0f, o.c.data(), s.N);
  openblas_set_num_threads(1);
}

// oneDNN f32 matmul on the shape (primitive created once per row, outside the timing).
class DnnlF32 {
 public:
  DnnlF32(const Shape& s, Operands& o) : strm_(engine()) {
    using namespace dnnl;
    const auto f32 = memory::data_type::f32;
    memory::desc ad({s.M, s.K}, f32, memory::format_tag::ab);
    memory::desc bd({s.K, s.N}, f32, s.trans_b ? memory::format_tag::ba : memory::format_tag::ab);
    memory::desc cd({s.M, s.N}, f32, memory::format_tag::ab);
    prim_ = matmul(matmul::primitive_desc(matmul::desc(ad, bd, cd), engine()));
    a_ = memory(ad, engine(), o.a.data());
    b_ = memory(bd, engine(), o.b.data());
    c_ = memory(cd, engine(), o.c.data());
  }
  void run() {
    prim_.execute(strm_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    strm_.wait();
  }

 private:
  static dnnl::engine& engine() {
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
  }
  dnnl::stream strm_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
};

// The machine is shared, so the load changes from second to second: hp, the ceiling and oneDNN
// are timed in turn within every iteration and each keeps its best time, so the ratios compare
// runs made under the same conditions.
void bm_gemm(benchmark::State& state, Shape s, hp::DType dt) {
  Operands o(s);
  const bool f32 = dt == hp::DType::f32;
  const int64_t ldb = s.trans_b ? s.K : s.N;
  auto run = [&] {
    if (f32)
      hp::kernels::gemm_f32(false, s.trans_b, s.M, s.N, s.K, 1.0f, o.a.data(), s.K, o.b.data(), ldb,
                            0.0f, o.c.data(), s.N);
    else
      hp::kernels::gemm_bf16(false, s.trans_b, s.M, s.N, s.K, 1.0f, o.a16.data(), s.K, o.b16.data(),
                             ldb, 0.0f, o.c.data(), hp::DType::f32, s.N);
  };
  std::unique_ptr<DnnlF32> dnnl;
  if (f32) dnnl = std::make_unique<DnnlF32>(s, o);
  run();
  openblas_sgemm(s, o);
  if (dnnl) dnnl->run();
  Timing best, best_ceil, best_dnnl;
  for (auto _ : state) {
    const Timing t = time_of(run);
    state.SetIterationTime(t.wall);
    best.keep_best(t);
    best_ceil.keep_best(time_of([&] { openblas_sgemm(s, o); }));
    if (dnnl) best_dnnl.keep_best(time_of([&] { dnnl->run(); }));
  }
  const double gflop = 2e-9 * double(s.M) * double(s.N) * double(s.K);
  const double ours = gflop / best.wall, ceil = gflop / best_ceil.wall;
  const std::string args = std::to_string(s.M) + " " + std::to_string(s.N) + " " +
                           std::to_string(s.K) + (f32 ? " f32 " : " bf16 ") +
                           std::to_string(hp::num_threads()) + (s.trans_b ? " 1" : " 0");
  const double peer = hp::bench::run_peer("gemm.py", args);
  state.counters["GFLOPs"] = ours;
  state.counters["ceil_GFLOPs"] = ceil;
  state.counters["vs_ceil"] = ours / ceil;
  state.counters["cpu_GFLOPs"] = gflop / best.cpu;
  state.counters["ceil_cpu_GFLOPs"] = gflop / best_ceil.cpu;
  if (dnnl) state.counters["dnnl_GFLOPs"] = gflop / best_dnnl.wall;
  state.counters["peer_GFLOPs"] = std::isnan(peer) ? 0.0 : peer;
  state.counters["vs_peer"] = std::isnan(peer) ? 0.0 : ours / peer;
  state.SetLabel(std::string(f32 ? "f32" : "bf16->f32") + (s.trans_b ? " NT" : " NN") +
                 " threads=" + std::to_string(hp::num_threads()) +
                 " peer=" + hp::bench::ratio_str(ours, peer));
}

void register_all() {
  const Shape shapes[] = {{512, 512, 512, false},    {1024, 1024, 1024, false},
                          {2048, 2048, 2048, false}, {4096, 4096, 4096, false},
                          {2048, 4096, 1024, true},  {2048, 1024, 4096, true},
                          {8192, 4096, 1024, true},  {8192, 1024, 4096, true}};
  for (hp::DType dt : {hp::DType::f32, hp::DType::bf16})
    for (const Shape& s : shapes) {
      const std::string name = std::string("gemm_") + (dt == hp::DType::f32 ? "f32" : "bf16") +
                               "/" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                               std::to_string(s.K) + (s.trans_b ? "_nt" : "_nn");
      benchmark::RegisterBenchmark(name.c_str(), bm_gemm, s, dt)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(2.0 * s.M * s.N * s.K > 5e10 ? 3 : 8);
    }
}

}  // namespace

int main(int argc, char** argv) {
  // oneDNN (Debian's build) threads with OpenMP: give it the same thread count as hp.
  setenv("OMP_NUM_THREADS", std::to_string(hp::num_threads()).c_str(), 0);
  openblas_set_num_threads(1);
  register_all();
  benchmark::Initialize(&argc, argv);
  // The peaks the trainer's MFU divides by (hp::kernels::gemm_peak_gflops, 2048^3).
  for (hp::DType dt : {hp::DType::f32, hp::DType::bf16})
    benchmark::AddCustomContext(std::string("gemm_peak_gflops_") + std::string(hp::dtype_name(dt)),
                                std::to_string(hp::kernels::gemm_peak_gflops(dt)));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
