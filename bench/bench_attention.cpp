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
//
// Every row runs once per SIMD ISA the CPU has (the ISA is in the row name, `attention_fwd_bwd/
// avx512/Hq8_Hkv8`). The end prints the avx512 / avx2 speed ratio of each fwd+bwd shape from one
// more pass in which the two ISAs alternate call by call (rows run one after the other see
// different load on a shared machine; alternating calls see the same).
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
#include "hp/kernels/cpu/isa.h"

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

constexpr int64_t kT = 2048, kD = 64;

// One causal problem (T = 2048, D = 64, B = 1) with its operands; `doc_len` > 0 packs documents
// of that length. seconds(mode) times one call: mode 0 fwd+bwd, 1 fwd only, 2 bwd only.
struct Problem {
  int64_t hq, hkv;
  std::vector<float> q, k, v, o, lse, g, dq, dk, dv;
  std::vector<int32_t> seg;
  AttentionShape shape;
  AttentionOptions opt;  // causal, scale 1/sqrt(D), f32
  AttentionStrides sq, skv;
  Problem(int64_t hq_, int64_t hkv_, int64_t doc_len)
      : hq(hq_),
        hkv(hkv_),
        q(hq * kT * kD),
        k(hkv * kT * kD),
        v(hkv * kT * kD),
        o(hq * kT * kD),
        lse(hq * kT),
        g(hq * kT * kD),
        dq(hq * kT * kD),
        dk(hkv * kT * kD),
        dv(hkv * kT * kD),
        seg(kT),
        shape{1, hq, hkv, kT, kT, kD},
        sq(attention_strides_bhtd(hq, kT, kD)),
        skv(attention_strides_bhtd(hkv, kT, kD)) {
    std::mt19937 rng(0);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (auto* x : {&q, &k, &v, &g})
      for (auto& e : *x) e = n(rng);
    for (int64_t t = 0; t < kT; ++t) seg[t] = doc_len > 0 ? int32_t(t / doc_len) : 0;
    if (doc_len > 0) opt.segments = {seg.data(), kT, seg.data(), kT};
  }
  void fwd() {
    attention_forward(shape, opt, {q.data(), sq}, {k.data(), skv}, {v.data(), skv},
                      {o.data(), sq}, lse.data());
  }
  void bwd() {
    attention_backward(shape, opt, {q.data(), sq}, {k.data(), skv}, {v.data(), skv},
                       {o.data(), sq}, lse.data(), {g.data(), sq}, {dq.data(), sq},
                       {dk.data(), skv}, {dv.data(), skv});
  }
  double seconds(int64_t mode) {
    auto t0 = std::chrono::steady_clock::now();
    if (mode != 2) fwd();
    if (mode != 1) bwd();
    benchmark::ClobberMemory();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// mode 0: fwd+bwd, 1: fwd only, 2: bwd only; range(3): document length (0: one document);
// range(4): the Isa (cast) whose kernels run.
void BM_Attention(benchmark::State& state) {
  const int64_t hq = state.range(0), hkv = state.range(1), mode = state.range(2);
  const int64_t doc_len = state.range(3), T = kT, D = kD;
  set_active_isa(static_cast<Isa>(state.range(4)));
  Problem p(hq, hkv, doc_len);
  p.fwd();
  // Best iteration (wall clock): the machine is shared, and the best run is the repeatable figure.
  double best = 1e30;
  for (auto _ : state) best = std::min(best, p.seconds(mode));
  reset_active_isa();
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
  struct Row {
    const char* name;
    int64_t hq, hkv, mode, doc_len, iterations;
  };
  const Row rows[] = {{"attention_fwd_bwd/%s/Hq8_Hkv8", 8, 8, 0, 0, 5},
                      {"attention_fwd_bwd/%s/Hq8_Hkv2", 8, 2, 0, 0, 5},
                      {"attention_fwd_bwd/%s/Hq8_Hkv8_docs256", 8, 8, 0, 256, 5},
                      {"attention_fwd/%s/Hq8_Hkv8", 8, 8, 1, 0, 12},
                      {"attention_bwd/%s/Hq8_Hkv8", 8, 8, 2, 0, 5}};
  const Isa isas[] = {Isa::avx512, Isa::avx2};
  for (const Row& r : rows)
    for (Isa isa : isas) {
      if (!isa_supported(isa)) continue;
      char name[96];
      std::snprintf(name, sizeof name, r.name, isa_name(isa));
      benchmark::RegisterBenchmark(name, BM_Attention)
          ->Args({r.hq, r.hkv, r.mode, r.doc_len, static_cast<int64_t>(isa)})
          ->UseRealTime()
          ->Iterations(r.iterations);
    }
  benchmark::RunSpecifiedBenchmarks();
  // avx512 vs avx2 on the fwd+bwd shapes: the two ISAs alternate call by call on one problem, so
  // both see the same load on a shared machine; best of kRounds each.
  if (isa_supported(Isa::avx512) && isa_supported(Isa::avx2)) {
    constexpr int kRounds = 6;
    for (const Row& r : rows) {
      if (r.mode != 0) continue;
      Problem p(r.hq, r.hkv, r.doc_len);
      double best[2] = {1e30, 1e30};
      for (int round = 0; round < kRounds; ++round)
        for (int i = 0; i < 2; ++i) {
          set_active_isa(isas[i]);
          if (round == 0) p.fwd();  // warm: lse for bwd, pages touched
          best[i] = std::min(best[i], p.seconds(0));
        }
      reset_active_isa();
      char row[96];
      std::snprintf(row, sizeof row, r.name, "*");
      std::printf("avx512 / avx2 speed %-36s %s (best %.1f ms vs %.1f ms, interleaved)\n", row,
                  hp::bench::ratio_str(best[1], best[0]).c_str(), best[0] * 1e3, best[1] * 1e3);
    }
  }
  benchmark::Shutdown();
  return 0;
}
