// Elementwise ops and rms_norm: GB/s (bytes read + written) beside the memcpy ceiling measured in
// the same run and the PyTorch peer (bench/peers/elementwise.py, same op, shape and threads).
//
//   HP_PEER_PYTHON=/work/venv/bin/python build/bench_elementwise
//
// Counters: GB/s, vs_memcpy (fraction of memcpy GB/s), peer_GB/s, vs_peer. The *_into variants
// write into a preallocated output: their difference to the plain op is the cost of a fresh 64 MiB
// output (allocation + first-touch page faults). BM_in_cache runs the same kernels on 64 Ki
// elements (L2-resident) into a preallocated output and reports ns per element per thread: the
// compute cost without the memory bound (an op is bandwidth-bound on 64 MiB when this times the
// element rate memcpy allows is below 1).
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/ops/ops.h"

namespace {

using hp::DType;
using hp::Tensor;
using hp::kernels::EwOp;

constexpr int64_t kBytes = int64_t(64) << 20;  // per tensor
constexpr int64_t kRows = 16384, kDim = 1024;  // rms_norm: [16384, 1024] f32 = 64 MiB

double memcpy_ceiling() {
  static const double g = hp::bench::memcpy_gbps(size_t(kBytes));
  return g;
}

double peer(const std::string& op, const std::string& dt) {
  static std::map<std::string, double> cache;
  const std::string key = op + " " + dt + " " + std::to_string(hp::num_threads());
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache[key] = hp::bench::run_peer("elementwise.py", key);
}

void report(benchmark::State& state, double bytes, const std::string& op, const std::string& dt,
            bool with_peer = true) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9 * iters, benchmark::Counter::kIsRate);
  // Ratios as rates too: (bytes / ceiling) per second = GB/s / ceiling.
  state.counters["vs_memcpy"] =
      benchmark::Counter(bytes / 1e9 / memcpy_ceiling() * iters, benchmark::Counter::kIsRate);
  if (!with_peer) return;
  const double p = peer(op, dt);
  state.counters["peer_GB/s"] = p;
  if (p > 0)
    state.counters["vs_peer"] =
        benchmark::Counter(bytes / 1e9 / p * iters, benchmark::Counter::kIsRate);
}

Tensor random_tensor(const hp::Shape& shape, DType dt) {
  return hp::randn(shape, DType::f32).to(dt);
}

void BM_binary(benchmark::State& state, EwOp op, const char* name, DType dt, bool into) {
  const int64_t n = kBytes / static_cast<int64_t>(hp::dtype_size(dt));
  Tensor a = random_tensor({n}, dt), b = random_tensor({n}, dt), out = hp::empty({n}, dt);
  for (auto _ : state) {
    if (into) {
      hp::kernels::elementwise_into(op, out, a, b);
    } else {
      Tensor y = hp::kernels::elementwise(op, a, b, dt);
      benchmark::DoNotOptimize(y.raw_data());
    }
  }
  report(state, 3.0 * kBytes, name, std::string(hp::dtype_name(dt)), !into);
}

void BM_unary(benchmark::State& state, EwOp op, const char* name, DType dt, bool into) {
  const int64_t n = kBytes / static_cast<int64_t>(hp::dtype_size(dt));
  Tensor a = random_tensor({n}, dt), out = hp::empty({n}, dt);
  for (auto _ : state) {
    if (into) {
      hp::kernels::elementwise_into(op, out, a, Tensor());
    } else {
      Tensor y = hp::kernels::elementwise(op, a);
      benchmark::DoNotOptimize(y.raw_data());
    }
  }
  report(state, 2.0 * kBytes, name, std::string(hp::dtype_name(dt)), !into);
}

void BM_rms_norm(benchmark::State& state) {
  Tensor x = random_tensor({kRows, kDim}, DType::f32), w = random_tensor({kDim}, DType::f32);
  hp::autograd::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = hp::rms_norm(x, w, 1e-6);
    benchmark::DoNotOptimize(y.raw_data());
  }
  report(state, 2.0 * kBytes, "rms_norm", "f32");
}

void BM_rms_norm_fwd_bwd(benchmark::State& state) {
  Tensor x = random_tensor({kRows, kDim}, DType::f32), w = random_tensor({kDim}, DType::f32);
  Tensor g = random_tensor({kRows, kDim}, DType::f32);
  x.requires_grad_(), w.requires_grad_();
  for (auto _ : state) {
    Tensor y = hp::rms_norm(x, w, 1e-6);
    y.backward(g);
    x.zero_grad(), w.zero_grad();
  }
  // forward: read x, write y; backward: read g and x, write dx (the [n] parts are negligible).
  report(state, 5.0 * kBytes, "rms_norm_fb", "f32");
}

void BM_memcpy(benchmark::State& state) {
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  for (auto _ : state) {
    hp::bench::parallel_copy(b.data(), a.data(), kBytes);
    benchmark::DoNotOptimize(b.data());
  }
  report(state, 2.0 * kBytes, "", "", false);
}

// A fresh 64 MiB tensor written once (allocation + page faults + one write stream) vs writing an
// already-touched buffer: the cost every out-of-place op above pays for its output.
void BM_fresh_output(benchmark::State& state) {
  const bool fresh = state.range(0) != 0;
  Tensor keep = hp::empty({kBytes / 4}, DType::f32);
  std::memset(keep.raw_data(), 0, kBytes);
  for (auto _ : state) {
    Tensor t = fresh ? hp::empty({kBytes / 4}, DType::f32) : keep;
    std::memset(t.raw_data(), 1, kBytes);
    benchmark::DoNotOptimize(t.raw_data());
  }
  report(state, 1.0 * kBytes, "", "", false);
}

// ns_per_elem: CPU time of the calling thread per element (run with HP_NUM_THREADS=1, where the
// kernel runs on that thread: the per-core compute cost, steadier than wall time on a shared
// machine); the 64 Ki-element tensors fit in L2, so memory bandwidth does not bound it.
void BM_in_cache(benchmark::State& state, EwOp op, DType dt) {
  const int64_t n = int64_t(64) << 10;
  Tensor a = random_tensor({n}, dt), b = random_tensor({n}, dt), out = hp::empty({n}, dt);
  const bool binary = hp::kernels::ew_arity(op) == 2;
  for (auto _ : state) hp::kernels::elementwise_into(op, out, a, binary ? b : Tensor());
  state.counters["ns_per_elem"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_fresh_output)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
#define HP_EW_BENCH(fn, op, name)                                           \
  BENCHMARK_CAPTURE(fn, name##_f32, EwOp::op, #name, DType::f32, false)     \
      ->Unit(benchmark::kMillisecond)                                       \
      ->UseRealTime();                                                      \
  BENCHMARK_CAPTURE(fn, name##_f32_into, EwOp::op, #name, DType::f32, true) \
      ->Unit(benchmark::kMillisecond)                                       \
      ->UseRealTime();                                                      \
  BENCHMARK_CAPTURE(fn, name##_bf16, EwOp::op, #name, DType::bf16, false)   \
      ->Unit(benchmark::kMillisecond)                                       \
      ->UseRealTime();
HP_EW_BENCH(BM_binary, add, add)
HP_EW_BENCH(BM_binary, mul, mul)
HP_EW_BENCH(BM_unary, silu, silu)
HP_EW_BENCH(BM_unary, gelu, gelu)
HP_EW_BENCH(BM_binary, silu_bwd, silu_bwd)  // (x, dy) -> dx
HP_EW_BENCH(BM_binary, gelu_bwd, gelu_bwd)
#define HP_EW_IN_CACHE(op)                                                             \
  BENCHMARK_CAPTURE(BM_in_cache, op##_f32, EwOp::op, DType::f32);                     \
  BENCHMARK_CAPTURE(BM_in_cache, op##_bf16, EwOp::op, DType::bf16);
HP_EW_IN_CACHE(add)
HP_EW_IN_CACHE(mul)
HP_EW_IN_CACHE(silu)
HP_EW_IN_CACHE(gelu)
HP_EW_IN_CACHE(gelu_tanh)
HP_EW_IN_CACHE(exp)
HP_EW_IN_CACHE(silu_bwd)
HP_EW_IN_CACHE(gelu_bwd)
BENCHMARK(BM_rms_norm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_rms_norm_fwd_bwd)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
