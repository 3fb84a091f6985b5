// gemm_peak_gflops: the machine's GEMM ceiling as this build reaches it, for MFU
// (docs/ARCHITECTURE.md §4, "against the peak measured on the machine, not a hard-coded table").
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm.h"

namespace hp::kernels {
namespace detail {
namespace {

// 2048^3 multiply-adds: ~0.12 s per call at 140 GFLOP/s, large enough for every tile to reach
// steady state. One warm-up call (page faults, packing buffers), then the best of three.
constexpr int64_t kPeakDim = 2048;
constexpr int kPeakReps = 3;

double measure_peak(DType dt) {
  const int64_t n = kPeakDim;
  std::vector<float> a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n));
  for (int64_t i = 0; i < n * n; ++i) {
    a[size_t(i)] = float(i % 7 - 3) * 0.125f;
    b[size_t(i)] = float(i % 5 - 2) * 0.25f;
  }
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  std::transform(a.begin(), a.end(), a16.begin(), f32_to_bf16);
  std::transform(b.begin(), b.end(), b16.begin(), f32_to_bf16);
  auto run = [&] {
    if (dt == DType::f32)
      gemm_f32(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    else
      gemm_bf16(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(),
                DType::f32, n);
  };
  run();
  double best = 1e30;
  for (int r = 0; r < kPeakReps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

}  // namespace
}  // namespace detail

double gemm_peak_gflops(DType dt) {
  if (dt != DType::f32 && dt != DType::bf16)
    HP_THROW(ValueError, "gemm", "no GEMM peak for dtype ", dtype_name(dt), " (f32 and bf16 only)");
  static std::mutex mu;
  static std::map<std::pair<DType, int>, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dt, num_threads());
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, detail::measure_peak(dt)).first;
  return it->second;
}

}  // namespace hp::kernels
