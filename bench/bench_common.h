// Shared helpers for benchmarks: the machine ceilings (memcpy bandwidth) and the peer (PyTorch)
// figures that every benchmark prints beside its own, as ratios from the same run.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hp/core/thread_pool.h"

namespace hp::bench {

// Copies `bytes` from src to dst split over the thread pool (HP_NUM_THREADS threads), as the
// kernels it is compared with are: on two cores one thread's memcpy reaches only part of the
// machine's bandwidth, which made 2-thread ops read up to 1.7× "memcpy".
inline void parallel_copy(char* dst, const char* src, size_t bytes) {
  hp::parallel_for(0, static_cast<int64_t>(bytes), int64_t(1) << 20, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, static_cast<size_t>(e - b));
  });
}

// Best-of-n memcpy bandwidth in GB/s (read + write bytes counted) for a buffer of `bytes`, copied
// with the thread pool's threads (parallel_copy).
inline double memcpy_gbps(size_t bytes = size_t(64) << 20, int reps = 5) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_copy(b.data(), a.data(), bytes);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

// Runs `python bench/peers/<script> <args>` (python = $HP_PEER_PYTHON or python3) and returns the
// number on its last output line, or NaN when the peer is unavailable (torch not installed).
inline double run_peer(const std::string& script, const std::string& args) {
  const char* py = std::getenv("HP_PEER_PYTHON");
  const char* root = std::getenv("HP_SOURCE_DIR");
  std::string dir = root ? std::string(root) + "/bench/peers/" : std::string(HP_BENCH_PEERS_DIR "/");
  std::string cmd = std::string(py ? py : "python3") + " " + dir + script + " " + args + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return std::nan("");
  char line[512];
  std::string last;
  while (std::fgets(line, sizeof line, f)) last = line;
  int rc = pclose(f);
  if (rc != 0 || last.empty()) return std::nan("");
  char* end = nullptr;
  double v = std::strtod(last.c_str(), &end);
  return end == last.c_str() ? std::nan("") : v;
}

// Best-of-reps f32 GEMM rate (GFLOP/s) of OpenBLAS on 2048×2048×64 (one head's attention score
// product: the block products' shape class), on the threads OpenBLAS is set to use. The ceiling of
// the attention benchmarks.
inline double sgemm_attention_gflops(int reps) {
  const int m = 2048, n = 2048, k = 64;
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k,
                0.0f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * m * n * k / best / 1e9;
}

// Seconds of fn's fastest of `reps` calls, after one warm-up call.
inline double best_seconds(const std::function<void()>& fn, int reps) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// "0.93x", or "n/a" when either figure is missing (a peer that did not run: NaN or <= 0).
inline std::string ratio_str(double ours, double ref) {
  if (!(ref > 0) || !(ours > 0)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", ours / ref);
  return buf;
}

}  // namespace hp::bench
