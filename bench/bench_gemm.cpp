// GEMM benchmark: hp::kernels::gemm_f32 / gemm_bf16 beside the raw libraries and PyTorch.
//
// Each row reports, from the same run:
//   GFLOPs       hp's best-of GFLOP/s (2·M·N·K per call)
//   ceil_GFLOPs  OpenBLAS sgemm called directly on the same shape with its own threads (= hp
//                threads), and vs_ceil = GFLOPs / ceil_GFLOPs. On a CPU newer than the
//                OpenBLAS build (it names its core "Prescott", the SSE3 fallback: Emerald Rapids
//                with Debian's 0.3.21) this is no ceiling; read vs_dnnl there, or run with
//                OPENBLAS_CORETYPE=SkylakeX
//   cpu_GFLOPs, ceil_cpu_GFLOPs   the same per CPU-second of the process (all threads): steadier
//                than wall time when other processes share the cores
//   dnnl_GFLOPs  oneDNN matmul called directly on the whole problem with its own OpenMP threads
//                (= hp threads), in the row's dtype (bf16 rows: bf16 × bf16 → f32; only where
//                oneDNN has a native bf16 kernel), and vs_dnnl = GFLOPs / dnnl_GFLOPs
//   f32_GFLOPs   bf16 rows: hp's gemm_f32 on the same shape, and bf16_vs_f32 = GFLOPs / f32_GFLOPs
//   peer_GFLOPs  torch.matmul, same shape/dtype/threads (bench/peers/gemm.py), and vs_peer
//                (rows without trans_a; the peer has no transposed A)
// Shapes: square NN, and LLM linears: forward Y[T, N] = X[T, K]·W[N, K]ᵀ (trans_b), dgrad
// dX[T, K] = dY[T, N]·W[N, K] (NN) and wgrad dW[N, K] = dYᵀ·X (trans_a, M = N, K = T).
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
  bool trans_a, trans_b;
  int64_t lda() const { return trans_a ? M : K; }
  int64_t ldb() const { return trans_b ? K : N; }
};

// Operands for one shape: A [M, K] or [K, M], B [K, N] or [N, K], C [M, N]; f32 and bf16 copies.
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

CBLAS_TRANSPOSE cblas_op(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

// OpenBLAS sgemm on the shape with its own threads (= hp threads): the ceiling.
void openblas_sgemm(const Shape& s, Operands& o) {
  openblas_set_num_threads(hp::num_threads());
  cblas_sgemm(CblasRowMajor, cblas_op(s.trans_a), cblas_op(s.trans_b), s.M, s.N, s.K, 1.0f,
              o.a.data(), s.lda(), o.b.data(), s.ldb(), 0.0f, o.c.data(), s.N);
  openblas_set_num_threads(1);
}

// oneDNN matmul on the whole shape with its own OpenMP threads (primitive created once per row,
// outside the timing): f32, or bf16 × bf16 → f32. Throws dnnl::error where oneDNN has no such
// matmul; `native` is false where it has only its reference kernel.
class DnnlMatmul {
 public:
  DnnlMatmul(const Shape& s, Operands& o, bool bf16) : strm_(engine()) {
    using namespace dnnl;
    const auto in = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const auto ab = memory::format_tag::ab, ba = memory::format_tag::ba;
    memory::desc ad({s.M, s.K}, in, s.trans_a ? ba : ab);
    memory::desc bd({s.K, s.N}, in, s.trans_b ? ba : ab);
    memory::desc cd({s.M, s.N}, memory::data_type::f32, ab);
    const matmul::primitive_desc pd(matmul::desc(ad, bd, cd), engine());
    native = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
    prim_ = matmul(pd);
    a_ = memory(ad, engine(), bf16 ? static_cast<void*>(o.a16.data()) : o.a.data());
    b_ = memory(bd, engine(), bf16 ? static_cast<void*>(o.b16.data()) : o.b.data());
    c_ = memory(cd, engine(), o.c.data());
  }
  void run() {
    prim_.execute(strm_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    strm_.wait();
  }
  bool native = false;

 private:
  static dnnl::engine& engine() {
    static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
  }
  dnnl::stream strm_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
};

std::unique_ptr<DnnlMatmul> make_dnnl(const Shape& s, Operands& o, bool bf16) {
  try {
    auto d = std::make_unique<DnnlMatmul>(s, o, bf16);
    if (d->native) return d;
  } catch (const dnnl::error&) {
  }
  return nullptr;  // no native oneDNN matmul for this dtype here (bf16 on AVX2)
}

// The machine is shared, so the load changes from second to second: hp, the ceiling and oneDNN
// are timed in turn within every iteration and each keeps its best time, so the ratios compare
// runs made under the same conditions.
void bm_gemm(benchmark::State& state, Shape s, hp::DType dt) {
  Operands o(s);
  const bool f32 = dt == hp::DType::f32;
  auto run_f32 = [&] {
    hp::kernels::gemm_f32(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, o.a.data(), s.lda(),
                          o.b.data(), s.ldb(), 0.0f, o.c.data(), s.N);
  };
  auto run = [&] {
    if (f32)
      run_f32();
    else
      hp::kernels::gemm_bf16(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, o.a16.data(), s.lda(),
                             o.b16.data(), s.ldb(), 0.0f, o.c.data(), hp::DType::f32, s.N);
  };
  std::unique_ptr<DnnlMatmul> dnnl = make_dnnl(s, o, !f32);
  run();
  if (!f32) run_f32();
  openblas_sgemm(s, o);
  if (dnnl) dnnl->run();
  Timing best, best_f32, best_ceil, best_dnnl;
  for (auto _ : state) {
    const Timing t = time_of(run);
    state.SetIterationTime(t.wall);
    best.keep_best(t);
    if (!f32) best_f32.keep_best(time_of(run_f32));
    best_ceil.keep_best(time_of([&] { openblas_sgemm(s, o); }));
    if (dnnl) best_dnnl.keep_best(time_of([&] { dnnl->run(); }));
  }
  const double gflop = 2e-9 * double(s.M) * double(s.N) * double(s.K);
  const double ours = gflop / best.wall, ceil = gflop / best_ceil.wall;
  const std::string args = std::to_string(s.M) + " " + std::to_string(s.N) + " " +
                           std::to_string(s.K) + (f32 ? " f32 " : " bf16 ") +
                           std::to_string(hp::num_threads()) + (s.trans_b ? " 1" : " 0");
  const double peer = s.trans_a ? NAN : hp::bench::run_peer("gemm.py", args);
  state.counters["GFLOPs"] = ours;
  state.counters["ceil_GFLOPs"] = ceil;
  state.counters["vs_ceil"] = ours / ceil;
  state.counters["cpu_GFLOPs"] = gflop / best.cpu;
  state.counters["ceil_cpu_GFLOPs"] = gflop / best_ceil.cpu;
  std::string label = std::string(f32 ? "f32" : "bf16->f32") + (s.trans_a ? " T" : " N") +
                      (s.trans_b ? "T" : "N") + " threads=" + std::to_string(hp::num_threads());
  if (dnnl) {
    const double d = gflop / best_dnnl.wall;
    state.counters["dnnl_GFLOPs"] = d;
    state.counters["vs_dnnl"] = ours / d;
    label += " dnnl=" + hp::bench::ratio_str(ours, d);
  }
  if (!f32) {
    const double ours_f32 = gflop / best_f32.wall;
    state.counters["f32_GFLOPs"] = ours_f32;
    state.counters["bf16_vs_f32"] = ours / ours_f32;
    label += " f32=" + hp::bench::ratio_str(ours, ours_f32);
  }
  state.counters["peer_GFLOPs"] = std::isnan(peer) ? 0.0 : peer;
  state.counters["vs_peer"] = std::isnan(peer) ? 0.0 : ours / peer;
  state.SetLabel(label + " peer=" + hp::bench::ratio_str(ours, peer));
}

void register_all() {
  // The LLM rows: 8192 tokens through a 1024 -> 4096 linear (forward, dgrad, wgrad) and the
  // 4096 -> 1024 one back; then the small-K linears of configs/bench_5m.yaml.
  const Shape shapes[] = {{512, 512, 512, false, false},    {1024, 1024, 1024, false, false},
                          {2048, 2048, 2048, false, false}, {4096, 4096, 4096, false, false},
                          {2048, 4096, 1024, false, true},  {2048, 1024, 4096, false, true},
                          {8192, 4096, 1024, false, true},  {8192, 1024, 4096, false, false},
                          {4096, 1024, 8192, true, false},  {8192, 1024, 4096, false, true},
                          // bench_5m's linears (2048 tokens, hidden 256, intermediate 688, vocab
                          // 4096): projections, gate/up, down, and the head forward/dgrad/wgrad.
                          {2048, 256, 256, false, true},    {2048, 688, 256, false, true},
                          {2048, 256, 688, false, true},    {2048, 4096, 256, false, true},
                          {2048, 256, 4096, false, false},  {4096, 256, 2048, true, false}};
  for (hp::DType dt : {hp::DType::f32, hp::DType::bf16})
    for (const Shape& s : shapes) {
      const std::string name = std::string("gemm_") + (dt == hp::DType::f32 ? "f32" : "bf16") +
                               "/" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                               std::to_string(s.K) + (s.trans_a ? "_t" : "_n") +
                               (s.trans_b ? "t" : "n");
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
