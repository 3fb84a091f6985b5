// Flash attention (f32, causal) forward + backward at T = 2048, D = 64: tokens/s, GFLOP/s, the
// ratio to the f32 GEMM rate measured in the same run (the ceiling: attention is a chain of block
// GEMMs plus exp), and the ratio to PyTorch's scaled_dot_product_attention on the same shape and
// thread count.
//
// FLOPs are counted the usual way (useful work, not what the kernel actually executes): causal
// forward = 2 GEMMs of 2·T²·D/2 = 2·T²·D per head, backward = 2.5× forward, so fwd+bwd = 7·T²·D
// per q head. Blocks on the causal diagonal are computed whole, which this count ignores.
//
// `docs256` rows pack 8 documents of 256 tokens (data.document_mask: attention within each): the
// kernel skips the key blocks of other documents, so best_ms drops by about the 8× less work; its
// FLOP figures still count the whole causal row (compare best_ms with the plain row's).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/attention.h"

namespace {

using namespace hp::kernels;

// The f32 GEMM ceiling (bench_common.h) with OpenBLAS on as many threads as the hp pool.
// Re-measured after each attention benchmark and the best kept: the machine is shared, so a
// ceiling taken once can catch a busy moment.
double sgemm_gflops() {
  static double rate = 0;
  rate = std::max(rate, hp::bench::sgemm_attention_gflops(30));
  return rate;
}

// PyTorch fwd+bwd seconds for (Hq, Hkv), cached per config.
double peer_seconds(int64_t hq, int64_t hkv, int64_t T, int64_t D) {
  static std::map<std::string, double> cache;
  const std::string args = "1 " + std::to_string(hq) + " " + std::to_string(hkv) + " " +
                           std::to_string(T) + " " + std::to_string(D) + " " +
                           std::to_string(hp::num_threads());
  auto it = cache.find(args);
  if (it == cache.end()) it = cache.emplace(args, hp::bench::run_peer("attention.py", args)).first;
  return it->second;
}

struct Buffers {
  std::vector<float> q, k, v, o, lse, g, dq, dk, dv;
  Buffers(int64_t hq, int64_t hkv, int64_t T, int64_t D)
      : q(hq * T * D),
        k(hkv * T * D),
        v(hkv * T * D),
        o(hq * T * D),
        lse(hq * T),
        g(hq * T * D),
        dq(hq * T * D),
        dk(hkv * T * D),
        dv(hkv * T * D) {
    std::mt19937 rng(0);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (auto* x : {&q, &k, &v, &g})
      for (auto& e : *x) e = n(rng);
  }
};

// mode 0: fwd+bwd, 1: fwd only, 2: bwd only; range(3): document length (0: one document).
void BM_Attention(benchmark::State& state) {
  const int64_t hq = state.range(0), hkv = state.range(1), mode = state.range(2);
  const int64_t doc_len = state.range(3);
  const int64_t T = 2048, D = 64;
  Buffers buf(hq, hkv, T, D);
  const AttentionShape shape{1, hq, hkv, T, T, D};
  AttentionOptions opt;  // causal, scale 1/sqrt(D), f32
  std::vector<int32_t> seg(T);
  for (int64_t t = 0; t < T; ++t) seg[t] = doc_len > 0 ? int32_t(t / doc_len) : 0;
  if (doc_len > 0) opt.segments = {seg.data(), T, seg.data(), T};
  const auto sq = attention_strides_bhtd(hq, T, D), skv = attention_strides_bhtd(hkv, T, D);
  auto fwd = [&] {
    attention_forward(shape, opt, {buf.q.data(), sq}, {buf.k.data(), skv}, {buf.v.data(), skv},
                      {buf.o.data(), sq}, buf.lse.data());
  };
  auto bwd = [&] {
    attention_backward(shape, opt, {buf.q.data(), sq}, {buf.k.data(), skv}, {buf.v.data(), skv},
                       {buf.o.data(), sq}, buf.lse.data(), {buf.g.data(), sq}, {buf.dq.data(), sq},
                       {buf.dk.data(), skv}, {buf.dv.data(), skv});
  };
  fwd();
  // Best iteration (wall clock): the machine is shared, and the best run is the repeatable figure.
  double best = 1e30;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    if (mode != 2) fwd();
    if (mode != 1) bwd();
    benchmark::ClobberMemory();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double fwd_flops = 2.0 * double(T) * T * D * hq;
  const double flops = fwd_flops * (mode == 0 ? 3.5 : mode == 1 ? 1.0 : 2.5);
  const double gflops = flops / best / 1e9;
  state.counters["best_ms"] = best * 1e3;
  state.counters["tokens/s"] = double(T) / best;
  state.counters["GFLOP/s"] = gflops;
  state.counters["vs_gemm"] = gflops / sgemm_gflops();
  state.counters["threads"] = hp::num_threads();
  if (mode != 0 || doc_len > 0) return;
  const double peer = peer_seconds(hq, hkv, T, D);
  state.counters["torch_ms"] = peer * 1e3;
  state.counters["vs_torch"] = peer / best;  // > 1: faster than PyTorch
  state.SetLabel("vs torch " + hp::bench::ratio_str(peer, best));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  openblas_set_num_threads(hp::num_threads());  // this process only: a like-for-like ceiling
  const double gemm = sgemm_gflops();
  std::printf("f32 GEMM ceiling (OpenBLAS sgemm 2048x2048x64, %d threads): %.1f GFLOP/s at start\n",
              hp::num_threads(), gemm);
  benchmark::RegisterBenchmark("attention_fwd_bwd/Hq8_Hkv8", BM_Attention)
      ->Args({8, 8, 0, 0})
      ->UseRealTime()
      ->Iterations(5);
  benchmark::RegisterBenchmark("attention_fwd_bwd/Hq8_Hkv2", BM_Attention)
      ->Args({8, 2, 0, 0})
      ->UseRealTime()
      ->Iterations(5);
  benchmark::RegisterBenchmark("attention_fwd_bwd/Hq8_Hkv8_docs256", BM_Attention)
      ->Args({8, 8, 0, 256})
      ->UseRealTime()
      ->Iterations(5);
  benchmark::RegisterBenchmark("attention_fwd/Hq8_Hkv8", BM_Attention)
      ->Args({8, 8, 1, 0})
      ->UseRealTime()
      ->Iterations(12);
  benchmark::RegisterBenchmark("attention_bwd/Hq8_Hkv8", BM_Attention)
      ->Args({8, 8, 2, 0})
      ->UseRealTime()
      ->Iterations(5);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
