// MX GEMM benchmark: hp::mx against the BF16 GEMM it must keep pace with (docs/ARCHITECTURE.md §4).
//
// Rows (every ratio is from one run: the variants are timed in turn within each iteration and
// each keeps its best wall time, so they are compared under the same machine load):
//   mx_gemm/MxNxK_l  C [M, N] = A [M, K]·B [N, K]ᵀ, bf16 output, operand layouts l (r rowwise_k,
//                    c colwise_k): 2048^3, M x 4096 x 4096 (rr), and 8192 tokens through a
//                    1024 -> 4096 linear: forward 8192x4096x1024 (rr), dgrad 8192x1024x4096 (rc),
//                    wgrad 4096x1024x8192 (cc).
//                    bf16_GFLOPs  kernels::gemm_bf16 on the same bf16 operands as stored (the
//                                 target's reference)
//                    mx_GFLOPs    mx::mx_gemm on pre-quantized E4M3 operands; mx_vs_bf16
//                    chain_GFLOPs quantize A and B from bf16, then mx_gemm; chain_vs_bf16
//                    cpu_*_vs_bf16 the same ratios from process CPU time (steadier under load)
//                    label: "bf16 panels" (native bf16 tile kernel) or "f32 panels" (sgemm)
//   grouped/T        8 experts, skewed token counts (T tokens), per-expert W [1024, 2048]:
//                    mx_grouped_gemm vs a loop of mx_gemm per expert vs a loop of gemm_bf16.
//   mx_linear/M      forward + backward of mx::mx_linear vs ops::linear, both on bf16 x [M, 4096]
//                    and bf16 weight [4096, 4096] (3 GEMMs each; MX includes all quantization).
// Without native bf16 the ceiling both are bounded by is f32 sgemm (bench_gemm: the bf16 path is
// widen + sgemm); with it, oneDNN's bf16 matmul (bench_gemm's dnnl_GFLOPs on bf16 rows).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/core/dtype.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"
#include "hp/mx/gemm.h"
#include "hp/mx/linear.h"
#include "hp/mx/quantize.h"
#include "hp/ops/ops.h"

namespace {

using hp::mx::MxLayout;
using hp::mx::MxOperand;

double wall_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Process CPU seconds (all threads) of one call: what the work costs however many other processes
// share the cores, so steadier than wall time on this machine.
double cpu_of(const auto& fn) {
  const double c0 = cpu_seconds();
  fn();
  return cpu_seconds() - c0;
}

std::vector<uint16_t> bf16_data(int64_t n, int salt) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = hp::f32_to_bf16(float(int((i * 7 + size_t(salt)) % 13) - 6) * 0.37f);
  return v;
}

// A [rows, K] operand quantized row-wise, or (colwise) stored [K, rows] and quantized column-wise.
struct Q {
  std::vector<uint8_t> codes, scales;
  bool colwise = false;
  Q(int64_t rows, int64_t K, bool col = false)
      : codes(size_t(rows * K)), scales(size_t(rows * ((K + 31) / 32))), colwise(col) {}
  // x as stored: [rows, K], or [K, rows] when colwise.
  void quantize(const std::vector<uint16_t>& x, int64_t rows, int64_t K) {
    if (colwise)
      hp::mx::quantize_colwise(x.data(), hp::DType::bf16, K, rows, {}, codes.data(), scales.data());
    else
      hp::mx::quantize_rowwise(x.data(), hp::DType::bf16, rows, K, {}, codes.data(), scales.data());
  }
  MxOperand op() const {
    return {codes.data(), scales.data(), {}, colwise ? MxLayout::colwise_k : MxLayout::rowwise_k};
  }
};

struct MxShape {
  int64_t M, N, K;
  bool a_col, b_col;
};

void bm_mx_gemm(benchmark::State& state, MxShape s) {
  const int64_t M = s.M, N = s.N, K = s.K;
  const auto a = bf16_data(M * K, 1), b = bf16_data(N * K, 2);
  std::vector<uint16_t> c(size_t(M * N));
  Q qa(M, K, s.a_col), qb(N, K, s.b_col);
  qa.quantize(a, M, K);
  qb.quantize(b, N, K);
  // The bf16 GEMM on the operands as stored: A [M, K] or [K, M]; B [N, K] or [K, N].
  auto bf16 = [&] {
    hp::kernels::gemm_bf16(s.a_col, !s.b_col, M, N, K, 1.0f, a.data(), s.a_col ? M : K, b.data(),
                           s.b_col ? N : K, 0.0f, c.data(), hp::DType::bf16, N);
  };
  auto mx = [&] { hp::mx::mx_gemm(qa.op(), qb.op(), M, N, K, c.data(), hp::DType::bf16); };
  auto chain = [&] {
    qa.quantize(a, M, K);
    qb.quantize(b, N, K);
    mx();
  };
  double t_bf16 = 1e30, t_mx = 1e30, t_chain = 1e30, c_bf16 = 1e30, c_mx = 1e30, c_chain = 1e30;
  for (auto _ : state) {
    double c = 0;
    t_bf16 = std::min(t_bf16, wall_of([&] { c = cpu_of(bf16); }));
    c_bf16 = std::min(c_bf16, c);
    const double t = wall_of([&] { c = cpu_of(mx); });
    c_mx = std::min(c_mx, c);
    state.SetIterationTime(t);
    t_mx = std::min(t_mx, t);
    t_chain = std::min(t_chain, wall_of([&] { c = cpu_of(chain); }));
    c_chain = std::min(c_chain, c);
  }
  state.counters["cpu_mx_vs_bf16"] = c_bf16 / c_mx;
  state.counters["cpu_chain_vs_bf16"] = c_bf16 / c_chain;
  const double gflop = 2e-9 * double(M) * double(N) * double(K);
  state.counters["bf16_GFLOPs"] = gflop / t_bf16;
  state.counters["mx_GFLOPs"] = gflop / t_mx;
  state.counters["chain_GFLOPs"] = gflop / t_chain;
  state.counters["mx_vs_bf16"] = t_bf16 / t_mx;
  state.counters["chain_vs_bf16"] = t_bf16 / t_chain;
  const bool bf16_panels = hp::mx::mx_gemm_uses_bf16(qa.op(), qb.op(), M, N, K);
  state.SetLabel(std::string(bf16_panels ? "bf16" : "f32") + " panels threads=" +
                 std::to_string(hp::num_threads()) +
                 " mx/bf16=" + hp::bench::ratio_str(1 / t_mx, 1 / t_bf16));
}

void bm_grouped(benchmark::State& state, int64_t T) {
  const int64_t E = 8, N = 1024, K = 2048;
  // Skewed routing: 35%, 20%, 15%, 10%, 8%, 6%, 4%, 2% of the tokens.
  const double share[E] = {0.35, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02};
  std::vector<int32_t> ends(E);
  double acc = 0;
  for (int64_t e = 0; e < E; ++e) {
    acc += share[e];
    ends[size_t(e)] = int32_t(e + 1 == E ? T : int64_t(acc * double(T)));
  }
  const auto x = bf16_data(T * K, 3), w = bf16_data(E * N * K, 4);
  std::vector<uint16_t> y(size_t(T * N));
  Q qx(T, K), qw(E * N, K);
  qx.quantize(x, T, K);
  qw.quantize(w, E * N, K);
  const int64_t nbk = K / 32;
  auto grouped = [&] {
    hp::mx::mx_grouped_gemm(qx.op(), qw.op(), ends.data(), E, T, N, K, y.data(), hp::DType::bf16);
  };
  auto mx_loop = [&] {
    int64_t s = 0;
    for (int64_t e = 0; e < E; ++e) {
      const MxOperand a{qx.codes.data() + s * K, qx.scales.data() + s * nbk, {}, {}};
      const MxOperand b{qw.codes.data() + e * N * K, qw.scales.data() + e * N * nbk, {}, {}};
      hp::mx::mx_gemm(a, b, ends[size_t(e)] - s, N, K, y.data() + s * N, hp::DType::bf16);
      s = ends[size_t(e)];
    }
  };
  auto bf16_loop = [&] {
    int64_t s = 0;
    for (int64_t e = 0; e < E; ++e) {
      hp::kernels::gemm_bf16(false, true, ends[size_t(e)] - s, N, K, 1.0f, x.data() + s * K, K,
                             w.data() + e * N * K, K, 0.0f, y.data() + s * N, hp::DType::bf16, N);
      s = ends[size_t(e)];
    }
  };
  double t_g = 1e30, t_loop = 1e30, t_bf16 = 1e30;
  for (auto _ : state) {
    const double t = wall_of(grouped);
    state.SetIterationTime(t);
    t_g = std::min(t_g, t);
    t_loop = std::min(t_loop, wall_of(mx_loop));
    t_bf16 = std::min(t_bf16, wall_of(bf16_loop));
  }
  const double gflop = 2e-9 * double(T) * double(N) * double(K);
  state.counters["grouped_GFLOPs"] = gflop / t_g;
  state.counters["mx_loop_GFLOPs"] = gflop / t_loop;
  state.counters["bf16_loop_GFLOPs"] = gflop / t_bf16;
  state.counters["grouped_vs_mx_loop"] = t_loop / t_g;
  state.counters["grouped_vs_bf16_loop"] = t_bf16 / t_g;
}

void bm_linear(benchmark::State& state, int64_t M) {
  const int64_t N = 4096, K = 4096;
  auto tensor = [](int64_t rows, int64_t cols, int salt) {
    const auto v = bf16_data(rows * cols, salt);
    hp::Tensor t = hp::empty({rows, cols}, hp::DType::bf16);
    std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(uint16_t));
    return t;
  };
  const hp::Tensor x0 = tensor(M, K, 5), w0 = tensor(N, K, 6), g = tensor(M, N, 7);
  auto step = [&](bool mx) {
    hp::Tensor x = x0.detach(), w = w0.detach();
    x.requires_grad_();
    w.requires_grad_();
    hp::Tensor y = mx ? hp::mx::mx_linear(x, w) : hp::linear(x, w);
    y.backward(g);
    w.zero_grad();
    x.zero_grad();
  };
  double t_mx = 1e30, t_bf16 = 1e30;
  for (auto _ : state) {
    const double t = wall_of([&] { step(true); });
    state.SetIterationTime(t);
    t_mx = std::min(t_mx, t);
    t_bf16 = std::min(t_bf16, wall_of([&] { step(false); }));
  }
  const double gflop = 3 * 2e-9 * double(M) * double(N) * double(K);
  state.counters["mx_GFLOPs"] = gflop / t_mx;
  state.counters["bf16_GFLOPs"] = gflop / t_bf16;
  state.counters["mx_vs_bf16"] = t_bf16 / t_mx;
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  const MxShape shapes[] = {{2048, 2048, 2048, false, false}, {2048, 4096, 4096, false, false},
                            {8192, 4096, 4096, false, false}, {8192, 4096, 1024, false, false},
                            {8192, 1024, 4096, false, true},  {4096, 1024, 8192, true, true}};
  for (const MxShape& s : shapes) {
    const std::string name = "mx_gemm/" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                             std::to_string(s.K) + "_" + (s.a_col ? "c" : "r") +
                             (s.b_col ? "c" : "r");
    benchmark::RegisterBenchmark(name.c_str(), bm_mx_gemm, s)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2.0 * s.M * s.N * s.K > 1e11 ? 2 : 3);
  }
  benchmark::RegisterBenchmark("grouped/8192", bm_grouped, int64_t(8192))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("mx_linear/2048", bm_linear, int64_t(2048))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
