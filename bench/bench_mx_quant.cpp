// MXFP8 quantization bandwidth (row-wise, column-wise, dual; f32 and bf16 input) against the
// memcpy ceiling measured in the same run and the peer (torchao's to_mx on CPU, when the Python in
// $HP_PEER_PYTHON has it), and the SNR of random-normal data per format and scale mode. Bytes
// counted = input read + codes and scales written. E4M3, rceil.
//
//   HP_PEER_PYTHON=/work/venv/bin/python ./build/bench_mx_quant [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/mx/quantize.h"

namespace {

using namespace hp;

constexpr int64_t kRows = 4096, kCols = 4096;  // 16 Mi elements: 64 MiB f32, 32 MiB bf16

// The ceiling is re-measured next to every benchmark (the machine is shared, so a figure from
// minutes earlier is not comparable).
double memcpy_ceiling() {
  return bench::memcpy_gbps();
}

struct Inputs {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Inputs() : f32(kRows * kCols), bf16(kRows * kCols) {
    std::mt19937 gen(1);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < f32.size(); ++i) {
      f32[i] = nd(gen) * (1.0f + static_cast<float>(i % 977));
      bf16[i] = f32_to_bf16(f32[i]);
    }
  }
};

const Inputs& inputs() {
  static const Inputs in;
  return in;
}

enum Axis { kRow, kCol, kDual };
const char* axis_name(int64_t a) {
  return a == kRow ? "row" : a == kCol ? "col" : "dual";
}

struct Result {
  double gbps = 0, memcpy_gbps = 0;
};
// Best figure per (axis, bf16) over every invocation Google Benchmark makes, for the summary.
std::map<std::pair<int64_t, int64_t>, Result>& results() {
  static std::map<std::pair<int64_t, int64_t>, Result> r;
  return r;
}

void BM_quant(benchmark::State& state) {
  const Axis axis = static_cast<Axis>(state.range(0));
  const DType dt = state.range(1) ? DType::bf16 : DType::f32;
  const void* x = dt == DType::bf16 ? static_cast<const void*>(inputs().bf16.data())
                                    : static_cast<const void*>(inputs().f32.data());
  const int64_t n = kRows * kCols;
  std::vector<uint8_t> rc(n, 1), rs(n / 32, 1), cc(n, 1), cs(n / 32, 1);
  const mx::QuantSpec spec{};  // rceil, E4M3
  auto run = [&] {
    if (axis == kRow)
      mx::quantize_rowwise(x, dt, kRows, kCols, spec, rc.data(), rs.data());
    else if (axis == kCol)
      mx::quantize_colwise(x, dt, kRows, kCols, spec, cc.data(), cs.data());
    else
      mx::quantize_dual(x, dt, kRows, kCols, spec, rc.data(), rs.data(), cc.data(), cs.data());
  };
  run();  // warm the pages
  const double ceiling_before = memcpy_ceiling();
  double best = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  const int64_t outputs = axis == kDual ? 2 : 1;
  const double bytes =
      static_cast<double>(n * static_cast<int64_t>(dtype_size(dt)) + outputs * (n + n / 32));
  const double gbps = bytes / best / 1e9;
  const double ceiling = std::max(ceiling_before, memcpy_ceiling());
  state.counters["GB/s"] = gbps;
  state.counters["memcpy_GB/s"] = ceiling;
  state.counters["vs_memcpy"] = gbps / ceiling;
  Result& best_result = results()[{state.range(0), state.range(1)}];
  if (gbps > best_result.gbps) best_result = {gbps, ceiling};
  state.SetLabel(std::string(axis_name(axis)) + " " + std::string(dtype_name(dt)) +
                 " [4096,4096] best-of, threads=" + std::to_string(num_threads()) +
                 " isa=" + std::string(kernels::isa_name(kernels::active_isa())));
}
BENCHMARK(BM_quant)
    ->ArgsProduct({{kRow, kCol, kDual}, {0, 1}})
    ->ArgNames({"axis", "bf16"})
    ->UseManualTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);

// Summary table with the memcpy ratio and the torchao peer (n/a when unavailable).
void print_summary() {
  std::printf("\n| axis | input | GB/s | memcpy GB/s | vs memcpy | torchao GB/s | vs torchao |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& [key, r] : results()) {
    const char* dt = key.second ? "bf16" : "f32";
    const double peer =
        bench::run_peer("mx_quant_torchao.py", std::string(axis_name(key.first)) + " " + dt);
    char peer_buf[32];
    std::snprintf(peer_buf, sizeof peer_buf, "%.3f", peer);
    const std::string peer_str = std::isnan(peer) ? "n/a" : peer_buf;
    std::printf("| %s | %s | %.2f | %.2f | %.2f | %s | %s |\n", axis_name(key.first), dt, r.gbps,
                r.memcpy_gbps, r.gbps / r.memcpy_gbps, peer_str.c_str(),
                bench::ratio_str(r.gbps, peer).c_str());
  }
}

// SNR (dB) of row-wise quantize → dequantize on N(0, 1) data, 1 Mi elements.
void print_snr() {
  const int64_t rows = 1024, cols = 1024;
  std::vector<float> x(rows * cols), y(rows * cols);
  std::mt19937 gen(2);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(gen);
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
  std::printf("\nSNR of random-normal data (row-wise, [1024, 1024]):\n");
  std::printf("| format | scale mode | SNR (dB) |\n|---|---|---|\n");
  for (auto elem : {mx::ElemFormat::e4m3, mx::ElemFormat::e5m2})
    for (auto mode : {mx::ScaleMode::floor, mx::ScaleMode::rceil}) {
      mx::quantize_rowwise(x.data(), DType::f32, rows, cols, {elem, mode}, codes.data(),
                           scales.data());
      mx::dequantize_rowwise(codes.data(), scales.data(), rows, cols, elem, y.data(), DType::f32);
      double sig = 0, err = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        sig += double(x[i]) * x[i];
        err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      }
      std::printf("| %s | %s | %.2f |\n", std::string(mx::elem_format_name(elem)).c_str(),
                  std::string(mx::scale_mode_name(mode)).c_str(), 10 * std::log10(sig / err));
    }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  print_snr();
  return 0;
}
