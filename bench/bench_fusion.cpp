// DVM fusion engine (docs/FUSION.md): fused regions against the hand-written kernels and against
// the unfused chain of eager ops, on 64 MiB f32 tensors, beside the memcpy ceiling measured in the
// same run and the PyTorch peer (bench/peers/fusion.py: the same composed expressions, eager).
//
//   HP_PEER_PYTHON=/work/venv/bin/python build/bench_fusion
//
// Each benchmark reports its best iteration (the machine is shared). The summary at the end gives
// the ratios from this one invocation: fused / hand kernel (target <= 1.1) and the time
// saved against the unfused chain (target >= 75%), plus the compile median of a 10-op cluster and
// the cache-hit time (trace + lookup of a compiled signature).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/thread_pool.h"
#include "hp/fusion/fuse.h"
#include "hp/fusion/mode.h"
#include "hp/fusion/patterns.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/ops/ops.h"

namespace {

using hp::DType;
using hp::Tensor;
using hp::fusion::Var;
using VarList = std::vector<Var>;

constexpr int64_t kElems = (int64_t(64) << 20) / 4;  // one 64 MiB f32 tensor
constexpr int64_t kRows = 16384, kDim = 1024;        // [16384, 1024] f32 = 64 MiB

std::map<std::string, double>& best_ms() {
  static std::map<std::string, double> m;
  return m;
}

double memcpy_ceiling() {
  static const double g = hp::bench::memcpy_gbps(size_t(kElems) * 4);
  return g;
}

double peer_ms(const std::string& op) {
  static std::map<std::string, double> cache;
  const std::string key = op + " " + std::to_string(hp::num_threads());
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache[key] = hp::bench::run_peer("fusion.py", key);
}

// fn's best iteration in seconds after one warm-up call (compile, first touch), recorded as
// best_ms()[key] and the best_ms counter.
template <class Fn>
double best_time(benchmark::State& state, const std::string& key, Fn fn) {
  fn();
  double best = 1e30;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  best_ms()[key] = best * 1e3;
  state.counters["best_ms"] = best * 1e3;
  return best;
}

// Times fn's best iteration; bytes = the bytes a perfect kernel moves (read + write).
template <class Fn>
void timed(benchmark::State& state, const std::string& key, double bytes, Fn fn,
           const std::string& peer = "") {
  hp::autograd::NoGradGuard no_grad;
  const double best = best_time(state, key, fn);
  state.counters["GB/s"] = bytes / best / 1e9;
  state.counters["vs_memcpy"] = bytes / best / 1e9 / memcpy_ceiling();
  if (peer.empty()) return;
  const double p = peer_ms(peer);
  state.counters["peer_ms"] = p;
  state.SetLabel("vs torch " + hp::bench::ratio_str(p, best * 1e3));
}

Var silu_composed(Var x) {
  return x * hp::fusion::sigmoid(x);
}
Var gelu_tanh_composed(Var x) {
  return 0.5 * x * (1.0 + hp::fusion::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

const Tensor& big_x() {
  static const Tensor x = [] {
    hp::manual_seed(0);
    return hp::randn({kElems});
  }();
  return x;
}

void BM_memcpy(benchmark::State& state) {
  std::vector<char> a(size_t(kElems) * 4, 1), b(size_t(kElems) * 4, 2);
  timed(state, "memcpy", 2.0 * kElems * 4,
        [&] { hp::bench::parallel_copy(b.data(), a.data(), a.size()); });
}

// variant: 0 fused composed, 1 hand kernel, 2 unfused chain of eager ops
void BM_silu(benchmark::State& state) {
  const Tensor& x = big_x();
  static const hp::fusion::Fused f =
      hp::fusion::fuse([](const VarList& v) { return VarList{silu_composed(v[0])}; });
  const char* names[] = {"silu/fused", "silu/hand", "silu/chain"};
  const int v = static_cast<int>(state.range(0));
  timed(
      state, names[v], 2.0 * kElems * 4,
      [&] {
        Tensor y = v == 0 ? f({x})[0] : v == 1 ? hp::silu(x) : hp::mul(x, hp::sigmoid(x));
        benchmark::DoNotOptimize(y.raw_data());
      },
      v == 2 ? "silu_composed" : "");
}

void BM_gelu_tanh(benchmark::State& state) {
  const Tensor& x = big_x();
  static const hp::fusion::Fused f =
      hp::fusion::fuse([](const VarList& v) { return VarList{gelu_tanh_composed(v[0])}; });
  const char* names[] = {"gelu_tanh/fused", "gelu_tanh/hand", "gelu_tanh/chain"};
  const int v = static_cast<int>(state.range(0));
  timed(
      state, names[v], 2.0 * kElems * 4,
      [&] {
        Tensor y;
        if (v == 0)
          y = f({x})[0];
        else if (v == 1)
          y = hp::gelu(x, "tanh");
        else
          y = hp::mul(
              hp::mul(x, 0.5),
              hp::add(hp::tanh(hp::mul(hp::add(x, hp::mul(hp::mul(hp::mul(x, x), x), 0.044715)),
                                       0.7978845608028654)),
                      1.0));
        benchmark::DoNotOptimize(y.raw_data());
      },
      v == 2 ? "gelu_tanh_composed" : "");
}

// The same regions on an L2-resident tensor (256 KiB): the compute cost of running the program as
// routine calls over L1 tiles, without the memory bound. "fused" regions are canonicalized
// (fusion/simplify.h: x·sigmoid(x) runs silu, the composed GELU gelu_tanh); "chain" is the same
// graph as traced (patterns off: its primitive ops in register-resident chains, option (b) of
// issue 18's note); "primitives" is SiLU written with neg, exp, add, div and mul only.
void BM_in_cache(benchmark::State& state) {
  static const Tensor x = hp::randn({int64_t(64) << 10});
  auto silu_fn = [](const VarList& v) { return VarList{silu_composed(v[0])}; };
  auto gelu_fn = [](const VarList& v) { return VarList{gelu_tanh_composed(v[0])}; };
  static const hp::fusion::Fused silu_f = hp::fusion::fuse(silu_fn),
                                 gelu_f = hp::fusion::fuse(gelu_fn),
                                 silu_chain = hp::fusion::fuse(silu_fn, "silu", false),
                                 gelu_chain = hp::fusion::fuse(gelu_fn, "gelu_tanh", false),
                                 silu_prim = hp::fusion::fuse([](const VarList&v) {
                                   return VarList{v[0] * (1.0 / (1.0 + hp::fusion::exp(-v[0])))};
                                 });
  const char* names[] = {"in_cache/silu/fused",      "in_cache/silu/hand",
                         "in_cache/gelu_tanh/fused", "in_cache/gelu_tanh/hand",
                         "in_cache/silu/chain",      "in_cache/gelu_tanh/chain",
                         "in_cache/silu/primitives"};
  const int v = static_cast<int>(state.range(0));
  const hp::fusion::Fused* regions[] = {&silu_f,     nullptr,     &gelu_f,   nullptr,
                                        &silu_chain, &gelu_chain, &silu_prim};
  timed(state, names[v], 2.0 * x.numel() * 4, [&] {
    Tensor y = regions[v] ? (*regions[v])({x})[0] : v == 1 ? hp::silu(x) : hp::gelu(x, "tanh");
    benchmark::DoNotOptimize(y.raw_data());
  });
}

const Tensor& rows_x() {
  static const Tensor x = [] {
    hp::manual_seed(1);
    return hp::randn({kRows, kDim});
  }();
  return x;
}

VarList softmax_region(const VarList& v) {
  // As the hand kernel: one reciprocal per row, then a multiply.
  Var e = hp::fusion::exp(v[0] - hp::fusion::amax(v[0]));
  return VarList{e * hp::fusion::reciprocal(hp::fusion::sum(e))};
}

// variant: 0 fused (the softmax stencil), 1 hand kernel, 2 the generic program (patterns off)
void BM_softmax(benchmark::State& state) {
  const Tensor& x = rows_x();
  static const hp::fusion::Fused f = hp::fusion::fuse(softmax_region);
  static const hp::fusion::Fused generic = hp::fusion::fuse(softmax_region, "softmax", false);
  const int v = static_cast<int>(state.range(0));
  const char* names[] = {"softmax/fused", "softmax/hand", "softmax/generic"};
  timed(
      state, names[v], 2.0 * kElems * 4,
      [&] {
        Tensor y = v == 0 ? f({x})[0] : v == 1 ? hp::softmax(x, -1) : generic({x})[0];
        benchmark::DoNotOptimize(y.raw_data());
      },
      v == 1 ? "softmax" : "");
}

VarList rms_norm_region(const VarList& v) {
  return VarList{v[0] * hp::fusion::rsqrt(hp::fusion::mean(v[0] * v[0]) + 1e-6) * v[1]};
}

// variant: 0 fused (the RMSNorm stencil: fusion/stencils.h), 1 hand kernel, 2 the generic
// program of the same graph (patterns off)
void BM_rms_norm(benchmark::State& state) {
  const Tensor& x = rows_x();
  static const Tensor w = hp::randn({kDim});
  static const hp::fusion::Fused f = hp::fusion::fuse(rms_norm_region);
  static const hp::fusion::Fused generic = hp::fusion::fuse(rms_norm_region, "rms_norm", false);
  const int v = static_cast<int>(state.range(0));
  const char* names[] = {"rms_norm/fused", "rms_norm/hand", "rms_norm/generic"};
  timed(
      state, names[v], 2.0 * kElems * 4,
      [&] {
        Tensor y = v == 0 ? f({x, w})[0] : v == 1 ? hp::rms_norm(x, w, 1e-6) : generic({x, w})[0];
        benchmark::DoNotOptimize(y.raw_data());
      },
      v == 1 ? "rms_norm" : "");
}

// Forward + backward: the fused region's recorded vjp against the hand kernels' autograd.
// RMSNorm·w: [16384, 1024]; SwiGLU silu(gate) · up on two [16384, 1024] tensors.
void BM_fwd_bwd(benchmark::State& state) {
  // 0 rms fused (stencil), 1 rms hand, 2 swiglu fused, 3 swiglu hand, 4 rms generic program
  const int v = static_cast<int>(state.range(0));
  static const Tensor w = hp::randn({kDim});
  static const Tensor up = hp::randn({kRows, kDim});
  static const Tensor g = hp::randn({kRows, kDim});
  static const hp::fusion::Fused rms = hp::fusion::fuse(rms_norm_region, "rms_norm");
  static const hp::fusion::Fused rms_generic = hp::fusion::fuse(rms_norm_region, "rms_norm", false);
  static const hp::fusion::Fused swiglu = hp::fusion::fuse(
      [](const VarList& a) { return VarList{a[0] * hp::fusion::sigmoid(a[0]) * a[1]}; }, "swiglu");
  const char* names[] = {"rms_norm_fb/fused", "rms_norm_fb/hand", "swiglu_fb/fused",
                         "swiglu_fb/hand", "rms_norm_fb/generic"};
  Tensor x = rows_x().detach().clone(), w2 = w.detach().clone(), u = up.detach().clone();
  x.requires_grad_(), w2.requires_grad_(), u.requires_grad_();
  auto step = [&] {
    Tensor y;
    if (v == 0)
      y = rms({x, w2})[0];
    else if (v == 1)
      y = hp::rms_norm(x, w2, 1e-6);
    else if (v == 2)
      y = swiglu({x, u})[0];
    else if (v == 4)
      y = rms_generic({x, w2})[0];
    else
      y = hp::mul(hp::silu(x), u);
    y.backward(g);
    x.zero_grad(), w2.zero_grad(), u.zero_grad();
  };
  best_time(state, names[v], step);
}

// The models' patterns (fusion/patterns.h) forward + backward at configs/bench_5m.yaml's shapes
// (8 × 256 tokens): SwiGLU on [2048, 688] fused (bf16: mode lazy, f32: mode auto, which fuses it)
// against none (eager silu then mul), RMSNorm·w bf16 on [2048, 256] in mode lazy against none
// (the hand kernel). What training.fusion changes per call in that run.
void BM_model_patterns(benchmark::State& state) {
  const int v = static_cast<int>(state.range(0));
  const char* names[] = {"model_swiglu_bf16/fused",   "model_swiglu_bf16/none",
                         "model_swiglu_f32/fused",    "model_swiglu_f32/none",
                         "model_rms_norm_bf16/fused", "model_rms_norm_bf16/none"};
  const bool swiglu = v < 4, fused = v % 2 == 0;
  const DType dt = v == 2 || v == 3 ? DType::f32 : DType::bf16;
  const int64_t rows = 2048, n = swiglu ? 688 : 256;
  auto leaf = [](Tensor t) {
    t.requires_grad_();
    return t;
  };
  hp::manual_seed(3);
  Tensor a = leaf(hp::randn({rows, n}).to(dt));
  Tensor b = leaf(swiglu ? hp::randn({rows, n}).to(dt) : hp::randn({n}).to(dt));
  const Tensor g = hp::randn({rows, n}).to(dt);
  using hp::fusion::Mode;
  const hp::fusion::ModeScope mode(!fused             ? Mode::none
                                   : dt == DType::f32 ? Mode::auto_
                                                      : Mode::lazy);
  auto step = [&] {
    Tensor y = swiglu ? hp::fusion::swiglu(a, b) : hp::fusion::rms_norm(a, b, 1e-6);
    y.backward(g);
    a.zero_grad(), b.zero_grad();
  };
  best_time(state, names[v], step);
}

// A 10-op cluster: trace + compile (a fresh callable each time: always a miss), and the cache hit.
VarList ten_ops(const VarList& v) {
  Var x = v[0];
  Var y = hp::fusion::exp(x * 0.5) + hp::fusion::tanh(x) * v[1];
  y = hp::fusion::maximum(y, x) - hp::fusion::sigmoid(y) / (y * y + 1.0);
  return VarList{y};
}

double median_us(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1e6;
}

// arg 0: the 10-op cluster (nothing to canonicalize); 1: the composed GELU-tanh (10 ops, rewritten
// to one gelu_tanh node on the miss: the canonicalization's cost when it fires).
void BM_compile(benchmark::State& state) {
  const bool gelu = state.range(0) == 1;
  const std::vector<Tensor> xs = {hp::randn({64, 1024}), hp::randn({1024})};
  const std::vector<Tensor> gx = {hp::randn({64, 1024})};
  std::vector<double> times;
  for (auto _ : state) {
    hp::fusion::Fused f =
        gelu ? hp::fusion::fuse([](const VarList& v) { return VarList{gelu_tanh_composed(v[0])}; })
             : hp::fusion::fuse(ten_ops);
    auto t0 = std::chrono::steady_clock::now();
    auto p = f.plan(gelu ? gx : xs);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(p.get());
  }
  best_ms()[gelu ? "compile_gelu_median_us" : "compile_median_us"] = median_us(times);
  state.counters["median_us"] = median_us(times);
}

void BM_cache_hit(benchmark::State& state) {
  const std::vector<Tensor> xs = {hp::randn({64, 1024}), hp::randn({1024})};
  hp::fusion::Fused f = hp::fusion::fuse(ten_ops);
  f.plan(xs);
  std::vector<double> times;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto p = f.plan(xs);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(p.get());
  }
  best_ms()["cache_hit_median_us"] = median_us(times);
  state.counters["median_us"] = median_us(times);
}

void summary() {
  auto& m = best_ms();
  std::printf("\nsummary (best ms, %d threads; memcpy %.1f GB/s):\n", hp::num_threads(),
              memcpy_ceiling());
  for (const char* op : {"silu", "gelu_tanh"}) {
    const std::string o = op;
    const double f = m[o + "/fused"], h = m[o + "/hand"], c = m[o + "/chain"];
    std::printf(
        "  %-10s fused %7.2f  hand %7.2f  chain %7.2f  fused/hand %.2fx (target <= 1.10)  "
        "saved vs chain %.0f%% (target >= 75%%)  torch chain %s\n",
        op, f, h, c, f / h, 100.0 * (1.0 - f / c),
        hp::bench::ratio_str(peer_ms(o + "_composed"), f).c_str());
  }
  std::printf(
      "  in cache (256 KiB): silu fused %.4f (x*1/(1+exp(-x)) %.4f)  hand %.4f  chain "
      "%.4f  fused/hand %.2fx  chain/hand %.2fx\n",
      m["in_cache/silu/fused"], m["in_cache/silu/primitives"], m["in_cache/silu/hand"],
      m["in_cache/silu/chain"], m["in_cache/silu/fused"] / m["in_cache/silu/hand"],
      m["in_cache/silu/chain"] / m["in_cache/silu/hand"]);
  std::printf(
      "  in cache (256 KiB): gelu_tanh fused %.4f  hand %.4f  chain %.4f  fused/hand "
      "%.2fx  chain/hand %.2fx\n",
      m["in_cache/gelu_tanh/fused"], m["in_cache/gelu_tanh/hand"], m["in_cache/gelu_tanh/chain"],
      m["in_cache/gelu_tanh/fused"] / m["in_cache/gelu_tanh/hand"],
      m["in_cache/gelu_tanh/chain"] / m["in_cache/gelu_tanh/hand"]);
  for (const char* op : {"softmax", "rms_norm"}) {
    const std::string o = op;
    std::printf("  %-10s fused %7.2f  hand %7.2f  fused/hand %.2fx  torch %s\n", op,
                m[o + "/fused"], m[o + "/hand"], m[o + "/fused"] / m[o + "/hand"],
                hp::bench::ratio_str(peer_ms(o), m[o + "/fused"]).c_str());
  }
  for (const char* op : {"rms_norm_fb", "swiglu_fb"}) {
    const std::string o = op;
    std::printf("  %-11s fused %7.2f  hand %7.2f  fused/hand %.2fx (target <= 1.10)\n", op,
                m[o + "/fused"], m[o + "/hand"], m[o + "/fused"] / m[o + "/hand"]);
  }
  // Softmax's and RMSNorm·w's fused rows run their stencils (the hand kernels); the engine's own
  // programs of the same graphs, beside them.
  std::printf("  softmax generic program (patterns off): %.2f ms (%.2fx hand)\n",
              m["softmax/generic"], m["softmax/generic"] / m["softmax/hand"]);
  std::printf(
      "  rms_norm generic program (patterns off): fwd %.2f ms (%.2fx hand), fwd+bwd %.2f "
      "ms (%.2fx hand)\n",
      m["rms_norm/generic"], m["rms_norm/generic"] / m["rms_norm/hand"], m["rms_norm_fb/generic"],
      m["rms_norm_fb/generic"] / m["rms_norm_fb/hand"]);
  for (const char* op : {"model_swiglu_bf16", "model_swiglu_f32", "model_rms_norm_bf16"}) {
    const std::string o = op;
    std::printf("  %-19s fwd+bwd fused %7.3f  none %7.3f  fused/none %.2fx\n", op, m[o + "/fused"],
                m[o + "/none"], m[o + "/fused"] / m[o + "/none"]);
  }
  std::printf("  compile (10-op cluster, trace + compile) median %.2f us (target < 20)\n",
              m["compile_median_us"]);
  std::printf("  compile of the composed GELU-tanh (10 ops, canonicalized to 1) median %.2f us\n",
              m["compile_gelu_median_us"]);
  std::printf("  cache hit (trace + lookup) median %.3f us (target < 1)\n",
              m["cache_hit_median_us"]);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("memcpy ceiling (64 MiB, read + write): %.1f GB/s\n", memcpy_ceiling());
  auto reg = [](const char* name, void (*fn)(benchmark::State&), int64_t arg, int iters) {
    benchmark::RegisterBenchmark(name, fn)->Arg(arg)->UseRealTime()->Iterations(iters)->Unit(
        benchmark::kMillisecond);
  };
  reg("memcpy", BM_memcpy, 0, 10);
  reg("silu/fused", BM_silu, 0, 10);
  reg("silu/hand", BM_silu, 1, 10);
  reg("silu/chain", BM_silu, 2, 10);
  reg("gelu_tanh/fused", BM_gelu_tanh, 0, 10);
  reg("gelu_tanh/hand", BM_gelu_tanh, 1, 10);
  reg("gelu_tanh/chain", BM_gelu_tanh, 2, 5);
  reg("in_cache/silu/fused", BM_in_cache, 0, 2000);
  reg("in_cache/silu/hand", BM_in_cache, 1, 2000);
  reg("in_cache/gelu_tanh/fused", BM_in_cache, 2, 2000);
  reg("in_cache/gelu_tanh/hand", BM_in_cache, 3, 2000);
  reg("in_cache/silu/chain", BM_in_cache, 4, 2000);
  reg("in_cache/gelu_tanh/chain", BM_in_cache, 5, 2000);
  reg("in_cache/silu/primitives", BM_in_cache, 6, 2000);
  reg("softmax/fused", BM_softmax, 0, 10);
  reg("softmax/hand", BM_softmax, 1, 10);
  reg("softmax/generic", BM_softmax, 2, 10);
  reg("rms_norm/fused", BM_rms_norm, 0, 10);
  reg("rms_norm/hand", BM_rms_norm, 1, 10);
  reg("rms_norm/generic", BM_rms_norm, 2, 10);
  reg("rms_norm_fb/fused", BM_fwd_bwd, 0, 5);
  reg("rms_norm_fb/hand", BM_fwd_bwd, 1, 5);
  reg("swiglu_fb/fused", BM_fwd_bwd, 2, 5);
  reg("swiglu_fb/hand", BM_fwd_bwd, 3, 5);
  reg("rms_norm_fb/generic", BM_fwd_bwd, 4, 5);
  for (int v = 0; v < 6; ++v) {
    const char* names[] = {"model_swiglu_bf16/fused",   "model_swiglu_bf16/none",
                           "model_swiglu_f32/fused",    "model_swiglu_f32/none",
                           "model_rms_norm_bf16/fused", "model_rms_norm_bf16/none"};
    reg(names[v], BM_model_patterns, v, 30);
  }
  benchmark::RegisterBenchmark("compile_10op", BM_compile)
      ->Arg(0)
      ->Iterations(2000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("compile_gelu_composed", BM_compile)
      ->Arg(1)
      ->Iterations(2000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("cache_hit_10op", BM_cache_hit)
      ->Iterations(20000)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  summary();
  return 0;
}
